"""Gather and GatherElements. Gather is the shared parallel gather (``_copy.take``) with the
indices as the offset table of the gathered axis; GatherElements runs one parallel loop over a
(outer, axis, inner) view, reading ``data[o, indices[o, k, i], i]``."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.geometry import checked_indices as _checked
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel, shard_count
from ._copy import strides, take

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _gather_elements(x, idx, y):
    o_n, k_n, i_n = idx.shape
    for p in prange(o_n * k_n):
        o = p // k_n
        k = p - o * k_n
        src, ind, dst = x[o], idx[o, k], y[o, k]
        for i in range(i_n):
            dst[U(i)] = src[ind[U(i)], U(i)]


def gather(data, indices, *, axis=0, out=None):
    axis = axis % data.ndim
    idx = _checked(indices, data.shape[axis])
    shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
    if shard_count(idx.size, 2.0 * math.prod(shape)) <= 1:
        # one thread: NumPy's take (GPT-2's token embedding, 64 rows of a 50257 x 768 table: 21 us
        # against 144 us through the offset tables, whose axis tables alone cost 46 us to build);
        # the indices are checked and non-negative, so "clip" only skips take's buffered bounds check
        if out is None:
            return np.take(data, idx, axis=axis, mode="clip")
        if out.shape == shape and out.flags.c_contiguous:
            np.take(data, idx, axis=axis, out=out, mode="clip")
        else:
            np.copyto(out, np.take(data, idx, axis=axis, mode="clip").reshape(out.shape))
        return out
    st = strides(data)
    tables = [np.arange(d, dtype=np.int64) * s for d, s in zip(data.shape, st)]
    tables[axis] = idx.reshape(-1) * st[axis]
    y = take(data, tables, out=out)
    return out if out is not None else y.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])


def gather_elements(data, indices, *, axis=0, out=None):
    axis = axis % data.ndim
    idx = np.ascontiguousarray(_checked(indices, data.shape[axis]))
    if idx.ndim != data.ndim or any(i != d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
        raise ValueError(f"indices {idx.shape} must have the rank of data {data.shape} and its dims but on axis {axis}")
    y = np.empty(idx.shape, data.dtype) if out is None else out
    if y.size:
        outer, inner = math.prod(idx.shape[:axis]), math.prod(idx.shape[axis + 1:])
        _gather_elements(np.ascontiguousarray(data).reshape(outer, data.shape[axis], inner),
                         idx.reshape(outer, idx.shape[axis], inner), y.reshape(outer, idx.shape[axis], inner))
    return y


def _gather_serial(input_specs, axis=0):
    """``fn.serial`` of Gather (``_base.FunctionKernel``): static shapes on one thread, the checked
    indices straight to NumPy's take into the output (the general path cost ~30 us a node inside
    BERT: its embedding and pooler gathers, 0.03-0.1 ms); constant (read-only) indices are checked
    once, on their first call."""
    if len(input_specs) != 2 or any(s is None or not s.is_static or s.layout for s in input_specs):
        return None
    rank = len(input_specs[0].shape)
    if rank == 0:
        return None
    ax = axis % rank
    dim = input_specs[0].shape[ax]
    shape = tuple(input_specs[0].shape[:ax]) + tuple(input_specs[1].shape) + tuple(input_specs[0].shape[ax + 1:])

    kept: list = [None, None]  # (a read-only indices array: a constant, its checked indices)

    def call(data, indices, *, out=None):
        hit = kept
        if hit[0] is indices:  # the same constant as last call (BERT's pooler row: a 0-d 0)
            idx = hit[1]
        else:
            idx = _checked(indices, dim)
            if not indices.flags.writeable:
                kept[:] = [indices, idx]
        if out is None:
            return np.take(data, idx, axis=ax, mode="clip")
        if out.shape == shape and out.flags.c_contiguous:
            return np.take(data, idx, axis=ax, out=out, mode="clip")
        np.copyto(out, np.take(data, idx, axis=ax, mode="clip").reshape(out.shape))
        return out

    return call


gather.serial = _gather_serial
register_kernel("Gather", device="cpu", vendor="numba", dtype="float32")(threaded(gather))
register_kernel("GatherElements", device="cpu", vendor="numba", dtype="float32")(threaded(gather_elements))

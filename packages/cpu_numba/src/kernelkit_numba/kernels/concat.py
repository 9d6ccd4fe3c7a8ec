"""Concat and Split: every tensor is seen as an (outer, axis * inner) row-major matrix and each
input (output) is one column block of the result (source), copied by a parallel row loop."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.ops.split import split_sizes
from kernelkit.registry import register_kernel

from .._base import threaded
from ..config import shard_count
from ._copy import as_matrix, copy_cols


def concat(*inputs, axis, out=None):
    first = inputs[0]
    axis = axis % max(first.ndim, 1)
    for x in inputs:
        if x.ndim != first.ndim or x.shape[:axis] + x.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]:
            raise ValueError(f"Concat on axis {axis}: shapes {[t.shape for t in inputs]} differ off the axis")
    total = sum(x.shape[axis] for x in inputs)
    y = np.empty(first.shape[:axis] + (total,) + first.shape[axis + 1:], first.dtype) if out is None else out
    dst = as_matrix(y, axis)
    col = 0
    for x in inputs:
        m = as_matrix(x.astype(y.dtype, copy=False), axis)
        copy_cols(m, dst, 0, col, m.shape[1])
        col += m.shape[1]
    return y


def split(x, split=None, *, axis=0, num_outputs=None):
    axis = axis % x.ndim
    sizes = split_sizes(x.shape[axis], None if split is None else [int(s) for s in split], num_outputs)
    if shard_count(math.prod(x.shape[:axis]), 2.0 * x.size) <= 1:
        # one thread: views, as the reference returns (the memory plan keeps x alive while they
        # are read). A copy here only moved the next node's strided read: GPT-2's Q/K/V parts go to
        # Reshape (a view) and Transpose (a copy either way), the detection head's to NumPy ufuncs
        # (Xeon: 12 Splits of GPT-2 slower than the reference, 0.17 vs 0.04 ms the head's)
        return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))
    src = as_matrix(x, axis)
    inner = math.prod(x.shape[axis + 1:])
    outs, col = [], 0
    for s in sizes:
        y = np.empty(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype)
        copy_cols(src, as_matrix(y, axis), col, 0, s * inner)
        col += s * inner
        outs.append(y)
    return tuple(outs)


register_kernel("Concat", device="cpu", vendor="numba", dtype=("float32", "int8", "uint8"))(threaded(concat))
register_kernel("Split", device="cpu", vendor="numba", dtype="float32")(threaded(split))

"""Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth.

Slice returns a view and Transpose a NumPy copy of the permuted view (sharded), as fast as the
reference; the others are one parallel gather each.

Each op only builds per-axis source-offset tables (``_copy.take``); the copy itself is the shared
parallel row loop. Transpose, Expand and the depth/space ops read the tables off a NumPy view of
the input (a permuted or zero-stride view: no data moves until the kernel runs).
"""
from __future__ import annotations

import numpy as np
from kernelkit.limits import check_tensor_bytes
from kernelkit.ops.slice import slices
from kernelkit.registry import register_kernel

from .. import config
from .._base import threaded
from ._copy import strides, take


def _view_tables(view, itemsize):
    """Offset tables of a view (zero offset) of a C-contiguous array."""
    return [np.arange(d, dtype=np.int64) * (s // itemsize) for d, s in zip(view.shape, view.strides)]


def _through_view(x, make_view, out_shape, out=None):
    xc = np.ascontiguousarray(x)
    y = take(xc, _view_tables(make_view(xc), xc.itemsize), out=out)
    return out if out is not None else y.reshape(out_shape)


def copy_view(view, out=None):
    """A C-contiguous copy of a strided view by NumPy's copy loops (faster than the generic row
    gather of ``take`` for permutations and plain slices: 0.79 vs 1.25 ms for an NCHW->NHWC
    transpose of 1x64x112x112), cut along the first axis long enough to shard (NumPy releases the
    GIL while it copies)."""
    if out is None:
        out = np.empty(view.shape, view.dtype)
    axis = next((k for k, d in enumerate(view.shape) if d >= 4), None)
    if axis is None or view.size < 2 * config.MIN_SHARD_WORK:
        np.copyto(out, view)
        return out
    lead = (slice(None),) * axis

    def shard(lo, hi):
        np.copyto(out[lead + (slice(lo, hi),)], view[lead + (slice(lo, hi),)])

    config.parallel_for(shard, view.shape[axis], (), 2.0 * view.size)
    return out


def transpose(x, *, perm=None, out=None):
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(p % max(x.ndim, 1) for p in perm) != list(range(x.ndim)):
        raise ValueError(f"perm {perm} is not a permutation of the {x.ndim} axes")
    return copy_view(np.transpose(x, perm), out)


def _transpose_serial(input_specs, perm=None):
    """``fn.serial`` of Transpose (``_base.FunctionKernel``): the permutation checked once, then each
    call is NumPy's copy of the permuted view into the output, as the reference runs it (the
    general path's per-call checks cost 10-25 us a node inside GPT-2 and BERT, whose attention
    transposes ~0.02 ms of data)."""
    spec = input_specs[0] if input_specs else None
    if spec is None or spec.layout or len(input_specs) != 1:
        return None
    rank = len(spec.shape)
    axes = tuple(range(rank))[::-1] if perm is None else tuple(int(p) % max(rank, 1) for p in perm)
    if sorted(axes) != list(range(rank)):
        return None  # the general path raises the error

    def call(x, *, out=None):
        view = x.transpose(axes)
        if out is None:
            return view.copy()
        np.copyto(out, view)
        return out

    return call


transpose.serial = _transpose_serial
register_kernel("Transpose", device="cpu", vendor="numba", dtype=("float32", "int8", "uint8"))(  # int8: QDQ models
    threaded(transpose))


def slice_(data, starts, ends, axes=None, steps=None):
    """A view, as the reference returns: a copy would only cost time."""
    return data[slices(data.shape, list(starts), list(ends), None if axes is None else list(axes),
                       None if steps is None else list(steps))]


def expand(x, shape, *, out=None):
    shape = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if any(d < 0 for d in shape):
        raise ValueError(f"shape {list(shape)} has a negative dim")
    full = np.broadcast_shapes(x.shape, shape)  # ValueError names both shapes
    if out is None:
        check_tensor_bytes(full, x.dtype)
    return _through_view(x, lambda xc: np.broadcast_to(xc, full), full, out)


def tile(x, repeats, *, out=None):
    repeats = [int(r) for r in np.asarray(repeats).reshape(-1)]
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise ValueError(f"repeats {repeats} must be {x.ndim} non-negative ints for shape {x.shape}")
    if out is None:
        check_tensor_bytes([d * r for d, r in zip(x.shape, repeats)], x.dtype)
    return take(x, [(np.arange(d * r, dtype=np.int64) % max(d, 1)) * s
                    for d, r, s in zip(x.shape, repeats, strides(x))], out=out)


def depth_to_space(x, *, blocksize=1, mode="DCR", out=None):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        def view(xc):
            return xc.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        def view(xc):
            return xc.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return _through_view(x, view, (n, c // (b * b), h * b, w * b), out)


def space_to_depth(x, *, blocksize=1, out=None):
    n, c, h, w = x.shape
    b = blocksize
    return _through_view(x, lambda xc: xc.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4),
                         (n, c * b * b, h // b, w // b), out)


for _name, _fn in {"Slice": slice_, "Expand": expand, "Tile": tile,
                   "DepthToSpace": depth_to_space, "SpaceToDepth": space_to_depth}.items():
    register_kernel(_name, device="cpu", vendor="numba", dtype="float32")(threaded(_fn))

"""Data movement: Reshape, Flatten, Squeeze, Unsqueeze are views (no copy, no wait); Transpose,
Concat, Expand, Slice and Split run the strided-copy kernel of elementwise.cl. Shape and axes inputs are read
from the host copy kept for small constants (no device round trip)."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import ShapeError, register_kernel
from kernelkit.geometry import normalize_axes
from kernelkit.ops.reshape import resolve_shape
from kernelkit.ops.slice import slices
from kernelkit.ops.split import split_sizes

from ._common import contiguous_strides, launch_1d
from .elementwise import broadcast_strides, collapse, ew_kernel

COPY_DTYPES = ("float32", "float16")


def strided_copy(src, dst, dims, src_strides, dst_strides, src_base: int = 0, dst_base: int = 0):
    """dst[dst_base + sum(c*dst_strides)] = src[src_base + sum(c*src_strides)] over ``dims``."""
    dev = src.device
    n = math.prod(dims)
    if n == 0:
        return
    dims, (ss, ds) = collapse(dims, src_strides, dst_strides)
    meta = dev.meta([len(dims), *dims, *ss, *ds])
    launch_1d(dev, ew_kernel(dev, "strided_copy", src.dtype), n,
              (src.buffer, dst.buffer, np.int32(n), meta, np.int32(src_base), np.int32(dst_base)),
              [src], [dst], "copy")


def expand(x, shape):
    """``x`` broadcast to ``shape`` as a new contiguous tensor."""
    shape = tuple(np.broadcast_shapes(x.shape, tuple(shape)))
    out = x.device.empty(shape, x.dtype)
    strided_copy(x, out, shape, broadcast_strides(x.shape, shape), contiguous_strides(shape))
    return out


def reshape(data, shape, *, allowzero: int = 0):
    try:
        target = resolve_shape(data.shape, [int(s) for s in shape.values().ravel()], allowzero)
    except ValueError as exc:
        raise ShapeError(f"Reshape: {exc}") from None
    return data.view(target)


def flatten(x, *, axis: int = 1):
    axis = axis + x.ndim if axis < 0 else axis
    return x.view((math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


def squeeze(data, axes=None):
    if axes is None:
        return data.view(tuple(d for d in data.shape if d != 1))
    ax = normalize_axes([int(a) for a in axes.values().ravel()], data.ndim)
    if any(data.shape[a] != 1 for a in ax):
        raise ShapeError(f"Squeeze: cannot squeeze axes {ax} of shape {data.shape}")
    return data.view(tuple(d for i, d in enumerate(data.shape) if i not in ax))


def unsqueeze(data, axes):
    ax = [int(a) for a in axes.values().ravel()]
    rank = data.ndim + len(ax)
    ax = set(normalize_axes(ax, rank))
    rest = iter(data.shape)
    return data.view(tuple(1 if i in ax else next(rest) for i in range(rank)))


def transpose(x, *, perm=None):
    perm = tuple(perm) if perm else tuple(range(x.ndim))[::-1]
    out_shape = tuple(x.shape[p] for p in perm)
    out = x.device.empty(out_shape, x.dtype)
    src = contiguous_strides(x.shape)
    strided_copy(x, out, out_shape, [src[p] for p in perm], contiguous_strides(out_shape))
    return out


def concat(*inputs, axis: int):
    first = inputs[0]
    axis = axis + first.ndim if axis < 0 else axis
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in inputs)
    out = first.device.empty(shape, first.dtype)
    dst = contiguous_strides(shape)
    start = 0
    for t in inputs:
        strided_copy(t, out, t.shape, contiguous_strides(t.shape), dst, 0, start * dst[axis])
        start += t.shape[axis]
    return out


def slice_(data, starts, ends, axes=None, steps=None):
    """Slice as one strided copy: per dim, start offset and step (negative steps too)."""
    def ints(t):
        return None if t is None else [int(v) for v in t.values().ravel()]

    try:
        sls = slices(data.shape, ints(starts), ints(ends), ints(axes), ints(steps))
    except ValueError as exc:
        raise ShapeError(f"Slice: {exc}") from None
    ranges = [range(d)[sl] for d, sl in zip(data.shape, sls)]
    shape = tuple(len(r) for r in ranges)
    out = data.device.empty(shape, data.dtype)
    if all(shape):
        strides = contiguous_strides(data.shape)
        base = sum(r.start * st for r, st in zip(ranges, strides))
        strided_copy(data, out, shape, [r.step * st for r, st in zip(ranges, strides)],
                     contiguous_strides(shape), src_base=base)
    return out


def split(x, split=None, *, axis: int = 0, num_outputs=None):
    axis = axis + x.ndim if axis < 0 else axis
    try:
        sizes = split_sizes(x.shape[axis], None if split is None else [int(v) for v in split.values().ravel()],
                            num_outputs)
    except ValueError as exc:
        raise ShapeError(f"Split: {exc}") from None
    src = contiguous_strides(x.shape)
    outs, start = [], 0
    for size in sizes:
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
        out = x.device.empty(shape, x.dtype)
        if out.size:
            strided_copy(x, out, shape, src, contiguous_strides(shape), src_base=start * src[axis])
        outs.append(out)
        start += size
    return tuple(outs)


def expand_op(x, shape):
    return expand(x, tuple(int(s) for s in shape.values().ravel()))


def register() -> None:
    for op, fn in (("Reshape", reshape), ("Flatten", flatten), ("Squeeze", squeeze), ("Unsqueeze", unsqueeze)):
        register_kernel(op, device="gpu", vendor="opencl", dtype="*")(fn)
    for op, fn in (("Transpose", transpose), ("Concat", concat), ("Expand", expand_op), ("Slice", slice_),
                   ("Split", split)):
        register_kernel(op, device="gpu", vendor="opencl", dtype=COPY_DTYPES)(fn)

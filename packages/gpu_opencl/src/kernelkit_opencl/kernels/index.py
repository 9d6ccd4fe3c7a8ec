"""Indexing and data movement: Gather, GatherElements and Pad (constant/edge/reflect/wrap) run
kernels of ``typed.cl`` for every element type; Tile, DepthToSpace and SpaceToDepth are one
strided copy each (``elementwise.cl``). Index, pad and repeat inputs are read on the host (the
copy kept for small constants) and checked there, so bad values are typed errors, never
out-of-bounds device reads."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import InputError, ShapeError, register_kernel
from kernelkit.geometry import pad_widths

from ._common import contiguous_strides, launch_1d
from .layout import COPY_DTYPES, strided_copy
from .typed import CTYPES, typed_kernel

PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "wrap": 3}


def _indices(op: str, indices, dim: int) -> np.ndarray:
    """``indices`` (a device tensor) on the host, range-checked against ``dim``, made non-negative."""
    idx = np.asarray(indices.values())
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise InputError(f"{op}: an index in [{idx.min()}, {idx.max()}] is out of range for a dim of {dim}")
    return np.where(idx < 0, idx + dim, idx).astype(np.int32)


def _axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def gather(data, indices, *, axis: int = 0):
    dev = data.device
    axis = _axis("Gather", axis, data.ndim)
    idx = _indices("Gather", indices, data.shape[axis])
    out = dev.empty(data.shape[:axis] + idx.shape + data.shape[axis + 1:], data.dtype)
    if out.size:
        ind = dev.upload(idx)
        launch_1d(dev, typed_kernel(dev, "gather", data.dtype), out.size,
                  (data.buffer, ind.buffer, out.buffer, np.int32(out.size), np.int32(max(idx.size, 1)),
                   np.int32(data.shape[axis]), np.int32(math.prod(data.shape[axis + 1:]))),
                  [data, ind], [out], "Gather")
    return out


def gather_elements(data, indices, *, axis: int = 0):
    dev = data.device
    axis = _axis("GatherElements", axis, data.ndim)
    idx = _indices("GatherElements", indices, data.shape[axis])
    if idx.ndim != data.ndim or any(i != d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
        raise ShapeError(f"GatherElements: indices {idx.shape} must match data {data.shape} but on axis {axis}")
    out = dev.empty(idx.shape, data.dtype)
    if out.size:
        ind = dev.upload(idx)
        meta = dev.meta([idx.ndim, *idx.shape, *contiguous_strides(data.shape), axis])
        launch_1d(dev, typed_kernel(dev, "gather_elements", data.dtype), out.size,
                  (data.buffer, ind.buffer, out.buffer, np.int32(out.size), meta), [data, ind], [out],
                  "GatherElements")
    return out


def pad(x, pads, constant_value=None, axes=None, *, mode: str = "constant"):
    dev = x.device
    if mode not in PAD_MODES:
        raise ShapeError(f"Pad: mode {mode!r} is not one of {sorted(PAD_MODES)}")
    try:
        widths = pad_widths(x.shape, pads.values(), None if axes is None else axes.values())
    except ValueError as exc:
        raise ShapeError(f"Pad: {exc}") from None
    crop = [max(-b, 0) for b, _ in widths]
    sizes = [d - c - max(-e, 0) for d, c, (_, e) in zip(x.shape, crop, widths)]
    out_shape = tuple(d + b + e for d, (b, e) in zip(x.shape, widths))
    if mode != "constant":
        if any(s < 0 for s in sizes):
            raise ShapeError(f"Pad: mode {mode!r} cannot crop {widths} from shape {x.shape}")
        if any(s == 0 and (b > 0 or e > 0) for s, (b, e) in zip(sizes, widths)):
            raise ShapeError(f"Pad: mode {mode!r} cannot pad an empty axis of shape {x.shape}")
    y = dev.empty(out_shape, x.dtype)
    if y.size:
        value = constant_value if constant_value is not None else dev.upload(np.zeros((1,), x.dtype))
        strides = contiguous_strides(x.shape)
        meta = dev.meta([x.ndim, *out_shape, *(max(s, 0) for s in sizes), *strides, *(max(b, 0) for b, _ in widths)])
        base = sum(c * s for c, s in zip(crop, strides))
        launch_1d(dev, typed_kernel(dev, "pad", x.dtype), y.size,
                  (x.buffer, y.buffer, value.buffer, np.int32(y.size), meta, np.int32(base),
                   np.int32(PAD_MODES[mode])), [x, value], [y], "Pad")
    return y


def tile(x, repeats):
    reps = [int(r) for r in np.asarray(repeats.values()).ravel()]
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise ShapeError(f"Tile: repeats {reps} must be {x.ndim} non-negative ints for shape {x.shape}")
    out = x.device.empty(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype)
    # out viewed as (r0, d0, r1, d1, ...): the repeat dims read with stride 0
    dims = [v for r, d in zip(reps, x.shape) for v in (r, d)]
    src = [v for s in contiguous_strides(x.shape) for v in (0, s)]
    strided_copy(x, out, dims, src, contiguous_strides(dims))
    return out


def _permuted_copy(x, split_shape, perm, out_shape):
    """x viewed as ``split_shape``, transposed by ``perm``, stored as ``out_shape``."""
    out = x.device.empty(out_shape, x.dtype)
    src = contiguous_strides(split_shape)
    dims = [split_shape[p] for p in perm]
    strided_copy(x, out, dims, [src[p] for p in perm], contiguous_strides(dims))
    return out


def depth_to_space(x, *, blocksize: int = 1, mode: str = "DCR"):
    n, c, h, w = x.shape
    b = blocksize
    if b <= 0 or c % (b * b):
        raise ShapeError(f"DepthToSpace: channels {c} are not divisible by blocksize {b} squared")
    if mode == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    return _permuted_copy(x, split, perm, (n, c // (b * b), h * b, w * b))


def space_to_depth(x, *, blocksize: int = 1):
    n, c, h, w = x.shape
    b = blocksize
    if b <= 0 or h % b or w % b:
        raise ShapeError(f"SpaceToDepth: spatial dims {(h, w)} are not divisible by blocksize {b}")
    return _permuted_copy(x, (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4), (n, c * b * b, h // b, w // b))


def register() -> None:
    for op, fn in (("Gather", gather), ("GatherElements", gather_elements), ("Pad", pad)):
        register_kernel(op, device="gpu", vendor="opencl", dtype=tuple(CTYPES))(fn)
    for op, fn in (("Tile", tile), ("DepthToSpace", depth_to_space), ("SpaceToDepth", space_to_depth)):
        register_kernel(op, device="gpu", vendor="opencl", dtype=COPY_DTYPES)(fn)

"""Spatial ops: AffineGrid (the sampling grid of affine matrices theta, for GridSample; 2-D or
3-D), Col2Im (column blocks summed back into an image, as ConvTranspose's col2im) and MaxUnpool
(MaxPool's values written back at its flat indices, zeros elsewhere)."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import REQUIRED, register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, random


def _ints(v, name, n=None) -> list[int]:
    v = np.asarray(v)
    if v.ndim != 1 or v.dtype.kind not in "iu" or (n is not None and v.size != n):
        raise ValueError(f"{name} must be a 1-D integer tensor{f' of {n}' if n else ''}, got {v.shape} {v.dtype}")
    return [int(a) for a in v]


def _base(size: int, align_corners: int) -> np.ndarray:
    if align_corners:
        return np.linspace(-1, 1, size) if size > 1 else np.zeros(1)
    return (np.arange(size) * 2 + 1) / size - 1


@register_kernel("AffineGrid", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def affine_grid(theta, size, *, align_corners=0):
    size = _ints(size, "size")
    spatial = size[2:]
    if len(spatial) not in (2, 3) or theta.shape != (size[0], len(spatial), len(spatial) + 1):
        raise ValueError(f"theta {theta.shape} does not fit size {size}")
    check_tensor_bytes((size[0], *spatial, len(spatial) + 1), np.float64)
    axes = [_base(n, align_corners) for n in spatial]  # (D,) H, W
    mesh = np.meshgrid(*axes, indexing="ij")
    points = np.stack(list(mesh[::-1]) + [np.ones_like(mesh[0])], axis=-1)  # x, y(, z), 1
    grid = points.reshape(-1, len(spatial) + 1) @ np.swapaxes(theta.astype(np.float64), 1, 2)
    return grid.reshape((size[0], *spatial, len(spatial))).astype(theta.dtype)


@register_kernel("Col2Im", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def col2im(x, image_shape, block_shape, *, dilations=(), pads=(), strides=()):
    image, block = _ints(image_shape, "image_shape"), _ints(block_shape, "block_shape")
    r = len(image)
    dil, st = list(dilations) or [1] * r, list(strides) or [1] * r
    pads = list(pads) or [0] * (2 * r)
    if len(block) != r or len(dil) != r or len(st) != r or len(pads) != 2 * r or min(dil + st) < 1:
        raise ValueError("image_shape, block_shape, dilations, strides and pads disagree in rank")
    padded = [i + pads[d] + pads[d + r] for d, i in enumerate(image)]
    outs = [(p - dl * (k - 1) - 1) // s + 1 for p, k, dl, s in zip(padded, block, dil, st)]
    n, ck, length = x.shape
    kk = math.prod(block)
    if ck % kk or length != math.prod(outs) or min(outs) < 1:
        raise ValueError(f"input {x.shape} does not hold blocks {block} over {outs} positions")
    cols = x.reshape(n, ck // kk, *block, *outs)
    check_tensor_bytes((n, ck // kk, *padded), np.float64)
    y = np.zeros((n, ck // kk, *padded), np.promote_types(x.dtype, np.float32))
    for k in np.ndindex(*block):
        where = tuple(slice(ki * dl, ki * dl + s * (o - 1) + 1, s) for ki, dl, s, o in zip(k, dil, st, outs))
        y[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + k]
    crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(r))
    return np.ascontiguousarray(y[(slice(None), slice(None)) + crop]).astype(x.dtype)


def _unpool_shape(x_shape, kernel_shape, pads, strides):
    r = len(kernel_shape)
    st, pads = list(strides) or [1] * r, list(pads) or [0] * (2 * r)
    return list(x_shape[:2]) + [(d - 1) * s + k - pads[i] - pads[i + r]
                                for i, (d, s, k) in enumerate(zip(x_shape[2:], st, kernel_shape))]


@register_kernel("MaxUnpool", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def max_unpool(x, indices, output_shape=None, *, kernel_shape, pads=(), strides=()):
    """Indices are flat positions in the pooled tensor's input (the default output shape); with a
    larger ``output_shape`` each lands at the same coordinates there."""
    default = _unpool_shape(x.shape, kernel_shape, pads, strides)
    shape = _ints(output_shape, "output_shape", x.ndim) if output_shape is not None else default
    if indices.shape != x.shape or min(default) < 1:
        raise ValueError(f"indices {indices.shape} must have X's shape {x.shape} (unpooled to {default})")
    check_tensor_bytes(shape, x.dtype)
    out = np.zeros(shape, x.dtype)
    flat = indices.reshape(-1).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= math.prod(default)):
        raise IndexError(f"an index is out of range for the unpooled shape {tuple(default)}")
    coords = np.unravel_index(flat, default)
    if any(np.any(c >= n) for c, n in zip(coords, shape)):
        raise IndexError(f"an index lands outside output_shape {tuple(shape)}")
    out[coords] = x.reshape(-1)
    return out


def _affine_rule(ctx: InferContext) -> TensorSpec:
    size = const_ints(ctx, 1)
    r = ctx.inputs[0].shape[1] if isinstance(ctx.inputs[0].shape[1], int) else 2
    if size is None:
        return TensorSpec((ctx.inputs[0].shape[0],) + tuple(ctx.symbol() for _ in range(r)) + (r,), ctx.inputs[0].dtype)
    return TensorSpec((size[0], *size[2:], len(size) - 2), ctx.inputs[0].dtype)


def _col2im_rule(ctx: InferContext) -> TensorSpec:
    x, image, block = ctx.inputs[0], const_ints(ctx, 1), const_ints(ctx, 2)
    channels = x.shape[1] // math.prod(block) if block and isinstance(x.shape[1], int) else ctx.symbol()
    dims = tuple(image) if image is not None else tuple(ctx.symbol() for _ in range(ctx.inputs[1].shape[0]))
    return TensorSpec((x.shape[0], channels) + dims, x.dtype)


def _unpool_rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    if ctx.has(2):
        shape = const_ints(ctx, 2)
        return TensorSpec(tuple(shape) if shape else tuple(ctx.symbol() for _ in range(x.rank)), x.dtype)
    if not all(isinstance(d, int) for d in x.shape[2:]):
        return TensorSpec(x.shape[:2] + tuple(ctx.symbol() for _ in x.shape[2:]), x.dtype)
    a = ctx.attrs
    return TensorSpec(tuple(_unpool_shape(x.shape, a["kernel_shape"], a["pads"], a["strides"])), x.dtype)


def _affine_samples(rng, dtype):
    yield [random(rng, (2, 2, 3), dtype), np.array([2, 3, 4, 5], np.int64)], {}
    yield [random(rng, (1, 3, 4), dtype), np.array([1, 1, 2, 3, 4], np.int64)], {"align_corners": 1}


def _col2im_samples(rng, dtype):
    yield [random(rng, (1, 2 * 4, 12), dtype), np.array([4, 5], np.int64), np.array([2, 2], np.int64)], {}
    yield [random(rng, (2, 3 * 4, 6), dtype), np.array([5, 5], np.int64), np.array([2, 2], np.int64)], \
        {"strides": [2, 2], "pads": [1, 0, 0, 1]}


def _unpool_samples(rng, dtype):
    x = random(rng, (1, 2, 2, 2), dtype)
    idx = np.array([[[[0, 3], [8, 15]], [[17, 18], [28, 31]]]], np.int64)
    yield [x, idx], {"kernel_shape": [2, 2], "strides": [2, 2]}
    yield [x, idx, np.array([1, 2, 5, 5], np.int64)], {"kernel_shape": [2, 2], "strides": [2, 2]}


register_op("AffineGrid", inputs=["theta", "size"], outputs=["grid"], attrs={"align_corners": ("int", 0)},
            infer=_affine_rule, samples=_affine_samples)
register_op("Col2Im", inputs=["input", "image_shape", "block_shape"], outputs=["output"],
            attrs={"dilations": ("ints", ()), "pads": ("ints", ()), "strides": ("ints", ())}, infer=_col2im_rule,
            samples=_col2im_samples)
register_op("MaxUnpool", inputs=["X", "I", "output_shape?"], outputs=["output"],
            attrs={"kernel_shape": ("ints", REQUIRED), "pads": ("ints", ()), "strides": ("ints", ())},
            infer=_unpool_rule, samples=_unpool_samples)

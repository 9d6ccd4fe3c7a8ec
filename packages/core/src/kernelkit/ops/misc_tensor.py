"""Small tensor ops from recent opsets: SwiGLU (Swish(A) * B), TensorScatter (a KV-cache write:
``update`` copied into ``past_cache`` along ``axis`` from each batch entry's write index, modulo the
cache length in ``circular`` mode), BitCast (the same bits as another dtype of equal width) and
CenterCropPad (each listed axis centre-cropped or zero-padded to ``shape``; odd remainders go to
the end)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES, FLOAT_TYPES
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import REQUIRED, register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, random, same_as_input
from .cast import ONNX_DTYPES


@register_kernel("SwiGLU", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def swiglu(a, b, *, alpha=1.0):
    ac = a.astype(np.promote_types(a.dtype, np.float32))
    return (ac / (1 + np.exp(-alpha * ac)) * b).astype(a.dtype)


@register_kernel("TensorScatter", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def tensor_scatter(past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    axis = axis % past_cache.ndim
    if mode not in ("linear", "circular"):
        raise ValueError(f"mode must be linear or circular, got {mode!r}")
    out = past_cache.copy()
    length, steps = past_cache.shape[axis], update.shape[axis]
    starts = np.zeros(past_cache.shape[0], np.int64) if write_indices is None else np.asarray(write_indices, np.int64)
    for b in range(past_cache.shape[0]):
        pos = starts[b] + np.arange(steps)
        if mode == "circular":
            pos %= length
        elif steps and (pos[0] < 0 or pos[-1] >= length):
            raise IndexError(f"batch {b}: writes {pos[0]}..{pos[-1]} leave a cache of {length}")
        np.moveaxis(out[b], axis - 1, 0)[pos] = np.moveaxis(update[b], axis - 1, 0)
    return out


@register_kernel("BitCast", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def bit_cast(x, *, to):
    target = np.dtype(ONNX_DTYPES[to])
    if target.itemsize != x.dtype.itemsize:
        raise ValueError(f"BitCast from {x.dtype} to {target} changes the width")
    return np.array(x, copy=True, order="C").view(target)


def _crop_pad_plan(shape, target, axes):
    axes = list(range(len(shape))) if not axes else [a % len(shape) for a in axes]
    out = list(shape)
    for a, t in zip(axes, target):
        out[a] = int(t)
    return axes, out


@register_kernel("CenterCropPad", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def center_crop_pad(x, shape, *, axes=()):
    axes, out_shape = _crop_pad_plan(x.shape, np.asarray(shape).reshape(-1), axes)
    check_tensor_bytes(out_shape, x.dtype)
    out = np.zeros(out_shape, x.dtype)
    src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for a in axes:
        have, want = x.shape[a], out_shape[a]
        if have >= want:
            start = (have - want) // 2
            src[a] = slice(start, start + want)
        else:
            start = (want - have) // 2
            dst[a] = slice(start, start + have)
    out[tuple(dst)] = x[tuple(src)]
    return out


def _swiglu_rule(ctx: InferContext) -> TensorSpec:
    a, b = ctx.inputs
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ctx.error(f"A {a} and B {b} must have one shape and dtype")
    return a


def _bit_cast_rule(ctx: InferContext) -> TensorSpec:
    to = ctx.attrs["to"]
    if to not in ONNX_DTYPES:
        raise ctx.error(f"to = {to} is not a kernelkit dtype")
    if np.dtype(ONNX_DTYPES[to]).itemsize != np.dtype(ctx.inputs[0].dtype).itemsize:
        raise ctx.error(f"BitCast from {ctx.inputs[0].dtype} to {ONNX_DTYPES[to]} changes the width")
    return TensorSpec(ctx.inputs[0].shape, ONNX_DTYPES[to])


def _crop_pad_rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    target = const_ints(ctx, 1)
    axes = ctx.attrs["axes"]
    if target is None:
        picked = set(range(x.rank)) if not axes else {a % x.rank for a in axes}
        return TensorSpec(tuple(ctx.symbol() if i in picked else d for i, d in enumerate(x.shape)), x.dtype)
    _, out = _crop_pad_plan(x.shape, target, axes)
    return TensorSpec(tuple(out), x.dtype)


def _swiglu_samples(rng, dtype):
    yield [random(rng, (2, 5), dtype), random(rng, (2, 5), dtype)], {}


def _scatter_samples(rng, dtype):
    cache = random(rng, (2, 3, 6, 4), dtype)
    yield [cache, random(rng, (2, 3, 2, 4), dtype), np.array([1, 4], np.int64)], {}
    yield [cache, random(rng, (2, 3, 3, 4), dtype), np.array([5, 0], np.int64)], {"mode": "circular"}


_SAME_WIDTH = {"float16": 5, "int16": 4, "uint16": 10, "float32": 6, "int32": 12, "uint32": 1, "float64": 7,
               "int64": 13, "uint64": 11, "int8": 2, "uint8": 3, "bool": 2}  # a dtype of equal width (ONNX number)


def _bitcast_samples(rng, dtype):
    yield [random(rng, (3, 4), dtype)], {"to": _SAME_WIDTH[dtype]}


def _crop_samples(rng, dtype):
    x = random(rng, (5, 4, 3), dtype)
    yield [x, np.array([3, 6], np.int64)], {"axes": [0, 1]}
    yield [x, np.array([6, 2, 3], np.int64)], {}


register_op("SwiGLU", inputs=["A", "B"], outputs=["Y"], attrs={"alpha": ("float", 1.0)}, infer=_swiglu_rule,
            samples=_swiglu_samples)
register_op("TensorScatter", inputs=["past_cache", "update", "write_indices?"], outputs=["present_cache"],
            attrs={"axis": ("int", -2), "mode": ("string", "linear")}, infer=same_as_input, samples=_scatter_samples)
register_op("BitCast", inputs=["input"], outputs=["output"], attrs={"to": ("int", REQUIRED)}, infer=_bit_cast_rule,
            samples=_bitcast_samples)
register_op("CenterCropPad", inputs=["input_data", "shape"], outputs=["output_data"], attrs={"axes": ("ints", ())},
            infer=_crop_pad_rule, samples=_crop_samples)

"""Pad (ONNX opset 19+): pads, constant_value and axes are inputs; modes constant, reflect, edge,
wrap; negative pads crop."""
from __future__ import annotations

import numpy as np

from ..geometry import pad_widths as _resolve
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ._util import random

MODES = ("constant", "reflect", "edge", "wrap")


def _infer(ctx) -> TensorSpec:
    x, pads = ctx.inputs[0], ctx.inputs[1]
    if ctx.attrs["mode"] not in MODES:
        raise ctx.error(f"mode {ctx.attrs['mode']!r} is not one of {MODES}")
    if pads.dtype != "int64" or pads.rank != 1:
        raise ctx.error(f"pads {pads} must be a 1-D int64 tensor")
    if ctx.has(2) and (ctx.inputs[2].dtype != x.dtype or ctx.inputs[2].size != 1):
        raise ctx.error(f"constant_value {ctx.inputs[2]} must be a scalar of X's dtype {x.dtype}")
    if ctx.has(3) and (ctx.inputs[3].dtype not in ("int32", "int64") or ctx.inputs[3].rank != 1):
        raise ctx.error(f"axes {ctx.inputs[3]} must be a 1-D int32/int64 tensor")
    axes = ctx.value(3) if ctx.has(3) else None
    if ctx.value(1) is None or (ctx.has(3) and axes is None):
        return TensorSpec(tuple(ctx.symbol("p") for _ in x.shape), x.dtype)
    widths = _resolve(x.shape, ctx.value(1), axes, fail=ctx.error)
    shape = tuple(d + b + e if isinstance(d, int) else (d if b == e == 0 else ctx.symbol("p"))
                  for d, (b, e) in zip(x.shape, widths))
    return TensorSpec(shape, x.dtype)


@register_kernel("Pad", device="cpu", vendor="reference", dtype="*", priority=-100)
def pad(x, pads, constant_value=None, axes=None, *, mode="constant"):
    widths = _resolve(x.shape, pads, axes)
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    check_tensor_bytes([size + b + e for size, (b, e) in zip(x.shape, grow)], x.dtype)
    if mode == "constant":  # pad, then crop (as onnxruntime): each axis ends up size + begin + end long
        value = x.dtype.type(0) if constant_value is None else constant_value.reshape(())
        y = np.pad(x, grow, mode="constant", constant_values=value)
        return y[tuple(slice(max(-b, 0), size - max(-e, 0)) for size, (b, e) in zip(y.shape, widths))]
    # other modes crop, then pad (as onnxruntime): the crop must fit in the input
    if any(size + min(b, 0) + min(e, 0) < 0 for size, (b, e) in zip(x.shape, widths)):
        raise ValueError(f"mode {mode!r} cannot crop {[w for w in widths]} from shape {x.shape}")
    y = x[tuple(slice(max(-b, 0), size - max(-e, 0)) for size, (b, e) in zip(x.shape, widths))]
    if any(g != (0, 0) and size == 0 for g, size in zip(grow, y.shape)):
        raise ValueError(f"mode {mode!r} cannot pad an empty axis of shape {y.shape}")
    return np.pad(y, grow, mode=mode)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -5, 5)

    def i64(*v):
        return np.array(v, np.int64)

    yield [r(2, 3), i64(1, 0, 2, 1)], {}
    yield [r(2, 3), i64(0, 2, 1, 1), np.array(7, dtype)], {"mode": "constant"}
    yield [r(3, 4), i64(2, 1, 1, 3)], {"mode": "reflect"}, {"constants": (1,)}
    yield [r(1, 2, 3, 3), i64(0, 0, 1, 2, 0, 0, 2, 1)], {"mode": "edge"}, {"constants": (1,)}
    yield [r(3, 4), i64(1, 2, 2, 1)], {"mode": "wrap"}
    yield [r(2, 5, 4), i64(-1, 2, 1, -2), None, np.array([1, -1], np.int64)], {}  # axes + crop
    yield [r(2, 3, 4), i64(1, 1), np.array(1, dtype), np.array([1], np.int32)], {"mode": "reflect"}
    yield [r(2, 3, 4), i64(2, 0), np.array(3, dtype), np.array([2], np.int64)], {}, {"constants": (1, 2, 3)}


register_op("Pad", inputs=["data", "pads", "constant_value?", "axes?"], outputs=["output"],
            attrs={"mode": ("string", "constant")}, infer=_infer, samples=_samples)

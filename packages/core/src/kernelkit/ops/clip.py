"""Clip (ONNX opset 13+): min and max are optional scalar inputs; when min > max every output is max."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import random


def _infer(ctx) -> TensorSpec:
    x = ctx.inputs[0]
    for name, spec in zip(("min", "max"), ctx.inputs[1:]):
        if spec is None:
            continue
        if spec.dtype != x.dtype:
            raise ctx.error(f"{name} dtype {spec.dtype} differs from input's {x.dtype}")
        if spec.size != 1:
            raise ctx.error(f"{name} {spec} must be a scalar")
    return x


@register_kernel("Clip", device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)
def clip(x, lo=None, hi=None):
    y = x if lo is None else np.maximum(x, lo.reshape(()))
    y = y if hi is None else np.minimum(y, hi.reshape(()))
    return np.array(y, dtype=x.dtype, copy=True)


def _samples(rng, dtype):
    def r(shape, low=0, high=5):
        return random(rng, shape, dtype, low, high)

    signed = not dtype.startswith("u")
    lo, hi = np.array(-1.5 if "float" in dtype else -2 if signed else 1, dtype), np.array(3, dtype)
    yield [r((3, 4), -5 if signed else 0, 5), lo, hi], {}
    yield [r((2, 3, 4)), np.array(1, dtype)], {}
    yield [r((5,)), None, np.array(2, dtype)], {}
    yield [r((2, 5)), np.array(1, dtype), np.array(3, dtype)], {}, {"constants": (1, 2)}
    yield [r((2, 2))], {}
    yield [r((6,), 0, 9), np.array(4, dtype), np.array(2, dtype)], {}  # min > max: all max


register_op("Clip", inputs=["input", "min?", "max?"], outputs=["output"], infer=_infer, samples=_samples)

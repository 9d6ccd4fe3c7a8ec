"""PRelu (ONNX opset 16+): y = x if x >= 0 else slope * x, slope broadcast unidirectionally to x."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import broadcast_shapes
from ._util import random

DTYPES = FLOAT_TYPES + ("int32", "int64")


def _infer(ctx) -> TensorSpec:
    x, slope = ctx.inputs
    if slope.dtype != x.dtype:
        raise ctx.error(f"slope dtype {slope.dtype} differs from X's {x.dtype}")
    if slope.rank > x.rank or broadcast_shapes(x.shape, slope.shape, where=ctx.where) != x.shape:
        raise ctx.error(f"slope {slope} does not broadcast to X {x}")
    return x


@register_kernel("PRelu", device="cpu", vendor="reference", dtype=DTYPES, priority=-100)
def prelu(x, slope):
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -3, 3)

    yield [r(2, 3, 4, 4), r(3, 1, 1)], {}
    yield [r(2, 5), r(5)], {}
    yield [r(3, 4), r(1)], {}
    yield [r(2, 3, 4), r(2, 3, 4)], {}
    yield [r(1, 2, 3), r()], {}


register_op("PRelu", inputs=["X", "slope"], outputs=["Y"], infer=_infer, samples=_samples)

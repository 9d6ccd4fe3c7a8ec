"""Where(condition, X, Y): X where condition holds, else Y, over three broadcast inputs.

Kernels are keyed by X's dtype (``dispatch_input=1``)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext, broadcast_shapes
from ._util import random


def _rule(ctx: InferContext) -> TensorSpec:
    cond, x, y = ctx.inputs
    if cond.dtype != "bool":
        raise ctx.error(f"condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise ctx.error(f"X and Y have different dtypes {x.dtype} and {y.dtype}")
    return TensorSpec(broadcast_shapes(cond.shape, x.shape, y.shape, where=ctx.where), x.dtype)


def _samples(rng, dtype):
    for sc, sx, sy in [((2, 3, 4), (2, 3, 4), (2, 3, 4)), ((3, 1), (1, 4), ()), ((5,), (2, 5), (2, 1))]:
        yield [random(rng, sc, "bool"), random(rng, sx, dtype), random(rng, sy, dtype)], {}


@register_kernel("Where", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def where(condition, x, y):
    return np.where(condition, x, y)


register_op("Where", inputs=["condition", "X", "Y"], outputs=["output"], infer=_rule, samples=_samples,
            dispatch_input=1)

"""Flatten: collapse the dims before ``axis`` into one and the dims from ``axis`` on into another."""
from __future__ import annotations

import math

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import product, random


def _rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    axis = ctx.attrs["axis"]
    if not -x.rank <= axis <= x.rank:
        raise ctx.error(f"axis {axis} is out of range for rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis
    outer, inner = product(x.shape[:axis]), product(x.shape[axis:])
    return TensorSpec((ctx.symbol() if outer is None else outer, ctx.symbol() if inner is None else inner), x.dtype)


@register_kernel("Flatten", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def flatten(x, *, axis=1):
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))  # math.prod: np.prod cost ~10 us a call


def _samples(rng, dtype):
    x = random(rng, (2, 3, 4, 5), dtype)
    for axis in (1, 0, 3, 4, -2):
        yield [x], {"axis": axis}
    yield [random(rng, (6,), dtype)], {"axis": 1}


register_op("Flatten", inputs=["input"], outputs=["output"], attrs={"axis": ("int", 1)}, infer=_rule,
            samples=_samples)

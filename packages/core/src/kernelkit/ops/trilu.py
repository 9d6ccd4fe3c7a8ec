"""Trilu(input, k): the upper (``upper=1``) or lower triangle of the last two axes, from diagonal
``k`` (a 0-d int64 input, default 0); the rest is zero."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _rule(ctx: InferContext) -> TensorSpec:
    if ctx.inputs[0].rank < 2:
        raise ctx.error(f"input must have rank >= 2, got {ctx.inputs[0]}")
    return ctx.inputs[0]


@register_kernel("Trilu", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def trilu(x, k=None, *, upper=1):
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, k) if upper else np.tril(x, k)


def _samples(rng, dtype):
    x = random(rng, (2, 3, 5), dtype)
    yield [x], {}
    yield [x, np.array(1, np.int64)], {"upper": 0}
    yield [x, np.array(-2, np.int64)], {}


register_op("Trilu", inputs=["input", "k?"], outputs=["output"], attrs={"upper": ("int", 1)}, infer=_rule,
            samples=_samples)

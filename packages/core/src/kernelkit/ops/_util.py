"""Helpers shared by the op files: common shape rules and sample generators."""
from __future__ import annotations

import numpy as np

from ..ir import TensorSpec
from ..shape import InferContext, broadcast_shapes


def same_as_input(ctx: InferContext) -> TensorSpec:
    """Rule for ops whose output has the first input's shape and dtype."""
    return ctx.inputs[0]


def broadcast_rule(dtype: str | None = None):
    """Rule for elementwise ops over broadcast inputs; output dtype is ``dtype`` or the inputs'."""

    def rule(ctx: InferContext) -> TensorSpec:
        specs = [s for s in ctx.inputs if s is not None]
        dtypes = {s.dtype for s in specs}
        if len(dtypes) > 1:
            raise ctx.error(f"inputs have different dtypes {sorted(dtypes)}")
        shape = broadcast_shapes(*(s.shape for s in specs), where=ctx.where)
        return TensorSpec(shape, dtype or specs[0].dtype)

    return rule


def random(rng: np.random.Generator, shape, dtype: str, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """A random array of ``dtype`` in [low, high) (integers: rounded; bool: coin flips)."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    x = rng.uniform(low, high, size=shape)
    if np.dtype(dtype).kind in "iu":
        return np.round(x).astype(dtype)
    return x.astype(dtype)

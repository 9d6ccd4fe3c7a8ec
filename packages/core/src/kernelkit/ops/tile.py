"""Tile(input, repeats): repeat the input ``repeats[i]`` times along each dim i."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, random


def _rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    repeats = const_ints(ctx, 1)
    if repeats is None:
        return TensorSpec(tuple(ctx.symbol() for _ in x.shape), x.dtype)
    if len(repeats) != x.rank or any(r < 0 for r in repeats):
        raise ctx.error(f"repeats {repeats} must be {x.rank} non-negative ints for {x}")
    shape = tuple(d if r == 1 else (ctx.symbol() if isinstance(d, str) and r else d * r if r else 0)
                  for d, r in zip(x.shape, repeats))
    return TensorSpec(shape, x.dtype)


@register_kernel("Tile", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def tile(x, repeats):
    repeats = [int(r) for r in repeats]
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise ValueError(f"repeats {repeats} must be {x.ndim} non-negative ints for shape {x.shape}")
    check_tensor_bytes([d * r for d, r in zip(x.shape, repeats)], x.dtype)
    return np.tile(x, repeats)


def _samples(rng, dtype):
    yield [random(rng, (2, 3), dtype), np.array([2, 1], np.int64)], {}
    yield [random(rng, (2, 3), dtype), np.array([1, 3], np.int64)], {}
    yield [random(rng, (2, 1, 3), dtype), np.array([2, 2, 2], np.int64)], {}
    yield [random(rng, (4,), dtype), np.array([0], np.int64)], {}


register_op("Tile", inputs=["input", "repeats"], outputs=["output"], infer=_rule, samples=_samples)

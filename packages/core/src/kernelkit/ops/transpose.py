"""Transpose by ``perm`` (default: reverse the dims)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    perm = ctx.attrs["perm"]
    if perm is None:
        perm = tuple(reversed(range(x.rank)))
    if sorted(perm) != list(range(x.rank)):
        raise ctx.error(f"perm {list(perm)} is not a permutation of the {x.rank} dims of {x}")
    return TensorSpec(tuple(x.shape[p] for p in perm), x.dtype)


@register_kernel("Transpose", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def transpose(x, *, perm=None, out=None):
    if out is not None:
        np.copyto(out, np.transpose(x, perm))
        return out
    return np.transpose(x, perm).copy()  # (np.ascontiguousarray would make a 0-d input 1-d)


def _samples(rng, dtype):
    yield [random(rng, (2, 3, 4), dtype)], {}
    yield [random(rng, (2, 3, 4), dtype)], {"perm": [1, 0, 2]}
    yield [random(rng, (2, 3, 4, 5), dtype)], {"perm": [0, 2, 3, 1]}
    yield [random(rng, (5, 7), dtype)], {"perm": [1, 0]}
    yield [random(rng, (3,), dtype)], {}
    yield [random(rng, (2, 0, 3), dtype)], {"perm": [2, 0, 1]}


register_op("Transpose", inputs=["data"], outputs=["transposed"], attrs={"perm": ("ints", None)},
            infer=_rule, samples=_samples)

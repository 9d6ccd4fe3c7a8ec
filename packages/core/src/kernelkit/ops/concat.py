"""Concat: join inputs along ``axis``; the other dims must agree."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import REQUIRED, register_kernel, register_op
from ..shape import InferContext, broadcast_shapes
from ._util import random


def _rule(ctx: InferContext) -> TensorSpec:
    specs = [s for s in ctx.inputs if s is not None]
    if not specs:
        raise ctx.error("needs at least one input")
    first = specs[0]
    if {s.dtype for s in specs} != {first.dtype} or {s.rank for s in specs} != {first.rank}:
        raise ctx.error(f"inputs must share dtype and rank, got {[str(s) for s in specs]}")
    if first.rank == 0:
        raise ctx.error("inputs must have rank >= 1 (0-d tensors cannot be concatenated)")
    axis = ctx.axis(ctx.attrs["axis"], first.rank)
    shape = []
    for i in range(first.rank):
        dims = [s.shape[i] for s in specs]
        if i == axis:
            shape.append(sum(dims) if all(isinstance(d, int) for d in dims) else
                         dims[0] if len(dims) == 1 else ctx.symbol())
            continue
        known = {d for d in dims if isinstance(d, int)}
        if len(known) > 1:
            raise ctx.error(f"inputs differ in dim {i}: {[str(s) for s in specs]}")
        shape.append(broadcast_shapes(*[(d,) for d in dims])[0] if not known else known.pop())
    return TensorSpec(tuple(shape), first.dtype)


@register_kernel("Concat", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def concat(*inputs, axis):
    return np.concatenate(inputs, axis=axis)


def _samples(rng, dtype):
    yield [random(rng, (2, 3), dtype), random(rng, (2, 5), dtype)], {"axis": 1}
    yield [random(rng, (1, 3, 4), dtype), random(rng, (2, 3, 4), dtype), random(rng, (3, 3, 4), dtype)], {"axis": 0}
    yield [random(rng, (2, 3, 4), dtype), random(rng, (2, 3, 1), dtype)], {"axis": -1}
    yield [random(rng, (4,), dtype)], {"axis": 0}
    yield [random(rng, (2, 0), dtype), random(rng, (2, 3), dtype)], {"axis": 1}


register_op("Concat", inputs=["inputs*"], outputs=["concat_result"], attrs={"axis": ("int", REQUIRED)},
            infer=_rule, samples=_samples)

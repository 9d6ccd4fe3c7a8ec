"""Expand(input, shape): broadcast ``input`` against ``shape`` (the result may be larger than
``shape`` where ``input`` has bigger dims, as ONNX's bidirectional broadcast allows)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ..shape import InferContext, broadcast_shapes
from ._util import const_ints, input_length, random


def _rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    shape = const_ints(ctx, 1)
    if shape is None:  # a dim of the input other than 1 survives; the rest is known at run time
        n = input_length(ctx, 1)
        rank = max(n, x.rank)
        dims = (1,) * (rank - x.rank) + x.shape
        return TensorSpec(tuple(ctx.symbol() if d == 1 or isinstance(d, str) else d for d in dims), x.dtype)
    if any(d < 0 for d in shape):
        raise ctx.error(f"shape {shape} has a negative dim")
    return TensorSpec(broadcast_shapes(x.shape, tuple(shape), where=ctx.where), x.dtype)


@register_kernel("Expand", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def expand(x, shape):
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"shape {list(shape)} has a negative dim")
    try:
        out = np.broadcast_shapes(x.shape, shape)
    except ValueError:
        raise ValueError(f"input shape {x.shape} does not broadcast with shape {list(shape)}") from None
    check_tensor_bytes(out, x.dtype)
    return np.broadcast_to(x, out).copy()


def _samples(rng, dtype):
    yield [random(rng, (3, 1), dtype), np.array([3, 4], np.int64)], {}
    yield [random(rng, (3, 1), dtype), np.array([2, 1, 6], np.int64)], {}
    yield [random(rng, (2, 3), dtype), np.array([1], np.int64)], {}
    yield [random(rng, (), dtype), np.array([2, 2], np.int64)], {}
    yield [random(rng, (1, 4, 1), dtype), np.array([2, 1, 3], np.int64)], {}


register_op("Expand", inputs=["input", "shape"], outputs=["output"], infer=_rule, samples=_samples)

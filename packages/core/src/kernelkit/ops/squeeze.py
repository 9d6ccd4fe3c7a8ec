"""Squeeze (drop size-1 dims: those in ``axes``, or every one when ``axes`` is absent) and
Unsqueeze (insert size-1 dims at ``axes`` of the output). ``axes`` is an int64 input (opset 13+).

Without ``axes``, a symbolic dim is assumed not to be 1 by shape inference; the kernel checks."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, ctx_axes, input_length, normalize_axes, random


def _squeeze_rule(ctx: InferContext) -> TensorSpec:
    data = ctx.inputs[0]
    if not ctx.has(1):
        return TensorSpec(tuple(d for d in data.shape if d != 1), data.dtype)
    axes = const_ints(ctx, 1)
    if axes is None:
        return TensorSpec(tuple(ctx.symbol() for _ in range(data.rank - input_length(ctx, 1))), data.dtype)
    axes = ctx_axes(ctx, axes, data.rank)
    bad = [a for a in axes if isinstance(data.shape[a], int) and data.shape[a] != 1]
    if bad:
        raise ctx.error(f"cannot squeeze axes {bad} of {data}: their size is not 1")
    return TensorSpec(tuple(d for i, d in enumerate(data.shape) if i not in axes), data.dtype)


def _unsqueeze_rule(ctx: InferContext) -> TensorSpec:
    data = ctx.inputs[0]
    axes = const_ints(ctx, 1)
    if axes is None:
        return TensorSpec(tuple(ctx.symbol() for _ in range(data.rank + input_length(ctx, 1))), data.dtype)
    rank = data.rank + len(axes)
    axes = set(ctx_axes(ctx, axes, rank))
    rest = iter(data.shape)
    return TensorSpec(tuple(1 if i in axes else next(rest) for i in range(rank)), data.dtype)


@register_kernel("Squeeze", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def squeeze(data, axes=None):
    if axes is None:
        return np.squeeze(data)
    axes = normalize_axes(list(axes), data.ndim)
    bad = [a for a in axes if data.shape[a] != 1]
    if bad:
        raise ValueError(f"cannot squeeze axes {bad} of shape {data.shape}: their size is not 1")
    return np.squeeze(data, axis=tuple(axes))


@register_kernel("Unsqueeze", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def unsqueeze(data, axes):
    axes = normalize_axes(list(axes), data.ndim + len(axes))
    return np.expand_dims(data, tuple(axes))


def _squeeze_samples(rng, dtype):
    x = random(rng, (1, 3, 1, 4), dtype)
    yield [x], {}
    yield [x, np.array([0], np.int64)], {}
    yield [x, np.array([-2, 0], np.int64)], {}
    yield [random(rng, (1,), dtype)], {}


def _unsqueeze_samples(rng, dtype):
    x = random(rng, (3, 4), dtype)
    yield [x, np.array([0], np.int64)], {}
    yield [x, np.array([1, -1], np.int64)], {}
    yield [x, np.array([3, 0], np.int64)], {}
    yield [random(rng, (), dtype), np.array([0], np.int64)], {}


register_op("Squeeze", inputs=["data", "axes?"], outputs=["squeezed"], infer=_squeeze_rule,
            samples=_squeeze_samples)
register_op("Unsqueeze", inputs=["data", "axes"], outputs=["expanded"], infer=_unsqueeze_rule,
            samples=_unsqueeze_samples)

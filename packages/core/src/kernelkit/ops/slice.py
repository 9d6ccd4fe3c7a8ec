"""Slice(data, starts, ends, axes?, steps?): NumPy basic slicing per axis. Negative starts/ends
count from the end, negative steps walk backwards, and out-of-range bounds are clamped (so
INT64_MAX/INT64_MIN mean "to the end"), as ONNX defines it."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, ctx_axes, input_length, normalize_axes, random


def slices(shape, starts, ends, axes=None, steps=None) -> tuple[slice, ...]:
    """One Python slice per dim of ``shape``; raises ValueError on malformed arguments."""
    n = len(starts)
    axes = list(range(n)) if axes is None else list(axes)
    steps = [1] * n if steps is None else list(steps)
    if not len(ends) == len(axes) == len(steps) == n:
        raise ValueError(f"starts, ends, axes and steps differ in length: {n}, {len(ends)}, {len(axes)}, {len(steps)}")
    if any(s == 0 for s in steps):
        raise ValueError(f"steps {steps} contain 0")
    out = [slice(None)] * len(shape)
    for a, b, e, s in zip(normalize_axes(axes, len(shape)), starts, ends, steps):
        out[a] = slice(int(b), int(e), int(s))
    return tuple(out)


def _rule(ctx: InferContext) -> TensorSpec:
    data = ctx.inputs[0]
    starts, ends = const_ints(ctx, 1), const_ints(ctx, 2)
    axes = const_ints(ctx, 3) if ctx.has(3) else list(range(input_length(ctx, 1)))
    steps = const_ints(ctx, 4) if ctx.has(4) else [1] * input_length(ctx, 1)
    if axes is None:
        return TensorSpec(tuple(ctx.symbol() for _ in data.shape), data.dtype)
    axes = ctx_axes(ctx, axes, data.rank)
    shape = list(data.shape)
    if starts is None or ends is None or steps is None:
        for a in axes:
            shape[a] = ctx.symbol()
        return TensorSpec(tuple(shape), data.dtype)
    try:
        cuts = slices(data.shape, starts, ends, axes, steps)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    for a in axes:
        shape[a] = ctx.symbol() if isinstance(shape[a], str) else len(range(*cuts[a].indices(shape[a])))
    return TensorSpec(tuple(shape), data.dtype)


@register_kernel("Slice", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def slice_(data, starts, ends, axes=None, steps=None):
    return data[slices(data.shape, list(starts), list(ends), None if axes is None else list(axes),
                       None if steps is None else list(steps))].copy()


def _samples(rng, dtype):
    x = random(rng, (4, 5, 6), dtype)

    def i64(*v):
        return np.array(v, np.int64)

    big = np.iinfo(np.int64).max
    yield [x, i64(1), i64(3)], {}
    yield [x, i64(0, 1), i64(-1, 1000), i64(0, 2), i64(1, 2)], {}
    yield [x, i64(-1), i64(-big), i64(1), i64(-1)], {}
    yield [x, i64(5, 10), i64(0, 0), i64(2, -2), i64(-2, -3)], {}
    yield [x, i64(2), i64(big), i64(-1)], {}
    yield [x, i64(3), i64(1), i64(0)], {}  # empty result
    yield [x, np.array([1], np.int32), np.array([4], np.int32), np.array([2], np.int32), np.array([2], np.int32)], {}


register_op("Slice", inputs=["data", "starts", "ends", "axes?", "steps?"], outputs=["output"],
            infer=_rule, samples=_samples)

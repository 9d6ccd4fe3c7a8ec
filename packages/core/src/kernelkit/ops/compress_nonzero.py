"""NonZero(X): the int64 indices (rank x count) of X's non-zero elements, in row-major order;
Compress(input, condition): the slices along ``axis`` (or of the flattened input) where the 1-D
bool condition is true (a shorter condition selects only that many)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


@register_kernel("NonZero", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def non_zero(x):
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), np.int64)
    return np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)


@register_kernel("Compress", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def compress(x, condition, *, axis=None):
    cond = np.asarray(condition).astype(bool).reshape(-1)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if cond.size > x.shape[axis]:
        raise ValueError(f"condition of {cond.size} entries is longer than axis {axis} ({x.shape[axis]})")
    return np.compress(cond, x, axis=axis)


def _nonzero_rule(ctx: InferContext) -> TensorSpec:
    return TensorSpec((ctx.inputs[0].rank, ctx.symbol()), "int64")


def _compress_rule(ctx: InferContext) -> TensorSpec:
    x, cond = ctx.inputs
    if cond.rank != 1:
        raise ctx.error(f"condition must be 1-D, got {cond}")
    axis = ctx.attrs["axis"]
    if axis is None:
        return TensorSpec((ctx.symbol(),), x.dtype)
    axis = ctx.axis(axis, x.rank)
    return TensorSpec(x.shape[:axis] + (ctx.symbol(),) + x.shape[axis + 1:], x.dtype)


def _nonzero_samples(rng, dtype):
    yield [random(rng, (3, 4), dtype, -1, 1)], {}
    yield [random(rng, (5,), dtype, -1, 1)], {}


def _compress_samples(rng, dtype):
    x = random(rng, (3, 4), dtype)
    yield [x, np.array([True, False, True])], {"axis": 0}
    yield [x, np.array([False, True, True])], {"axis": -1}
    yield [x, np.array([True, False, False, True, True])], {}


register_op("NonZero", inputs=["X"], outputs=["Y"], infer=_nonzero_rule, samples=_nonzero_samples)
register_op("Compress", inputs=["input", "condition"], outputs=["output"], attrs={"axis": ("int", None)},
            infer=_compress_rule, samples=_compress_samples)

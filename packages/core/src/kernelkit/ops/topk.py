"""TopK(X, K): the K largest (or smallest) values along ``axis`` and their int64 indices. Equal
values come out lowest index first. ``sorted=0`` allows any order; this reference still sorts."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..geometry import topk_count as _k
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, random


def _rule(ctx: InferContext) -> list[TensorSpec]:
    x = ctx.inputs[0]
    axis = ctx.axis(ctx.attrs["axis"], x.rank)
    k, dim = const_ints(ctx, 1), x.shape[axis]
    if k is not None:
        try:
            dim = _k(np.array(k, np.int64), dim if isinstance(dim, int) else np.iinfo(np.int64).max)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    else:
        dim = ctx.symbol()
    shape = x.shape[:axis] + (dim,) + x.shape[axis + 1:]
    return [TensorSpec(shape, x.dtype), TensorSpec(shape, "int64")]


@register_kernel("TopK", device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)
def topk(x, k, *, axis=-1, largest=1, sorted=1):
    k = _k(k, x.shape[axis])
    if largest:  # a stable ascending sort of the reversed axis, read backwards: ties lowest index first
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = x.shape[axis] - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, index, axis=axis), index.astype(np.int64)


def _samples(rng, dtype):
    x = random(rng, (3, 6), dtype, -3, 3)  # integers: ties are likely
    yield [x, np.array([2], np.int64)], {}
    yield [x, np.array([6], np.int64)], {"largest": 0}
    yield [x, np.array([2], np.int64)], {"axis": 0}
    yield [random(rng, (2, 5, 3), dtype, -3, 3), np.array([3], np.int64)], {"axis": 1, "largest": 0}
    yield [x, np.array([0], np.int64)], {}


register_op("TopK", inputs=["X", "K"], outputs=["Values", "Indices"],
            attrs={"axis": ("int", -1), "largest": ("int", 1), "sorted": ("int", 1)}, infer=_rule, samples=_samples)

"""Shape (the input's dims from ``start`` to ``end``, as int64) and Size (its element count)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..geometry import clamped_range as _clamped
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _shape_rule(ctx: InferContext) -> TensorSpec:
    cut = _clamped(ctx.inputs[0].rank, ctx.attrs["start"], ctx.attrs["end"])
    return TensorSpec((cut.stop - cut.start,), "int64")


@register_kernel("Shape", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def shape(data, *, start=0, end=None):
    return np.array(data.shape[_clamped(data.ndim, start, end)], dtype=np.int64).reshape(-1)


@register_kernel("Size", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def size(data):
    return np.array(data.size, dtype=np.int64)


def _shape_samples(rng, dtype):
    x = random(rng, (2, 3, 4, 5), dtype)
    for attrs in ({}, {"start": 1}, {"end": -1}, {"start": -3, "end": 3}, {"start": 10}, {"start": -10, "end": 2}):
        yield [x], attrs
    yield [random(rng, (), dtype)], {}


def _size_samples(rng, dtype):
    for shape in [(2, 3, 4), (), (0, 5)]:
        yield [random(rng, shape, dtype)], {}


register_op("Shape", inputs=["data"], outputs=["shape"], attrs={"start": ("int", 0), "end": ("int", None)},
            infer=_shape_rule, samples=_shape_samples)
register_op("Size", inputs=["data"], outputs=["size"], infer=lambda ctx: TensorSpec((), "int64"),
            samples=_size_samples)

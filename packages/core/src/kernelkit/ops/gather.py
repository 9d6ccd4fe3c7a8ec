"""Gather (take whole slices along ``axis`` by index) and GatherElements (pick single elements
along ``axis``; the output has the indices' shape). Negative indices count from the end; an
index out of range is an error, never a silent wrap."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..geometry import checked_indices as _checked
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _index_spec(ctx: InferContext) -> TensorSpec:
    data, indices = ctx.inputs
    if indices.dtype not in ("int32", "int64"):
        raise ctx.error(f"indices must be int32 or int64, got {indices.dtype}")
    if data.rank == 0:
        raise ctx.error("data must have rank >= 1")
    return data


def _gather_rule(ctx: InferContext) -> TensorSpec:
    data, indices = _index_spec(ctx), ctx.inputs[1]
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    return TensorSpec(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)


def _gather_elements_rule(ctx: InferContext) -> TensorSpec:
    data, indices = _index_spec(ctx), ctx.inputs[1]
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    if indices.rank != data.rank or any(isinstance(i, int) and isinstance(d, int) and i != d
                                        for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise ctx.error(f"indices {indices} must have the rank of data {data} and its dims but on axis {axis}")
    return TensorSpec(indices.shape, data.dtype)


@register_kernel("Gather", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def gather(data, indices, *, axis=0):
    return np.take(data, _checked(indices, data.shape[axis]), axis=axis)


@register_kernel("GatherElements", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def gather_elements(data, indices, *, axis=0):
    return np.take_along_axis(data, _checked(indices, data.shape[axis]), axis=axis)


def _gather_samples(rng, dtype):
    x = random(rng, (5, 4, 3), dtype)
    yield [x, np.array([0, 4, -1, 2], np.int64)], {}
    yield [x, rng.integers(-4, 4, size=(2, 3)).astype(np.int64)], {"axis": 1}
    yield [x, np.array(2, np.int64)], {"axis": -1}
    yield [x, np.array([[1], [0]], np.int32)], {"axis": 2}


def _gather_elements_samples(rng, dtype):
    x = random(rng, (4, 5), dtype)
    yield [x, rng.integers(-4, 4, size=(3, 5)).astype(np.int64)], {}
    yield [x, rng.integers(0, 5, size=(4, 2)).astype(np.int32)], {"axis": 1}
    y = random(rng, (2, 3, 4), dtype)
    yield [y, rng.integers(-4, 4, size=(2, 3, 6)).astype(np.int64)], {"axis": 2}


register_op("Gather", inputs=["data", "indices"], outputs=["output"], attrs={"axis": ("int", 0)},
            infer=_gather_rule, samples=_gather_samples)
register_op("GatherElements", inputs=["data", "indices"], outputs=["output"], attrs={"axis": ("int", 0)},
            infer=_gather_elements_rule, samples=_gather_elements_samples)

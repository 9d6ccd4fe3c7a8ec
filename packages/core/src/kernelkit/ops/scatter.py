"""ScatterND and ScatterElements (and the deprecated Scatter, which is ScatterElements): a copy of
``data`` with ``updates`` written at ``indices``. ``reduction`` none (later writes win), add, mul,
max or min combines with what is there. Negative indices count from the end; out of range is an
error."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random
from .gather import _checked
from .gather_nd import nd_indices

_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _combine(out, where, updates, reduction):
    if reduction == "none":
        out[where] = updates
    elif reduction in _REDUCE:
        _REDUCE[reduction].at(out, where, updates)
    else:
        raise ValueError(f"reduction must be none, add, mul, max or min, got {reduction!r}")
    return out


@register_kernel("ScatterND", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def scatter_nd(data, indices, updates, *, reduction="none"):
    k = indices.shape[-1]
    idx = nd_indices(indices, data.shape[:k]).reshape(-1, k)
    upd = updates.reshape((idx.shape[0],) + data.shape[k:])
    out = data.copy()
    if reduction == "none":
        for i in range(idx.shape[0]):  # in order: a repeated index keeps the last write
            out[tuple(idx[i])] = upd[i]
        return out
    return _combine(out, tuple(idx.T), upd, reduction)


@register_kernel("ScatterElements", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def scatter_elements(data, indices, updates, *, axis=0, reduction="none"):
    axis = axis % data.ndim
    idx = _checked(indices, data.shape[axis])
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx
    return _combine(data.copy(), tuple(where), updates, reduction)


def _rule(ctx: InferContext) -> TensorSpec:
    data, indices, updates = ctx.inputs
    if indices.dtype not in ("int32", "int64"):
        raise ctx.error(f"indices must be int32 or int64, got {indices.dtype}")
    if updates.dtype != data.dtype:
        raise ctx.error(f"updates {updates.dtype} must have data's dtype {data.dtype}")
    if ctx.node.op != "ScatterND":
        ctx.axis(ctx.attrs["axis"], data.rank)
    return data


def _nd_samples(rng, dtype):
    x = random(rng, (4, 3, 2), dtype)
    yield [x, np.array([[1], [3]], np.int64), random(rng, (2, 3, 2), dtype)], {}
    yield [x, np.array([[0, 1], [2, 2], [0, 1]], np.int64), random(rng, (3, 2), dtype)], {"reduction": "add"}
    yield [x, np.array([[-1, 0, 1]], np.int64), random(rng, (1,), dtype)], {}
    yield [x, np.array([[2, 1], [0, 0], [2, 1]], np.int64), random(rng, (3, 2), dtype)], {}  # last write wins


def _el_samples(rng, dtype):
    x = random(rng, (3, 4), dtype)
    yield [x, np.array([[0, 2, 1, 0]], np.int64), random(rng, (1, 4), dtype)], {}
    yield [x, np.array([[1, -1], [0, 0]], np.int64), random(rng, (2, 2), dtype)], {"axis": 1, "reduction": "max"}


_ATTRS = {"axis": ("int", 0), "reduction": ("string", "none")}
register_op("ScatterND", inputs=["data", "indices", "updates"], outputs=["output"],
            attrs={"reduction": ("string", "none")}, infer=_rule, samples=_nd_samples)
register_op("ScatterElements", inputs=["data", "indices", "updates"], outputs=["output"], attrs=_ATTRS,
            infer=_rule, samples=_el_samples)

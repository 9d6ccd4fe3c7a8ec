"""OneHot(indices, depth, values): ``values[1]`` where the new axis ``axis`` equals the index,
``values[0]`` elsewhere. Negative indices count from ``depth``; other indices out of range give
an all-off row. The output has ``values``' dtype."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ..shape import InferContext


def _depth(depth) -> int:
    depth = np.asarray(depth).reshape(-1)
    if depth.size != 1:
        raise ValueError(f"depth must hold one value, got {depth.tolist()}")
    return int(depth[0])


def _rule(ctx: InferContext) -> TensorSpec:
    indices, _, values = ctx.inputs
    rank = indices.rank + 1
    axis = ctx.axis(ctx.attrs["axis"], rank)
    depth = ctx.value(1)
    try:
        dim = _depth(depth) if depth is not None else ctx.symbol()
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    shape = indices.shape[:axis] + (dim,) + indices.shape[axis:]
    return TensorSpec(shape, values.dtype)


@register_kernel("OneHot", device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)
def one_hot(indices, depth, values, *, axis=-1):
    depth = _depth(depth)
    if depth < 0 or np.asarray(values).size != 2:
        raise ValueError(f"depth {depth} must be >= 0 and values hold two entries")
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    axis = axis % (idx.ndim + 1)
    check_tensor_bytes(idx.shape[:axis] + (depth,) + idx.shape[axis:], values.dtype)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape((-1,) + (1,) * (idx.ndim - axis))
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def _samples(rng, dtype):
    yield [np.array([0, 2, -1, 5], np.int64), np.array(4, np.int64), np.array([0, 1], np.float32)], {}
    yield [rng.integers(0, 3, size=(2, 3)).astype(dtype), np.array([3], np.int64),
           np.array([-1, 3], np.int64)], {"axis": 0}


register_op("OneHot", inputs=["indices", "depth", "values"], outputs=["output"], attrs={"axis": ("int", -1)},
            infer=_rule, samples=_samples)

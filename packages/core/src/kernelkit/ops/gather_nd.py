"""GatherND(data, indices, batch_dims): the last axis of ``indices`` addresses slices of ``data``
(after the first ``batch_dims`` axes, which data and indices share). Negative indices count from
the end; one out of range is an error."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def nd_indices(indices: np.ndarray, dims) -> np.ndarray:
    """``indices`` (..., k) checked against ``dims`` (k sizes), made non-negative int64."""
    indices = np.asarray(indices).astype(np.int64, copy=False)
    dims = np.asarray(dims, np.int64)
    if indices.size and (np.any(indices < -dims) or np.any(indices >= dims)):
        raise IndexError(f"an index is out of range for dims {dims.tolist()}")
    return np.where(indices < 0, indices + dims, indices)


def _rule(ctx: InferContext) -> TensorSpec:
    data, indices = ctx.inputs
    b = ctx.attrs["batch_dims"]
    if indices.dtype != "int64" or indices.rank < 1:
        raise ctx.error(f"indices must be an int64 tensor of rank >= 1, got {indices}")
    k = indices.shape[-1]
    if not isinstance(k, int):
        raise ctx.error("the last dim of indices must be static")
    if not 0 <= b < min(data.rank, indices.rank) or k > data.rank - b:
        raise ctx.error(f"batch_dims {b} with indices {indices} does not fit data {data}")
    return TensorSpec(indices.shape[:-1] + data.shape[b + k:], data.dtype)


@register_kernel("GatherND", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def gather_nd(data, indices, *, batch_dims=0):
    b, k = batch_dims, indices.shape[-1]
    idx = nd_indices(indices, data.shape[b:b + k])
    batch = data.shape[:b]
    nb = int(np.prod(batch, dtype=np.int64))
    flat_data = data.reshape((nb,) + data.shape[b:])
    flat_idx = idx.reshape(nb, -1, k)
    out = np.stack([flat_data[i][tuple(np.moveaxis(flat_idx[i], -1, 0))] for i in range(nb)]) if nb else \
        np.empty((0, flat_idx.shape[1]) + data.shape[b + k:], data.dtype)
    return out.reshape(indices.shape[:-1] + data.shape[b + k:])


def _samples(rng, dtype):
    x = random(rng, (3, 4, 5), dtype)
    yield [x, rng.integers(-3, 3, size=(2, 2)).astype(np.int64)], {}
    yield [x, rng.integers(0, 3, size=(2, 3, 1)).astype(np.int64)], {}
    yield [x, rng.integers(0, 4, size=(3, 2, 2)).astype(np.int64)], {"batch_dims": 1}


register_op("GatherND", inputs=["data", "indices"], outputs=["output"], attrs={"batch_dims": ("int", 0)},
            infer=_rule, samples=_samples)

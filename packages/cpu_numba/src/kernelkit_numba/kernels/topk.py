"""TopK(X, K): the K largest (or smallest) values along ``axis`` and their int64 indices, ties
lowest index first (``sorted=0`` still sorts, as the reference). The axis is moved last and every
row is sorted by a stable merge sort in parallel; NaN counts as the largest value."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.geometry import topk_count as _k
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel


@jit_parallel
def _topk_rows(x, k, largest, values, indices):
    r_n, d_n = x.shape
    for r in prange(r_n):
        row = x[r]
        if largest:  # stable ascending sort of the reversed row, read backwards
            order = np.argsort(row[::-1].copy(), kind="mergesort")
            for j in range(k):
                at = d_n - 1 - order[d_n - 1 - j]
                indices[r, j] = at
                values[r, j] = row[at]
        else:
            order = np.argsort(row.copy(), kind="mergesort")
            for j in range(k):
                indices[r, j] = order[j]
                values[r, j] = row[order[j]]


def topk(x, k, *, axis=-1, largest=1, sorted=1):
    axis = axis % x.ndim
    k = _k(k, x.shape[axis])
    moved = np.moveaxis(x, axis, -1)
    rows = math.prod(moved.shape[:-1])
    values = np.empty(moved.shape[:-1] + (k,), x.dtype)
    indices = np.empty(values.shape, np.int64)
    if values.size:
        _topk_rows(np.ascontiguousarray(moved).reshape(rows, x.shape[axis]), k, bool(largest),
                   values.reshape(rows, k), indices.reshape(rows, k))
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


register_kernel("TopK", device="cpu", vendor="numba", dtype="float32")(threaded(topk))

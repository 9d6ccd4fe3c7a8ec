"""GatherND, ScatterND (reduction none) and Expand for every element type (int64 and bool
included): row copies of ``index_nd.cl``. Index tuples and shapes are read on the host, checked
there (a bad index is a typed error, never an out-of-bounds device read) and turned into int32 row
tables; ScatterND keeps the last write of a repeated row, so the device writes race-free."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import InputError, ShapeError, register_kernel
from kernelkit.limits import check_tensor_bytes
from kernelkit.ops.gather_nd import nd_indices

from ._common import launch_1d, source
from .typed import CTYPES

_TYPES = tuple(CTYPES)  # float32, int32, int64, int8, uint8, bool


def _kernel(dev, name: str, dtype):
    ctype = CTYPES[np.dtype(dtype).name]
    return dev.memo(("index_nd", name, ctype), lambda: dev.kernel(source("index_nd.cl"), name, {"TA": ctype}))


def _rows(op, indices, dims) -> np.ndarray:
    try:
        idx = nd_indices(np.asarray(indices.values()), dims)
    except IndexError as exc:
        raise InputError(f"{op}: {exc}") from None
    weights = [math.prod(dims[a + 1:]) for a in range(len(dims))]
    return idx.reshape(-1, len(dims)) @ np.asarray(weights, np.int64)


def _gather_rows(dev, src, rows: np.ndarray, out, inner: int, label: str):
    if out.size:
        table = dev.upload(rows.astype(np.int32))
        launch_1d(dev, _kernel(dev, "gather_rows", src.dtype), out.size,
                  (src.buffer, table.buffer, out.buffer, np.int32(out.size), np.int32(inner)), [src, table], [out],
                  label)
    return out


def gather_nd(data, indices, *, batch_dims: int = 0):
    dev, b, k = data.device, batch_dims, indices.shape[-1]
    if not 0 <= b < data.ndim or k > data.ndim - b:
        raise ShapeError(f"GatherND: batch_dims {b} and indices {indices.shape} do not fit data {data.shape}")
    dims = data.shape[b:b + k]
    batch, per = math.prod(data.shape[:b]), math.prod(dims)
    rows = _rows("GatherND", indices, dims).reshape(batch, -1) + np.arange(batch)[:, None] * per
    inner = math.prod(data.shape[b + k:])
    out = dev.empty(tuple(indices.shape[:-1]) + tuple(data.shape[b + k:]), data.dtype)
    return _gather_rows(dev, data, rows.reshape(-1), out, inner, "GatherND")


def scatter_nd(data, indices, updates, *, reduction: str = "none"):
    dev, k = data.device, indices.shape[-1]
    rows = _rows("ScatterND", indices, data.shape[:k])
    inner = math.prod(data.shape[k:])
    if updates.size != rows.size * inner:
        raise ShapeError(f"ScatterND: updates {updates.shape} do not fit {rows.size} rows of {inner}")
    out = _gather_rows(dev, data, np.arange(math.prod(data.shape[:k])), dev.empty(data.shape, data.dtype), inner,
                       "ScatterND")
    last = len(rows) - 1 - np.unique(rows[::-1], return_index=True)[1]  # each row's last write
    n = last.size * inner
    if n:
        picked = _gather_rows(dev, updates, last, dev.empty((last.size, inner), data.dtype), inner, "ScatterND")
        table = dev.upload(rows[last].astype(np.int32))
        launch_1d(dev, _kernel(dev, "scatter_rows", data.dtype), n,
                  (picked.buffer, table.buffer, out.buffer, np.int32(n), np.int32(inner)), [picked, table], [out],
                  "ScatterND")
    return out


def expand(x, shape):
    target = tuple(int(s) for s in np.asarray(shape.values()).ravel())
    try:
        out_shape = np.broadcast_shapes(x.shape, target)
    except ValueError as exc:
        raise ShapeError(f"Expand: {exc}") from None
    check_tensor_bytes(out_shape, np.int64, "Expand's host index table")
    flat = np.broadcast_to(np.arange(max(x.size, 1)).reshape(x.shape), out_shape).reshape(-1)
    return _gather_rows(x.device, x, flat, x.device.empty(out_shape, x.dtype), 1, "Expand")


def _scatter_supported(input_specs, attrs) -> bool:
    return attrs.get("reduction", "none") == "none"


def register() -> None:
    register_kernel("GatherND", device="gpu", vendor="opencl", dtype=_TYPES)(gather_nd)
    register_kernel("ScatterND", device="gpu", vendor="opencl", dtype=_TYPES, supports=_scatter_supported)(scatter_nd)
    register_kernel("Expand", device="gpu", vendor="opencl", dtype=tuple(t for t in _TYPES if t != "float32"))(expand)

"""Index and selection kernels on int64 and bool data (shape and mask arithmetic in exported
graphs): Gather, Expand and Where reuse the float32 kernels (dtype generic: Numba loops or
NumPy's take for Gather, Numba loops for Expand, NumPy's masked copies for Where); Cast is one
parallel conversion loop; GatherND and ScatterND copy whole slices, their row offsets computed
from the index tuples."""
from __future__ import annotations

import numpy as np
from kernelkit.ops.cast import cast_target
from kernelkit.ops.gather_nd import nd_indices
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit, jit_parallel
from .gather import gather
from .movement import expand
from .where import where

TYPED = ("int64", "bool")
CAST_FROM = ("float32", "int64", "int32", "bool")
CAST_TO = ("float32", "float64", "int32", "int64", "bool")
U = np.uint64


@jit_parallel
def _convert(x, out):
    for i in prange(x.shape[0]):
        out[U(i)] = x[U(i)]


@jit_parallel
def _to_bool(x, out):
    for i in prange(x.shape[0]):
        out[U(i)] = x[U(i)] != 0


def _cast_supported(input_specs, attrs) -> bool:
    try:
        return cast_target(attrs["to"]) in CAST_TO
    except Exception:  # noqa: BLE001 - the reference reports a bad ``to``
        return False


def cast(x, *, to, saturate=1):
    target = np.dtype(cast_target(to))
    out = np.empty(x.shape, target)
    if x.size:
        flat = np.ascontiguousarray(x).reshape(-1)
        (_to_bool if target == np.bool_ else _convert)(flat, out.reshape(-1))
    return out


def _cast_serial(input_specs, to, saturate=1):
    """``fn.serial`` of Cast (``_base.FunctionKernel``): on one thread NumPy's conversion, as the
    reference runs it: the general path's checks and a parallel loop's start cost more than the
    conversion of a small tensor (BERT's 1x128 mask inside the model: 37 against 24 us). The same
    values as the Numba loop (truncation toward zero, round to nearest, ``x != 0`` for bool)."""
    if len(input_specs) != 1 or input_specs[0] is None or input_specs[0].layout:
        return None
    target = np.dtype(cast_target(to))

    def bare(x, *, out=None):
        return x.astype(target, order="C")

    def call(x, *, out=None):
        with np.errstate(invalid="ignore", over="ignore"):  # NaN or out of range: undefined, as in ONNX
            return bare(x)

    call.bare = bare  # a plan's step: the executor set NumPy's error state for the run
    return call


cast.serial = _cast_serial


@jit_parallel
def _copy_rows(src, rows, dst):
    """dst[i] = src[rows[i]] for (n, inner) and (m, inner) row views."""
    for i in prange(rows.shape[0]):
        dst[U(i)] = src[U(rows[U(i)])]


def _row_offsets(idx, dims) -> np.ndarray:
    """Flat row numbers of (n, k) index tuples into dims (row-major)."""
    weights = np.ones(len(dims), np.int64)
    for a in range(len(dims) - 2, -1, -1):
        weights[a] = weights[a + 1] * dims[a + 1]
    return idx @ weights


def gather_nd(data, indices, *, batch_dims=0):
    b, k = batch_dims, indices.shape[-1]
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    dims = data.shape[b:b + k]
    idx = nd_indices(indices, dims).reshape(batch, -1, k)
    per = int(np.prod(dims, dtype=np.int64))
    rows = (_row_offsets(idx.reshape(-1, k), dims).reshape(batch, -1)
            + np.arange(batch, dtype=np.int64)[:, None] * per).reshape(-1)
    inner = int(np.prod(data.shape[b + k:], dtype=np.int64))
    out = np.empty(indices.shape[:-1] + data.shape[b + k:], data.dtype)
    if out.size:
        _copy_rows(np.ascontiguousarray(data).reshape(-1, inner), rows, out.reshape(-1, inner))
    return out


@jit
def _scatter_rows(dst, rows, updates):
    for i in range(rows.shape[0]):  # in order: a repeated index keeps the last write
        dst[rows[i]] = updates[i]


def scatter_nd(data, indices, updates, *, reduction="none"):
    if reduction != "none":
        raise ValueError(f"reduction {reduction!r}")  # declined by _scatter_supported
    k = indices.shape[-1]
    idx = nd_indices(indices, data.shape[:k]).reshape(-1, k)
    inner = int(np.prod(data.shape[k:], dtype=np.int64))
    out = np.array(data, copy=True, order="C")
    if idx.shape[0] and inner:
        _scatter_rows(out.reshape(-1, inner), _row_offsets(idx, data.shape[:k]),
                      np.ascontiguousarray(updates).reshape(-1, inner))
    return out


def _scatter_supported(input_specs, attrs) -> bool:
    return attrs.get("reduction", "none") == "none"


for _name, _fn in {"Gather": gather, "Expand": expand, "Where": where}.items():
    register_kernel(_name, device="cpu", vendor="numba", dtype=TYPED)(threaded(_fn))
register_kernel("Cast", device="cpu", vendor="numba", dtype=CAST_FROM, supports=_cast_supported)(threaded(cast))
register_kernel("GatherND", device="cpu", vendor="numba", dtype=("float32",) + TYPED)(threaded(gather_nd))
register_kernel("ScatterND", device="cpu", vendor="numba", dtype=("float32",) + TYPED,
                supports=_scatter_supported)(threaded(scatter_nd))

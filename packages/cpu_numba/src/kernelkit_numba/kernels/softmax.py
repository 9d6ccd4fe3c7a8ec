"""Softmax and LogSoftmax along one axis (ONNX opset 13). The tensor is viewed as
(outer, L, inner): with inner == 1 (the last axis, the common case) each contiguous row is
normalized (max shift and normalization in Numba, the exp in NumPy's vectorised loop);
otherwise each (L, inner) block is normalized column-wise with the inner axis innermost, so the
loops stay contiguous."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel

from .._base import threaded
from ..config import jit_parallel, parallel_for

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _shift_rows(x, y, lo, hi):
    """y = x - max(x) per row of (R, L), rows [lo, hi)."""
    l_n = x.shape[1]
    for r in range(lo, hi):
        src, dst = x[r], y[r]
        top = src[0]
        for k in range(1, l_n):
            top = max(top, src[U(k)])
        for k in range(l_n):
            dst[U(k)] = src[U(k)] - top


@jit_parallel
def _normalize_rows(e, y, log, lo, hi):
    """Given e = exp(y) per row: softmax y <- e / sum(e); log-softmax y <- y - log(sum(e))."""
    l_n = e.shape[1]
    for r in range(lo, hi):
        src, dst = e[r], y[r]
        total = 0.0
        for k in range(l_n):
            total += src[U(k)]
        if log:
            shift = math.log(total)
            for k in range(l_n):
                dst[U(k)] -= shift
        else:
            scale = 1.0 / total
            for k in range(l_n):
                dst[U(k)] = src[U(k)] * scale


def _softmax_rows(x, y, log):
    """Rows of (R, L): shift by the row max (Numba), exp (NumPy's SIMD loop, several times faster
    per element than a scalar libm call from Numba), normalize (Numba)."""
    parallel_for(_rows_shard, x.shape[0], (x, y, log), 8.0 * x.size)


def _rows_shard(x, y, log, lo, hi):
    """Rows [lo, hi): three passes over rows still in cache."""
    _shift_rows(x, y, lo, hi)
    part = y[lo:hi]
    e = np.exp(part) if log else np.exp(part, out=part)
    _normalize_rows(e, part, log, 0, hi - lo)


@jit_parallel
def _softmax_blocks(x, y, log, lo, hi):
    """x, y: (O, L, I); normalized along axis 1."""
    l_n, i_n = x.shape[1], x.shape[2]
    for o in range(lo, hi):
        src, dst = x[o], y[o]
        top = src[0].copy()
        for k in range(1, l_n):
            for i in range(i_n):
                top[U(i)] = max(top[U(i)], src[k, U(i)])
        total = np.zeros(i_n, np.float64)
        for k in range(l_n):
            for i in range(i_n):
                e = math.exp(src[k, U(i)] - top[U(i)])
                total[U(i)] += e
                if not log:
                    dst[k, U(i)] = e
        for i in range(i_n):
            total[U(i)] = top[U(i)] + math.log(total[U(i)]) if log else 1.0 / total[U(i)]
        for k in range(l_n):
            for i in range(i_n):
                if log:
                    dst[k, U(i)] = src[k, U(i)] - total[U(i)]
                else:
                    dst[k, U(i)] *= total[U(i)]


def _run(x, axis, log):
    y = np.empty(x.shape, x.dtype)
    if x.size == 0:
        return y
    rank = max(x.ndim, 1)
    axis = axis % rank
    outer = math.prod(x.shape[:axis])
    length = x.shape[axis] if x.ndim else 1
    xc = np.ascontiguousarray(x).reshape(outer, length, -1)
    if xc.shape[2] == 1:
        _softmax_rows(xc.reshape(outer, length), y.reshape(outer, length), log)
    else:
        parallel_for(_softmax_blocks, xc.shape[0], (xc, y.reshape(xc.shape), log), 8.0 * xc.size)
    return y


def softmax(x, *, axis=-1):
    return _run(x, axis, False)


def log_softmax(x, *, axis=-1):
    return _run(x, axis, True)


register_kernel("Softmax", device="cpu", vendor="numba", dtype="float32")(threaded(softmax))
register_kernel("LogSoftmax", device="cpu", vendor="numba", dtype="float32")(threaded(log_softmax))

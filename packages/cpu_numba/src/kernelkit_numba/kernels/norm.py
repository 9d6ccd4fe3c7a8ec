"""LayerNormalization, BatchNormalization (inference) and InstanceNormalization.

Each is one parallel pass per row (or per (n, c) plane): statistics accumulate in float64,
then the row is normalized, scaled and shifted in place in the output.
"""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel

from .. import config
from .._base import threaded
from ..config import jit, jit_parallel, parallel_for
from . import tpair

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit
def _moments(src, eps):
    """Mean and 1 / sqrt(variance + eps) of a 1-D row, accumulated in float64 (two passes)."""
    n = src.shape[0]
    total = 0.0
    for i in range(n):
        total += src[U(i)]
    mean = total / n
    sq = 0.0
    for i in range(n):
        diff = src[U(i)] - mean
        sq += diff * diff
    return mean, 1.0 / math.sqrt(sq / n + eps)


@jit_parallel
def _layer_norm(x, scale, bias, eps, y, mean_out, inv_out, lo, hi):
    """Rows of x (R, D): y = (x - mean) * inv_std * scale + bias; scale/bias have D values."""
    d_n = x.shape[1]
    for r in range(lo, hi):
        src = x[r]
        dst = y[r]
        mean, inv = _moments(src, eps)
        m, k = src.dtype.type(mean), src.dtype.type(inv)  # the row in the tensor's precision: full SIMD width
        for i in range(d_n):
            dst[U(i)] = (src[U(i)] - m) * k * scale[U(i)] + bias[U(i)]
        mean_out[r] = mean
        inv_out[r] = inv


@jit_parallel
def _instance_norm(x, scale, bias, eps, y, lo, hi):
    """Planes of x (N, C, L): normalize each over L, then scale[c], bias[c]."""
    n_n, c_n, l_n = x.shape
    for nc in range(lo, hi):
        n = nc // c_n
        c = nc - n * c_n
        src = x[n, c]
        dst = y[n, c]
        mean, inv = _moments(src, eps)
        a = scale[c] * inv
        for i in range(l_n):
            dst[U(i)] = (src[U(i)] - mean) * a + bias[c]


@jit_parallel
def _channel_affine(x, mean, inv, bias, y, lo, hi):
    """Planes of x (N, C, L): y = (x - mean[c]) * inv[c] + bias[c]."""
    n_n, c_n, l_n = x.shape
    for nc in range(lo, hi):
        n = nc // c_n
        c = nc - n * c_n
        src = x[n, c]
        dst = y[n, c]
        m, k, b = mean[c], inv[c], bias[c]
        for i in range(l_n):
            dst[U(i)] = (src[U(i)] - m) * k + b


def _planes(x):
    """(N, C, L) view of x (a copy only when x is not contiguous); works for zero-size axes."""
    return np.ascontiguousarray(x).reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))


def _per_element(p, inner, d_n, dtype):
    """A scale/bias as d_n contiguous values (the common case, a 1-D constant of that size, as is)."""
    if p.shape == (d_n,) and p.dtype == dtype and p.flags.c_contiguous:
        return p
    return np.ascontiguousarray(np.broadcast_to(p, inner), dtype).reshape(d_n)


def layer_normalization(x, scale, b=None, *, axis=-1, epsilon=1e-5, out=None):
    """Y (into ``out`` when the plan gives one: the node then has no other output), Mean, InvStdDev."""
    axis = axis % x.ndim
    inner = x.shape[axis:]
    d_n = math.prod(inner)
    rows = np.ascontiguousarray(x).reshape(math.prod(x.shape[:axis]), d_n)
    scale = _per_element(scale, inner, d_n, x.dtype)
    bias = np.zeros(d_n, x.dtype) if b is None else _per_element(b, inner, d_n, x.dtype)
    y = np.empty(x.shape, x.dtype) if out is None else out
    stats = x.shape[:axis] + (1,) * (x.ndim - axis)
    mean, inv = np.empty(stats, x.dtype), np.empty(stats, x.dtype)
    if d_n == 0:  # nothing to normalize over: statistics of an empty row are NaN, as in NumPy
        mean[...], inv[...] = np.nan, np.nan
    elif rows.shape[0]:
        args = (rows, scale, bias, float(epsilon), y.reshape(rows.shape), mean.reshape(-1), inv.reshape(-1))
        # at two threads: two halves of rows on fpair's helper (tpair.py), else shards of rows (one, when small)
        if not (config.current_threads() == 2 and tpair.rows_pair(2, rows.size) and tpair.layer_norm(*args)):
            parallel_for(_layer_norm, rows.shape[0], args, 8.0 * rows.size)
    return y, mean, inv


def batch_normalization(x, scale, b, mean, var, *, epsilon=1e-5):
    t = x.dtype.type
    inv = (scale / np.sqrt(var + t(epsilon))).astype(x.dtype, copy=False)
    y = np.empty(x.shape, x.dtype)
    planes = _planes(x)
    parallel_for(_channel_affine, planes.shape[0] * planes.shape[1],
                 (planes, np.ascontiguousarray(mean, x.dtype), np.ascontiguousarray(inv),
                  np.ascontiguousarray(b, x.dtype), y.reshape(planes.shape)), 4.0 * x.size)
    return y


def instance_normalization(x, scale, b, *, epsilon=1e-5):
    y = np.empty(x.shape, x.dtype)
    planes = _planes(x)
    parallel_for(_instance_norm, planes.shape[0] * planes.shape[1],
                 (planes, np.ascontiguousarray(scale, x.dtype), np.ascontiguousarray(b, x.dtype), float(epsilon),
                  y.reshape(planes.shape)), 8.0 * x.size)
    return y


# at two threads the session's budget where the rows pair (tpair.by_rows), one thread below SERIAL_WORK otherwise
LayerNormKernel = register_kernel("LayerNormalization", device="cpu", vendor="numba", dtype="float32")(
    tpair.by_rows(threaded(layer_normalization), lambda x, axis: x.ndim > 0 and math.prod(x.shape[:axis % x.ndim]) > 1))
register_kernel("BatchNormalization", device="cpu", vendor="numba", dtype="float32")(threaded(batch_normalization))
register_kernel("InstanceNormalization", device="cpu", vendor="numba", dtype="float32")(
    threaded(instance_normalization))

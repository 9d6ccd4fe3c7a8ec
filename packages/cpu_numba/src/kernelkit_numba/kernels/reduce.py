"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd (opset 18+: axes as an optional input).

The reduced axes are moved last (a copy only when they are not already trailing), so every
reduction is a row reduction over a (rows, L) view, accumulated in float64 for sums, means and products.
"""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel

U = np.uint64  # unsigned index: no wraparound check in inner loops
SUM, MEAN, MAX, MIN, PROD = range(5)


@jit_parallel
def _reduce_rows(x, y, code):
    r_n, l_n = x.shape
    for r in prange(r_n):
        src = x[r]
        if code == MAX or code == MIN:
            acc = -np.inf if code == MAX else np.inf
            nan = False
            for k in range(l_n):
                v = src[U(k)]
                nan = nan or v != v
                acc = max(acc, v) if code == MAX else min(acc, v)
            y[r] = np.nan if nan else acc
        elif code == PROD:
            prod = 1.0
            for k in range(l_n):
                prod *= src[U(k)]
            y[r] = prod
        else:
            total = 0.0
            for k in range(l_n):
                total += src[U(k)]
            y[r] = total / l_n if code == MEAN else total


def _reduce(data, axes, keepdims, noop_with_empty_axes, code, out=None):
    axes = [] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    if not axes:
        if noop_with_empty_axes:
            if out is None:
                return data.copy()
            np.copyto(out, data)
            return out
        axes = list(range(data.ndim))
    rank = data.ndim
    red = sorted({a % rank for a in axes}) if rank else []
    keep = [a for a in range(rank) if a not in red]
    rows = math.prod(data.shape[a] for a in keep)
    length = math.prod(data.shape[a] for a in red)
    out_shape = tuple(1 if a in red else data.shape[a] for a in range(rank)) if keepdims else \
        tuple(data.shape[a] for a in keep)
    y = np.empty(out_shape, data.dtype) if out is None else out
    if rows and length:
        x = np.ascontiguousarray(data.transpose(keep + red)).reshape(rows, length)
        _reduce_rows(x, y.reshape(rows), code)
    elif rows:  # empty reduction: the identity (mean of nothing is NaN, as in NumPy)
        y[...] = {SUM: 0, MEAN: np.nan, MAX: -np.inf, MIN: np.inf, PROD: 1}[code]
    return y


def reduce_sum(data, axes=None, *, keepdims=1, noop_with_empty_axes=0, out=None):
    return _reduce(data, axes, keepdims, noop_with_empty_axes, SUM, out)


def reduce_mean(data, axes=None, *, keepdims=1, noop_with_empty_axes=0, out=None):
    return _reduce(data, axes, keepdims, noop_with_empty_axes, MEAN, out)


def reduce_max(data, axes=None, *, keepdims=1, noop_with_empty_axes=0, out=None):
    return _reduce(data, axes, keepdims, noop_with_empty_axes, MAX, out)


def reduce_min(data, axes=None, *, keepdims=1, noop_with_empty_axes=0, out=None):
    return _reduce(data, axes, keepdims, noop_with_empty_axes, MIN, out)


def reduce_prod(data, axes=None, *, keepdims=1, noop_with_empty_axes=0, out=None):
    return _reduce(data, axes, keepdims, noop_with_empty_axes, PROD, out)


for _name, _fn in {"ReduceSum": reduce_sum, "ReduceProd": reduce_prod, "ReduceMean": reduce_mean,
                   "ReduceMax": reduce_max, "ReduceMin": reduce_min}.items():
    register_kernel(_name, device="cpu", vendor="numba", dtype="float32")(threaded(_fn))

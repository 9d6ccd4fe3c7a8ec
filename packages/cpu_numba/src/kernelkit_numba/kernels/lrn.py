"""LRN (local response normalization across channels): one parallel loop over (n, c) planes; the
window sum of squares over neighbouring channels accumulates in float64, like the reference."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _lrn(x, y, lo, hi, alpha_over_size, beta, bias):
    n_n, c_n, l_n = x.shape
    for p in prange(n_n * c_n):
        n = p // c_n
        c = p - n * c_n
        first, last = max(c - lo, 0), min(c + hi, c_n - 1)
        acc = np.zeros(l_n, np.float64)
        for k in range(first, last + 1):
            src = x[n, k]
            for i in range(l_n):
                v = np.float64(src[U(i)])
                acc[U(i)] += v * v
        src, dst = x[n, c], y[n, c]
        for i in range(l_n):
            dst[U(i)] = src[U(i)] / (bias + alpha_over_size * acc[U(i)]) ** beta


def lrn(x, *, alpha=1e-4, beta=0.75, bias=1.0, size=1):
    if size < 1:
        raise ValueError(f"size {size} must be >= 1")
    y = np.empty(x.shape, x.dtype)
    if x.size:
        planes = (x.shape[0], x.shape[1], math.prod(x.shape[2:]))
        _lrn(np.ascontiguousarray(x).reshape(planes), y.reshape(planes), (size - 1) // 2, size // 2,
             float(alpha) / size, float(beta), float(bias))
    return y


register_kernel("LRN", device="cpu", vendor="numba", dtype="float32")(threaded(lrn))

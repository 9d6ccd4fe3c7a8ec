"""CumSum(x, axis) with ``exclusive`` and ``reverse``: the tensor is viewed as (outer, L, inner);
each outer block runs down L once with one float64 running sum per inner position (the inner axis
innermost, so the loop is contiguous)."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _cumsum(x, y, exclusive, reverse):
    o_n, l_n, i_n = x.shape
    for o in prange(o_n):
        acc = np.zeros(i_n, np.float64)
        for step in range(l_n):
            k = l_n - 1 - step if reverse else step
            src, dst = x[o, k], y[o, k]
            for i in range(i_n):
                if exclusive:
                    dst[U(i)] = acc[U(i)]
                    acc[U(i)] += src[U(i)]
                else:
                    acc[U(i)] += src[U(i)]
                    dst[U(i)] = acc[U(i)]


def cumsum(x, axis, *, exclusive=0, reverse=0):
    axis = np.asarray(axis).reshape(-1)
    if axis.size != 1 or not -x.ndim <= int(axis[0]) < x.ndim:
        raise ValueError(f"axis {axis.tolist()} is not one axis of a rank-{x.ndim} tensor")
    axis = int(axis[0]) % x.ndim
    y = np.empty(x.shape, x.dtype)
    if x.size:
        outer = math.prod(x.shape[:axis])
        lines = np.ascontiguousarray(x).reshape(outer, x.shape[axis], -1)
        _cumsum(lines, y.reshape(lines.shape), bool(exclusive), bool(reverse))
    return y


register_kernel("CumSum", device="cpu", vendor="numba", dtype="float32")(threaded(cumsum))

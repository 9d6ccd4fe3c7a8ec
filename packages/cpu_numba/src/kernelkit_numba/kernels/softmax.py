"""Softmax and LogSoftmax along one axis (ONNX opset 13): the tensor is viewed as
(outer, L, inner) and each of the outer*inner lines is normalized with a max-subtracted exp sum."""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from kernelkit.registry import register_kernel

from ..config import jit_parallel


@jit_parallel
def _softmax(x, y, log):
    """x, y: (outer, L, inner). Lines run along axis 1."""
    o_n, l_n, i_n = x.shape
    for oi in prange(o_n * i_n):
        o = oi // i_n
        i = oi - o * i_n
        src = x[o, :, i]
        dst = y[o, :, i]
        top = src[0]
        for k in range(1, l_n):
            top = max(top, src[k])
        total = 0.0
        if log:
            for k in range(l_n):
                total += math.exp(src[k] - top)
            shift = top + math.log(total)
            for k in range(l_n):
                dst[k] = src[k] - shift
        else:
            for k in range(l_n):
                e = math.exp(src[k] - top)
                dst[k] = e
                total += e
            scale = 1.0 / total
            for k in range(l_n):
                dst[k] *= scale


def _lines(x, axis):
    axis = axis % max(x.ndim, 1)
    if x.ndim == 0:
        return np.ascontiguousarray(x).reshape(1, 1, 1)
    outer = math.prod(x.shape[:axis])
    return np.ascontiguousarray(x).reshape(outer, x.shape[axis], -1)


@register_kernel("Softmax", device="cpu", vendor="numba", dtype="float32")
def softmax(x, *, axis=-1):
    y = np.empty(x.shape, x.dtype)
    if x.size:
        lines = _lines(x, axis)
        _softmax(lines, y.reshape(lines.shape), False)
    return y


@register_kernel("LogSoftmax", device="cpu", vendor="numba", dtype="float32")
def log_softmax(x, *, axis=-1):
    y = np.empty(x.shape, x.dtype)
    if x.size:
        lines = _lines(x, axis)
        _softmax(lines, y.reshape(lines.shape), True)
    return y

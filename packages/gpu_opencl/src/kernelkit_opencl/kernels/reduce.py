"""ReduceSum/Mean/Max/Min/Prod over any axes (float32): the reduced axes are moved last with the
strided copy when they are not already trailing, then one work-item reduces each row (nn.cl)."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import register_kernel
from kernelkit.geometry import normalize_axes

from ._common import contiguous_strides, launch_1d, launch_vec, source
from .elementwise import ew_kernel
from .layout import strided_copy

MODES = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4}


def _reduction(op: str):
    mode = MODES[op]

    def kernel(data, axes=None, *, keepdims: int = 1, noop_with_empty_axes: int = 0):
        dev = data.device
        ax = [] if axes is None else [int(a) for a in axes.values().ravel()]
        if not ax:
            if noop_with_empty_axes:
                y = dev.empty(data.shape, data.dtype)
                if data.size:
                    launch_vec(dev, ew_kernel(dev, "unary_Identity", data.dtype), data.size,
                              (data.buffer, y.buffer, np.int32(data.size), np.float32(0), np.float32(0)),
                              [data], [y], "copy")
                return y
            ax = list(range(data.ndim))
        ax = sorted(set(normalize_axes(ax, data.ndim)))
        kept = [i for i in range(data.ndim) if i not in ax]
        out_shape = tuple(1 if i in ax else d for i, d in enumerate(data.shape)) if keepdims \
            else tuple(data.shape[i] for i in kept)
        rows, length = math.prod(data.shape[i] for i in kept), math.prod(data.shape[i] for i in ax)
        y = dev.empty(out_shape, data.dtype)
        if rows == 0:
            return y
        src = data
        if ax != list(range(data.ndim - len(ax), data.ndim)) and length > 1:  # move reduced axes last
            perm = kept + ax
            shape = tuple(data.shape[p] for p in perm)
            src = dev.empty(shape, data.dtype)
            strides = contiguous_strides(data.shape)
            strided_copy(data, src, shape, [strides[p] for p in perm], contiguous_strides(shape))
        launch_1d(dev, dev.kernel(source("nn.cl"), "reduce_rows"), rows,
                  (src.buffer, y.buffer, np.int32(rows), np.int32(length), np.int32(mode)), [src], [y], op)
        return y

    kernel.__name__ = kernel.__qualname__ = f"opencl_{op.lower()}"
    return kernel


def register() -> None:
    for op in MODES:
        register_kernel(op, device="gpu", vendor="opencl", dtype="float32")(_reduction(op))

"""ArgMax/ArgMin, CumSum (one work-item per line of the axis) and TopK (one work-item per element,
written at its rank) along one axis, from ``typed.cl``."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import ShapeError, register_kernel

from ._common import launch_1d
from .typed import NUMERIC, typed_kernel

CUMSUM_DTYPES = ("float32", "int32", "int64")


def _lines(op: str, shape, axis: int):
    """(normalized axis, lines, len, inner) for work along ``axis`` of ``shape``."""
    if not -len(shape) <= axis < len(shape):
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {len(shape)}")
    axis %= len(shape)
    inner = math.prod(shape[axis + 1:])
    return axis, math.prod(shape[:axis]) * inner, shape[axis], inner


def _arg(op: str, is_max: int):
    def kernel(data, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0):
        dev = data.device
        axis, lines, length, inner = _lines(op, data.shape, axis)
        if length == 0:
            raise ShapeError(f"{op}: cannot take an arg-extreme along empty axis {axis} of {data.shape}")
        shape = tuple(1 if i == axis else d for i, d in enumerate(data.shape)) if keepdims \
            else tuple(d for i, d in enumerate(data.shape) if i != axis)
        out = dev.empty(shape, np.int64)
        if lines:
            launch_1d(dev, typed_kernel(dev, "arg_extreme", data.dtype), lines,
                      (data.buffer, out.buffer, np.int32(lines), np.int32(length), np.int32(inner), np.int32(is_max),
                       np.int32(bool(select_last_index))), [data], [out], op)
        return out

    kernel.__name__ = kernel.__qualname__ = f"opencl_{op.lower()}"
    return kernel


def cumsum(x, axis, *, exclusive: int = 0, reverse: int = 0):
    dev = x.device
    values = np.asarray(axis.values()).reshape(-1)
    if values.size != 1:
        raise ShapeError(f"CumSum: axis {values.tolist()} must hold one value")
    _, lines, length, inner = _lines("CumSum", x.shape, int(values[0]))
    y = dev.empty(x.shape, x.dtype)
    if lines and length:
        launch_1d(dev, typed_kernel(dev, "cumsum", x.dtype), lines,
                  (x.buffer, y.buffer, np.int32(lines), np.int32(length), np.int32(inner),
                   np.int32(bool(exclusive)), np.int32(bool(reverse))), [x], [y], "CumSum")
    return y


def topk(x, k, *, axis: int = -1, largest: int = 1, sorted: int = 1):
    dev = x.device
    axis, _, length, inner = _lines("TopK", x.shape, axis)
    kv = np.asarray(k.values()).reshape(-1)
    if kv.size != 1 or kv.dtype.kind not in "iu" or not 0 <= int(kv[0]) <= length:
        raise ShapeError(f"TopK: K {kv.tolist()} must be one integer in [0, {length}] (axis {axis} of {x.shape})")
    count = int(kv[0])
    shape = x.shape[:axis] + (count,) + x.shape[axis + 1:]
    values, indices = dev.empty(shape, x.dtype), dev.empty(shape, np.int64)
    if values.size:
        launch_1d(dev, typed_kernel(dev, "topk", x.dtype), x.size,
                  (x.buffer, values.buffer, indices.buffer, np.int32(x.size), np.int32(length), np.int32(inner),
                   np.int32(count), np.int32(bool(largest))), [x], [values, indices], "TopK")
    return values, indices


def register() -> None:
    register_kernel("TopK", device="gpu", vendor="opencl", dtype=NUMERIC)(topk)
    register_kernel("ArgMax", device="gpu", vendor="opencl", dtype=NUMERIC)(_arg("ArgMax", 1))
    register_kernel("ArgMin", device="gpu", vendor="opencl", dtype=NUMERIC)(_arg("ArgMin", 0))
    register_kernel("CumSum", device="gpu", vendor="opencl", dtype=CUMSUM_DTYPES)(cumsum)

"""BatchNormalization (inference), Softmax/LogSoftmax, Clip, Sum and Mean on the OpenCL device."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import register_kernel

from ._common import launch_1d, launch_vec, source, storage_defines
from .elementwise import DTYPES, binary, ew_kernel


def batch_normalization(x, scale, b, mean, var, *, epsilon: float = 1e-5):
    dev = x.device
    y = dev.empty(x.shape, x.dtype)
    n = x.size
    if n:
        inner = math.prod(x.shape[2:])
        launch_1d(dev, dev.kernel(source("nn.cl"), "batch_norm"), n,
                  (x.buffer, scale.buffer, b.buffer, mean.buffer, var.buffer, y.buffer, np.int32(n),
                   np.int32(x.shape[1]), np.int32(inner), np.float32(epsilon)), [x, scale, b, mean, var], [y],
                  "batch_norm")
    return y


ROW_GROUP = 128  # RG in nn.cl


def _last_axis(spec, axis: int) -> bool:
    return spec is not None and spec.rank > 0 and axis % spec.rank == spec.rank - 1


def _softmax(log_mode: int):
    def kernel(x, *, axis: int = -1):
        dev = x.device
        y = dev.empty(x.shape, x.dtype)
        if x.size == 0:
            return y
        shape = x.shape if x.ndim else (1,)
        axis = axis + len(shape) if axis < 0 else axis
        inner = math.prod(shape[axis + 1:])
        lines = x.size // shape[axis]
        if inner == 1:  # the usual last axis: one work-group per contiguous row
            dev.launch(dev.kernel(source("nn.cl"), "softmax_rows", storage_defines(x.dtype)), (lines * ROW_GROUP,),
                       (ROW_GROUP,),
                       (x.buffer, y.buffer, np.int32(shape[axis]), np.int32(log_mode)), [x], [y],
                       "log_softmax" if log_mode else "softmax")
            return y
        launch_1d(dev, dev.kernel(source("nn.cl"), "softmax"), lines,
                  (x.buffer, y.buffer, np.int32(lines), np.int32(shape[axis]), np.int32(inner), np.int32(log_mode)),
                  [x], [y], "log_softmax" if log_mode else "softmax")
        return y

    kernel.__name__ = kernel.__qualname__ = "log_softmax" if log_mode else "softmax"
    return kernel


def clip(x, lo=None, hi=None):
    """Clip with min/max inputs read from their host copies (small constants) - one launch."""
    dev = x.device
    a = float(lo.values().reshape(())) if lo is not None else -np.inf
    b = float(hi.values().reshape(())) if hi is not None else np.inf
    y = dev.empty(x.shape, x.dtype)
    if x.size:
        launch_vec(dev, ew_kernel(dev, "clip", x.dtype), x.size,
                  (x.buffer, y.buffer, np.int32(x.size), np.float32(a), np.float32(b)), [x], [y], "clip")
    return y


def sum_(*inputs):
    out = inputs[0]
    for other in inputs[1:]:
        out = binary("Add", out, other)
    return out if len(inputs) > 1 else binary("Add", out, _zeros_like(out))


def mean(*inputs):
    total = sum_(*inputs)
    scale = total.device.upload(np.array(1.0 / len(inputs), total.dtype))
    return binary("Mul", total, scale)


def _zeros_like(t):
    return t.device.upload(np.zeros((), t.dtype))


def register() -> None:
    register_kernel("BatchNormalization", device="gpu", vendor="opencl", dtype="float32")(batch_normalization)
    register_kernel("Softmax", device="gpu", vendor="opencl", dtype="float32")(_softmax(0))
    register_kernel("Softmax", device="gpu", vendor="opencl", dtype="float16",  # half: last axis only
                    supports=lambda specs, attrs: _last_axis(specs[0], attrs.get("axis", -1)))(_softmax(0))
    register_kernel("LogSoftmax", device="gpu", vendor="opencl", dtype="float32")(_softmax(1))
    register_kernel("Clip", device="gpu", vendor="opencl", dtype=DTYPES)(clip)
    register_kernel("Sum", device="gpu", vendor="opencl", dtype=DTYPES)(sum_)
    register_kernel("Mean", device="gpu", vendor="opencl", dtype=DTYPES)(mean)

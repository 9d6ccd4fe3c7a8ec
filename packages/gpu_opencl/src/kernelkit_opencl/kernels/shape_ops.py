"""Shape, Size, Range, ConstantOfShape and Dropout (inference) on the OpenCL device. The first four
are shape computations: their (small, host-side) inputs are read from the host copies kept for
small tensors, the core's reference computes the values and the result is uploaded without
blocking; usually ``fold_constants`` removes them first. Dropout copies X (and a True mask)."""
from __future__ import annotations

import numpy as np
from kernelkit import ShapeError, register_kernel
from kernelkit.geometry import clamped_range as _clamped
from kernelkit.ops.constant import constant_of_shape as host_constant_of_shape
from kernelkit.ops.range import DTYPES as RANGE_DTYPES
from kernelkit.ops.range import range_ as host_range

from ._common import launch_vec
from .elementwise import DTYPES, ew_kernel


def shape(data, *, start: int = 0, end=None):
    return data.device.upload(np.array(data.shape[_clamped(data.ndim, start, end)], np.int64).reshape(-1))


def size(data):
    return data.device.upload(np.array(data.size, np.int64))


def range_(start, limit, delta):
    try:
        return start.device.upload(host_range(start.values(), limit.values(), delta.values()))
    except ValueError as exc:
        raise ShapeError(f"Range: {exc}") from None


def constant_of_shape(shape, *, value=None):
    try:
        return shape.device.upload(host_constant_of_shape(np.asarray(shape.values()), value=value))
    except ValueError as exc:
        raise ShapeError(f"ConstantOfShape: {exc}") from None


def dropout(x, ratio=None, training_mode=None, *, output_count: int = 1):
    dev = x.device
    if training_mode is not None and bool(np.asarray(training_mode.values()).reshape(())):
        raise ShapeError("Dropout: training_mode=True is not supported (inference only)")
    y = dev.empty(x.shape, x.dtype)
    if x.size:
        launch_vec(dev, ew_kernel(dev, "unary_Identity", x.dtype), x.size,
                  (x.buffer, y.buffer, np.int32(x.size), np.float32(0), np.float32(0)), [x], [y], "copy")
    if output_count < 2:
        return (y,)
    return y, dev.upload(np.ones(x.shape, bool))


def register() -> None:
    register_kernel("Shape", device="gpu", vendor="opencl", dtype="*")(shape)
    register_kernel("Size", device="gpu", vendor="opencl", dtype="*")(size)
    register_kernel("Range", device="gpu", vendor="opencl", dtype=RANGE_DTYPES)(range_)
    register_kernel("ConstantOfShape", device="gpu", vendor="opencl", dtype="int64")(constant_of_shape)
    register_kernel("Dropout", device="gpu", vendor="opencl", dtype=DTYPES)(dropout)

"""LayerNormalization, InstanceNormalization and LRN (float32) on the OpenCL device (``nn.cl``):
one work-group per normalized row (LayerNorm: the trailing axes from ``axis``; InstanceNorm: the
spatial dims of each (n, c))."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import ShapeError, register_kernel

from ._common import launch_1d, source, storage_defines
from .layout import expand

ROW_GROUP = 128  # RG in nn.cl: one work-group per normalized row


def _row_norm(x, scale, b, rows: int, length: int, channels: int, epsilon: float, per_channel: int,
              stats_shape=None):
    dev = x.device
    y = dev.empty(x.shape, x.dtype)
    mean = inv = None
    if stats_shape is not None:
        mean, inv = dev.empty(stats_shape, x.dtype), dev.empty(stats_shape, x.dtype)
    if rows and length:
        dev.launch(dev.kernel(source("nn.cl"), "row_norm", storage_defines(x.dtype)), (rows * ROW_GROUP,), (ROW_GROUP,),
                  (x.buffer, scale.buffer, None if b is None else b.buffer, y.buffer,
                   None if mean is None else mean.buffer, None if inv is None else inv.buffer, np.int32(rows),
                   np.int32(length), np.int32(max(channels, 1)), np.float32(epsilon), np.int32(per_channel),
                   np.int32(b is not None), np.int32(mean is not None)),
                  [x, scale, b], [t for t in (y, mean, inv) if t is not None],
                  "instance_norm" if per_channel else "layer_norm")
    return y, mean, inv


def layer_normalization(x, scale, b=None, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1,
                        output_count: int = 3):
    if not -x.ndim <= axis < x.ndim:
        raise ShapeError(f"LayerNormalization: axis {axis} is out of range for rank {x.ndim}")
    axis %= x.ndim
    norm_shape = x.shape[axis:]

    def full(t):  # scale/bias broadcast to the normalized shape, as a contiguous tensor
        if t is None or t.shape == norm_shape:
            return t
        return expand(t, norm_shape)

    stats_shape = x.shape[:axis] + (1,) * (x.ndim - axis) if output_count > 1 else None
    y, mean, inv = _row_norm(x, full(scale), full(b), math.prod(x.shape[:axis]), math.prod(norm_shape), 1,
                             epsilon, 0, stats_shape)
    return (y,) if output_count == 1 else (y, mean, inv)


def instance_normalization(x, scale, b, *, epsilon: float = 1e-5):
    n, c = x.shape[:2]
    return _row_norm(x, scale, b, n * c, math.prod(x.shape[2:]), c, epsilon, 1)[0]


def lrn(x, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, size: int):
    dev = x.device
    y = dev.empty(x.shape, x.dtype)
    if x.size:
        channels, inner = x.shape[1], math.prod(x.shape[2:])
        launch_1d(dev, dev.kernel(source("nn.cl"), "lrn"), x.size,
                  (x.buffer, y.buffer, np.int32(x.size), np.int32(channels), np.int32(inner),
                   np.int32((size - 1) // 2), np.int32(size // 2), np.float32(alpha / size), np.float32(beta),
                   np.float32(bias)), [x], [y], "LRN")
    return y


def register() -> None:
    for dtype in ("float32", "float16"):  # float16: half storage, float statistics
        register_kernel("LayerNormalization", device="gpu", vendor="opencl", dtype=dtype)(layer_normalization)
    register_kernel("InstanceNormalization", device="gpu", vendor="opencl", dtype="float32")(instance_normalization)
    register_kernel("LRN", device="gpu", vendor="opencl", dtype="float32")(lrn)

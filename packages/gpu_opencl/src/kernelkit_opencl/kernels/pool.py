"""MaxPool, AveragePool (2-D, and 1-D as 2-D) and GlobalAverage/MaxPool; geometry from the core's
window rule (pads, auto_pad, ceil_mode, dilations)."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import register_kernel
from kernelkit.geometry import window

from ._common import launch_1d, round_up, source, storage_defines


def _supports(specs, attrs) -> bool:
    return specs[0] is not None and specs[0].rank in (3, 4)


def _pool(x, kernel_name, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, flags):
    dev = x.device
    one_d = x.ndim == 3
    if one_d:
        x = x.view((x.shape[0], x.shape[1], 1, x.shape[2]))
        kernel_shape, pads = (1, *kernel_shape), ((0, pads[0], 0, pads[1]) if pads else ())
        strides, dilations = ((1, *strides) if strides else ()), ((1, *dilations) if dilations else ())
    win = window(x.shape[2:], kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                 ceil_mode=ceil_mode)
    n, c, H, W = x.shape
    oh, ow = win.out
    y = dev.empty((n, c, oh, ow), x.dtype)
    idx = dev.empty((n, c, oh, ow), np.int64) if kernel_name == "max_pool" else None
    p = dev.meta((c, H, W, oh, ow, *win.kernel, *win.strides, win.begin[0], win.begin[1], *win.dilations,
                       win.end[0], win.end[1], flags))
    total = y.size
    if total:
        knl = dev.kernel(source("pool.cl"), kernel_name, storage_defines(x.dtype))
        args = [x.buffer, y.buffer] + ([idx.buffer] if idx is not None else []) + [np.int32(total), p]
        launch_1d(dev, knl, total, args, [x], [y] + ([idx] if idx is not None else []), kernel_name)
    if one_d:
        y = y.view((n, c, ow))
        idx = idx.view((n, c, ow)) if idx is not None else None
    return (y, idx) if idx is not None else y


def max_pool(x, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations=(), kernel_shape=(), pads=(),
             storage_order: int = 0, strides=()):
    flags = 2 * int(bool(storage_order))
    return _pool(x, "max_pool", kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, flags)


def average_pool(x, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0, dilations=(),
                 kernel_shape=(), pads=(), strides=()):
    return _pool(x, "average_pool", kernel_shape, strides, dilations, pads, auto_pad, ceil_mode,
                 int(bool(count_include_pad)))


def _global(mode: int):
    def kernel(x):
        dev = x.device
        rows = math.prod(x.shape[:2])
        hw = math.prod(x.shape[2:])
        y = dev.empty(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype)
        if rows:
            knl = dev.kernel(source("pool.cl"), "global_pool", storage_defines(x.dtype))
            dev.launch(knl, (round_up(rows, 64),), (64,), (x.buffer, y.buffer, np.int32(rows), np.int32(hw),
                                                           np.int32(mode)), [x], [y], "global_pool")
        return y

    kernel.__name__ = kernel.__qualname__ = ("global_max_pool" if mode else "global_average_pool")
    return kernel


def register() -> None:
    for dtype in ("float32", "float16"):  # float16: half storage, float arithmetic
        register_kernel("MaxPool", device="gpu", vendor="opencl", dtype=dtype, supports=_supports)(max_pool)
        register_kernel("AveragePool", device="gpu", vendor="opencl", dtype=dtype, supports=_supports)(average_pool)
        register_kernel("GlobalAveragePool", device="gpu", vendor="opencl", dtype=dtype)(_global(0))
        register_kernel("GlobalMaxPool", device="gpu", vendor="opencl", dtype=dtype)(_global(1))

"""MaxPool (with optional Indices) and AveragePool (ONNX opset 19+: N-D, strides, pads, auto_pad,
dilations, ceil_mode, count_include_pad), computed over strided windows of the padded input;
MaxPool without Indices is a running maximum over unpadded per-offset input regions."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import REQUIRED, register_kernel, register_op
from ._util import random, with_out
from ._window import WINDOW_ATTRS, compute_dtype, kernel_offsets, symbolic_out, window, windows

POOL_ATTRS = {**WINDOW_ATTRS, "kernel_shape": ("ints", REQUIRED), "ceil_mode": ("int", 0)}
MAX_DTYPES = FLOAT_TYPES + ("int8", "uint8")


def _window_of(ctx):
    x, a = ctx.inputs[0], ctx.attrs
    if x.rank < 3:
        raise ctx.error(f"X {x} must have rank >= 3 (N, C, D1, ...)")
    return window(x.shape[2:], a["kernel_shape"], strides=a["strides"], dilations=a["dilations"], pads=a["pads"],
                  auto_pad=a["auto_pad"], ceil_mode=a["ceil_mode"], fail=ctx.error)


def _infer_max(ctx) -> list[TensorSpec]:
    x = ctx.inputs[0]
    if ctx.attrs["storage_order"] not in (0, 1):
        raise ctx.error(f"storage_order {ctx.attrs['storage_order']} must be 0 or 1")
    shape = (*x.shape[:2], *symbolic_out(ctx, _window_of(ctx)))
    return [TensorSpec(shape, x.dtype), TensorSpec(shape, "int64")]


def _infer_average(ctx) -> TensorSpec:
    x = ctx.inputs[0]
    return TensorSpec((*x.shape[:2], *symbolic_out(ctx, _window_of(ctx))), x.dtype)


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@register_kernel("MaxPool", device="cpu", vendor="reference", dtype=MAX_DTYPES, priority=-100)
def max_pool(x, *, auto_pad="NOTSET", ceil_mode=0, dilations=(), kernel_shape=(), pads=(), storage_order=0,
             strides=(), output_count=2, out=None):
    win = window(x.shape[2:], kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                 ceil_mode=ceil_mode)
    n, c, spatial, nd = *x.shape[:2], x.shape[2:], win.rank
    if output_count == 1:  # no Indices wanted: a running maximum over the kernel offsets, no padded copy
        y = np.full((n, c, *win.out), _lowest(x.dtype), x.dtype) if out is None else out
        if out is not None:
            out.fill(_lowest(x.dtype))
        for _, out, src in kernel_offsets(spatial, win):
            region = y[(slice(None), slice(None), *out)]
            np.maximum(region, x[(slice(None), slice(None), *src)], out=region)
        return (y,)
    view = windows(x, win, fill=_lowest(x.dtype))  # (N, C, *out, *K)
    out = view.shape[2:2 + nd]
    flat = view.reshape(n, c, *out, math.prod(win.kernel))
    arg = flat.argmax(axis=-1)
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    # window offset -> input coordinate per spatial axis -> flat index into x
    offsets = np.unravel_index(arg, win.kernel)
    coords = [np.arange(o).reshape((-1,) + (1,) * (nd - 1 - i)) * s - b + k * d
              for i, (o, s, b, k, d) in enumerate(zip(out, win.strides, win.begin, offsets, win.dilations))]
    order = range(nd - 1, -1, -1) if storage_order else range(nd)
    index = np.zeros(arg.shape, np.int64)
    for i in order:
        index = index * spatial[i] + coords[i]
    base = np.arange(n * c, dtype=np.int64).reshape(n, c, *(1,) * nd) * math.prod(spatial)
    return y, index + base


@register_kernel("AveragePool", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
@with_out
def average_pool(x, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=(), kernel_shape=(),
                 pads=(), strides=()):
    ct = compute_dtype(x.dtype)
    win = window(x.shape[2:], kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                 ceil_mode=ceil_mode)
    axes = tuple(range(-win.rank, 0))
    sums = windows(x.astype(ct, copy=False), win).sum(axis=axes)
    mask = np.ones((1, 1, *x.shape[2:]), ct)
    if count_include_pad:  # explicit pads count, the ceil_mode overhang does not
        mask = np.pad(mask, [(0, 0), (0, 0)] + list(zip(win.begin, win.end)), constant_values=1)
        win = win._replace(begin=(0,) * win.rank, end=(0,) * win.rank)
    counts = windows(mask, win).sum(axis=axes)
    return (sums / counts).astype(x.dtype, copy=False)


def _samples(rng, dtype, extra):
    def r(*shape):
        return random(rng, shape, dtype, -4, 4)

    yield [r(1, 2, 6, 6)], {"kernel_shape": [2, 2], "strides": [2, 2]}
    yield [r(2, 3, 7, 5)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    yield [r(1, 2, 7, 8)], {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1}
    yield [r(1, 2, 8, 7)], {"kernel_shape": [2, 3], "dilations": [2, 2]}
    yield [r(1, 1, 7, 6)], {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}
    yield [r(1, 1, 6, 7)], {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}
    yield [r(2, 2, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}  # 1-D
    yield [r(1, 2, 4, 5, 4)], {"kernel_shape": [2, 2, 2], "strides": [2, 1, 2]}  # 3-D
    yield from extra(r)


def _max_samples(rng, dtype):
    def extra(r):
        yield [r(1, 2, 5, 5)], {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "storage_order": 1}, {"n_outputs": 2}
        yield [r(1, 1, 6, 6)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}, \
            {"n_outputs": 2}
        yield [r(2, 3, 7, 5)], {"kernel_shape": [2, 3], "strides": [2, 2], "dilations": [2, 1]}, {"n_outputs": 2}

    return _samples(rng, dtype, extra)


def _average_samples(rng, dtype):
    def extra(r):
        yield [r(1, 2, 6, 5)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}
        yield [r(1, 2, 7, 7)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 0],
                                "count_include_pad": 1}

    return _samples(rng, dtype, extra)


register_op("MaxPool", inputs=["X"], outputs=["Y", "Indices?"], attrs={**POOL_ATTRS, "storage_order": ("int", 0)},
            infer=_infer_max, samples=_max_samples)
register_op("AveragePool", inputs=["X"], outputs=["Y"], attrs={**POOL_ATTRS, "count_include_pad": ("int", 0)},
            infer=_infer_average, samples=_average_samples)

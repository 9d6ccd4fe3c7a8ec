"""LpPool (opset 18+): (sum over the window of |x|^p)^(1/p), over the same strided windows of the
zero-padded input as AveragePool (pool.py), with strides, pads, auto_pad, dilations, ceil_mode."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..registry import register_kernel, register_op
from ._util import random
from ._window import compute_dtype, window, windows
from .pool import POOL_ATTRS, _infer_average


@register_kernel("LpPool", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def lp_pool(x, *, auto_pad="NOTSET", ceil_mode=0, dilations=(), kernel_shape=(), p=2, pads=(), strides=()):
    ct = np.promote_types(compute_dtype(x.dtype), np.float32)
    win = window(x.shape[2:], kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                 ceil_mode=ceil_mode)
    powered = np.abs(x.astype(ct)) ** p
    sums = windows(powered, win).sum(axis=tuple(range(-win.rank, 0)))
    return (sums ** (1.0 / p)).astype(x.dtype)


def _samples(rng, dtype):
    x = random(rng, (1, 2, 5, 6), dtype)
    yield [x], {"kernel_shape": [2, 2]}
    yield [x], {"kernel_shape": [3, 2], "p": 3, "strides": [2, 1], "pads": [1, 0, 1, 1]}


register_op("LpPool", inputs=["X"], outputs=["Y"], attrs={**POOL_ATTRS, "p": ("int", 2)}, infer=_infer_average,
            samples=_samples)

"""LRN (ONNX opset 13+): local response normalization across channels,
y = x / (bias + alpha / size * sum of x^2 over the channel window) ** beta."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import REQUIRED, register_kernel, register_op
from ._util import random
from ._window import compute_dtype

ATTRS = {"alpha": ("float", 1e-4), "beta": ("float", 0.75), "bias": ("float", 1.0), "size": ("int", REQUIRED)}


def _infer(ctx) -> TensorSpec:
    if ctx.inputs[0].rank < 3:
        raise ctx.error(f"X {ctx.inputs[0]} must have rank >= 3 (N, C, D1, ...)")
    if ctx.attrs["size"] < 1:
        raise ctx.error(f"size {ctx.attrs['size']} must be >= 1")
    return ctx.inputs[0]


@register_kernel("LRN", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def lrn(x, *, alpha=1e-4, beta=0.75, bias=1.0, size=1):
    if x.size == 0:
        return x.copy()
    ct = compute_dtype(x.dtype)
    xc = x.astype(ct)
    lo, hi = (size - 1) // 2, size // 2  # channels before / after c
    sq = np.pad(np.square(xc), [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    sums = sliding_window_view(sq, size, axis=1).sum(axis=-1)
    y = xc / (ct.type(bias) + ct.type(alpha / size) * sums) ** ct.type(beta)
    return y.astype(x.dtype, copy=False)


def _samples(rng, dtype):
    yield [random(rng, (2, 5, 3, 3), dtype)], {"size": 3}
    yield [random(rng, (1, 7, 2, 3), dtype)], {"size": 5, "alpha": 0.5, "beta": 0.5, "bias": 2.0}
    yield [random(rng, (1, 6, 4, 2), dtype)], {"size": 4, "alpha": 0.5, "beta": 0.5, "bias": 2.0}
    yield [random(rng, (1, 3, 5), dtype)], {"size": 5, "alpha": 0.25}
    yield [random(rng, (1, 4, 2, 2, 2), dtype)], {"size": 1}


register_op("LRN", inputs=["X"], outputs=["Y"], attrs=ATTRS, infer=_infer, samples=_samples)

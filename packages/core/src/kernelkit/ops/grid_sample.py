"""GridSample(X (N, C, D1..Dr), grid (N, O1..Ok, r)): X sampled at the grid's normalized
coordinates ([-1, 1]; the last grid axis lists them innermost dim first, x before y). ``mode``
nearest (half to even), linear or cubic (Keys, a = -0.75), separable over the spatial dims;
``padding_mode`` zeros, border (clamp) or reflection; ``align_corners`` maps -1/1 to the corner
pixels' centres instead of their outer edges."""
from __future__ import annotations

import itertools

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random

_A = -0.75


def _reflect(x, lo, hi):
    span = hi - lo
    below, above = x < lo, x > hi
    d = np.where(below, lo - x, x - hi)
    n = np.trunc(d / span)
    r = d - n * span
    even = n % 2 == 0
    return np.where(below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x))


def _cubic(t):
    """Keys weights of the taps at -1, 0, 1, 2 for a fraction t."""
    t1, t2 = t + 1, 2 - t
    return [((_A * t1 - 5 * _A) * t1 + 8 * _A) * t1 - 4 * _A, ((_A + 2) * t - (_A + 3)) * t * t + 1,
            ((_A + 2) * (1 - t) - (_A + 3)) * (1 - t) * (1 - t) + 1, ((_A * t2 - 5 * _A) * t2 + 8 * _A) * t2 - 4 * _A]


def _taps(x, size, lo, hi, mode, padding):
    """[(index, weight, valid)] for one spatial dim."""
    if mode == "nearest":  # x is already a whole number
        base, weights, offsets = x, [np.ones_like(x)], [0]
    elif mode == "linear":
        base = np.floor(x)
        t = x - base
        weights, offsets = [1 - t, t], [0, 1]
    else:
        base = np.floor(x)
        weights, offsets = _cubic(x - base), [-1, 0, 1, 2]
    taps = []
    for off, w in zip(offsets, weights):
        i = (base + off).astype(np.int64)
        if padding == "zeros":
            valid = (i >= 0) & (i < size)
        elif padding == "border":
            i, valid = np.clip(i, 0, size - 1), np.ones(i.shape, bool)
        else:
            i, valid = np.trunc(_reflect(i.astype(np.float64), lo, hi)).astype(np.int64), np.ones(i.shape, bool)
        taps.append((np.clip(i, 0, size - 1), w, valid))
    return taps


@register_kernel("GridSample", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def grid_sample(x, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    if mode not in ("nearest", "linear", "cubic") or padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"mode {mode!r} / padding_mode {padding_mode!r} is not supported")
    dims = x.shape[2:]
    out = np.zeros(x.shape[:2] + grid.shape[1:-1], np.float64)
    for n in range(x.shape[0]):
        per_dim = []
        for i, size in enumerate(dims):
            g = grid[n, ..., len(dims) - 1 - i].astype(np.float64)
            c = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
            lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
            if mode == "nearest":
                c = np.rint(c)
            outside = (c < lo) | (c > hi)
            if padding_mode == "border":
                c = np.where(outside, np.clip(c, 0, size - 1), c)
            elif padding_mode == "reflection":
                c = np.where(outside, _reflect(c, lo, hi), c)
            if mode == "nearest":
                c = np.trunc(c)
            per_dim.append(_taps(c, size, lo, hi, mode, padding_mode))
        xn = x[n].astype(np.float64)
        for combo in itertools.product(*per_dim):
            weight = np.prod([w * v for _, w, v in combo], axis=0)
            out[n] += xn[(slice(None),) + tuple(i for i, _, _ in combo)] * weight
    return out.astype(x.dtype)


def _rule(ctx: InferContext) -> TensorSpec:
    x, grid = ctx.inputs
    if x.rank < 3 or grid.rank != x.rank or (isinstance(grid.shape[-1], int) and grid.shape[-1] != x.rank - 2):
        raise ctx.error(f"grid {grid} does not fit X {x}")
    return TensorSpec(x.shape[:2] + grid.shape[1:-1], x.dtype)


def _samples(rng, dtype):
    x = random(rng, (2, 3, 5, 6), dtype)
    grid = random(rng, (2, 4, 3, 2), dtype, -1.2, 1.2)
    for mode, padding in (("linear", "zeros"), ("nearest", "border"), ("cubic", "reflection")):
        yield [x, grid], {"mode": mode, "padding_mode": padding}
    yield [x, grid], {"align_corners": 1}


register_op("GridSample", inputs=["X", "grid"], outputs=["Y"],
            attrs={"align_corners": ("int", 0), "mode": ("string", "linear"), "padding_mode": ("string", "zeros")},
            infer=_rule, samples=_samples)

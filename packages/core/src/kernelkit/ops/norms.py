"""Normalizations beside LayerNormalization: LpNormalization (x / ||x||_p along ``axis``),
GroupNormalization (opset 21: statistics per group of channels, scale/bias per channel), RMSNormalization
(x / rms over axes [axis, rank), times scale) and MeanVarianceNormalization (over ``axes``).
Statistics are computed in float32 or wider."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import REQUIRED, register_kernel, register_op
from ..shape import InferContext
from ._util import random, same_as_input
from ._window import compute_dtype


def _ct(x):
    return x.astype(np.promote_types(compute_dtype(x.dtype), np.float32), copy=False)


@register_kernel("LpNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def lp_normalization(x, *, axis=-1, p=2):
    if p not in (1, 2):
        raise ValueError(f"p must be 1 or 2, got {p}")
    xc = _ct(x)
    norm = np.sum(np.abs(xc), axis=axis, keepdims=True) if p == 1 else \
        np.sqrt(np.sum(np.square(xc), axis=axis, keepdims=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norm == 0, 0, xc / norm).astype(x.dtype)


@register_kernel("GroupNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def group_normalization(x, scale, bias, *, num_groups, epsilon=1e-5, stash_type=1):
    n, c = x.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise ValueError(f"num_groups {num_groups} does not divide the {c} channels")
    xc = _ct(x).reshape(n, num_groups, -1)
    mean = xc.mean(axis=-1, keepdims=True)
    var = np.square(xc - mean).mean(axis=-1, keepdims=True)
    y = ((xc - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return (y * _ct(scale).reshape(shape) + _ct(bias).reshape(shape)).astype(x.dtype)


@register_kernel("RMSNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def rms_normalization(x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    xc = _ct(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    rms = np.sqrt(np.mean(np.square(xc), axis=axes, keepdims=True) + epsilon)
    return (xc / rms * _ct(scale)).astype(x.dtype)


@register_kernel("MeanVarianceNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES,
                 priority=-100)
def mean_variance_normalization(x, *, axes=(0, 2, 3)):
    xc = _ct(x)
    axes = tuple(int(a) for a in axes)
    mean = xc.mean(axis=axes, keepdims=True)
    std = np.sqrt(np.square(xc - mean).mean(axis=axes, keepdims=True))
    return ((xc - mean) / (std + 1e-9)).astype(x.dtype)


@register_kernel("Hardmax", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def hardmax(x, *, axis=-1):
    out = np.zeros_like(x)
    np.put_along_axis(out, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return out


def _axis_rule(ctx: InferContext) -> TensorSpec:
    ctx.axis(ctx.attrs["axis"], ctx.inputs[0].rank)
    return ctx.inputs[0]


def _group_rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    if x.rank < 2:
        raise ctx.error(f"X must have rank >= 2, got {x}")
    if ctx.attrs["stash_type"] != 1:
        raise ctx.error(f"stash_type {ctx.attrs['stash_type']} is not supported (only 1, float32)")
    return x


def _samples(shape, attrs):
    def samples(rng, dtype):
        yield [random(rng, shape, dtype)], attrs

    return samples


def _group_samples(rng, dtype):
    yield [random(rng, (2, 4, 3, 3), dtype), random(rng, (4,), dtype), random(rng, (4,), dtype)], {"num_groups": 2}


def _rms_samples(rng, dtype):
    yield [random(rng, (2, 3, 8), dtype), random(rng, (8,), dtype)], {}
    yield [random(rng, (2, 3, 4), dtype), random(rng, (3, 4), dtype)], {"axis": 1}


_STASH = {"epsilon": ("float", 1e-5), "stash_type": ("int", 1)}
register_op("LpNormalization", inputs=["input"], outputs=["output"], attrs={"axis": ("int", -1), "p": ("int", 2)},
            infer=_axis_rule, samples=_samples((3, 5), {"axis": 1}))
register_op("GroupNormalization", inputs=["X", "scale", "bias"], outputs=["Y"],
            attrs={"num_groups": ("int", REQUIRED), **_STASH}, infer=_group_rule, samples=_group_samples)
register_op("RMSNormalization", inputs=["X", "scale"], outputs=["Y"], attrs={"axis": ("int", -1), **_STASH},
            infer=_axis_rule, samples=_rms_samples)
register_op("MeanVarianceNormalization", inputs=["X"], outputs=["Y"], attrs={"axes": ("ints", [0, 2, 3])},
            infer=same_as_input, samples=_samples((2, 3, 4, 2), {}))
register_op("Hardmax", inputs=["input"], outputs=["output"], attrs={"axis": ("int", -1)}, infer=_axis_rule,
            samples=_samples((3, 5), {}))

"""BatchNormalization (ONNX opset 15+, inference only: training_mode=0)."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import random
from ._window import compute_dtype

ATTRS = {"epsilon": ("float", 1e-5), "momentum": ("float", 0.9), "training_mode": ("int", 0)}


def _infer(ctx) -> TensorSpec:
    x = ctx.inputs[0]
    if ctx.attrs["training_mode"] or len(ctx.node.outputs) > 1:
        raise ctx.error("only inference is supported (training_mode=0, one output Y)")
    if x.rank < 2:
        raise ctx.error(f"X {x} must have rank >= 2 (N, C, ...)")
    for name, spec in zip(("scale", "B", "input_mean", "input_var"), ctx.inputs[1:]):
        known = spec.rank == 1 and all(isinstance(d, int) for d in (spec.shape[0], x.shape[1]))
        if spec.rank != 1 or (known and spec.shape[0] != x.shape[1]):
            raise ctx.error(f"{name} {spec} must have shape ({x.shape[1]},)")
    return x


def _channel(v, ct, rank):
    return v.astype(ct, copy=False).reshape(-1, *(1,) * (rank - 2))


@register_kernel("BatchNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def batch_normalization(x, scale, b, mean, var, *, epsilon=1e-5):
    ct = compute_dtype(x.dtype)
    inv = scale.astype(ct) / np.sqrt(var.astype(ct) + ct.type(epsilon))
    y = np.subtract(x, _channel(mean, ct, x.ndim), dtype=ct)  # the one full-size temporary
    y *= _channel(inv, ct, x.ndim)
    y += _channel(b, ct, x.ndim)
    return y.astype(x.dtype, copy=False)


def _samples(rng, dtype):
    for shape, eps in [((2, 3, 4, 5), 1e-5), ((1, 4), 1e-3), ((2, 2, 7), 0.125), ((1, 3, 2, 2, 3), 1e-5)]:
        c = shape[1]
        yield [random(rng, shape, dtype), random(rng, (c,), dtype, 0.5, 1.5), random(rng, (c,), dtype),
               random(rng, (c,), dtype, -0.5, 0.5), random(rng, (c,), dtype, 0.2, 2.0)], {"epsilon": eps}


register_op("BatchNormalization", inputs=["X", "scale", "B", "input_mean", "input_var"],
            outputs=["Y", "running_mean?", "running_var?"], attrs=ATTRS, infer=_infer, samples=_samples)

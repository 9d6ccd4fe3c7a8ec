"""InstanceNormalization (ONNX opset 6+): per (n, c), normalize over the spatial axes."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import random
from ._window import compute_dtype


def _infer(ctx) -> TensorSpec:
    x, scale, b = ctx.inputs
    if x.rank < 3:
        raise ctx.error(f"input {x} must have rank >= 3 (N, C, D1, ...)")
    for name, spec in (("scale", scale), ("B", b)):
        if spec.rank != 1 or (isinstance(spec.shape[0], int) and isinstance(x.shape[1], int)
                              and spec.shape[0] != x.shape[1]):
            raise ctx.error(f"{name} {spec} must have shape ({x.shape[1]},)")
    return x


@register_kernel("InstanceNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def instance_normalization(x, scale, b, *, epsilon=1e-5):
    ct = compute_dtype(x.dtype)
    xc = x.astype(ct)
    axes = tuple(range(2, x.ndim))
    mean = xc.mean(axis=axes, keepdims=True)
    var = np.square(xc - mean).mean(axis=axes, keepdims=True)
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = (xc - mean) / np.sqrt(var + ct.type(epsilon)) * scale.astype(ct).reshape(shape) + b.astype(ct).reshape(shape)
    return y.astype(x.dtype, copy=False)


def _samples(rng, dtype):
    for shape, eps in [((2, 3, 4, 5), 1e-5), ((1, 2, 9), 2.0 ** -7), ((1, 3, 2, 3, 4), 1e-5)]:
        c = shape[1]
        yield [random(rng, shape, dtype), random(rng, (c,), dtype, 0.5, 1.5), random(rng, (c,), dtype)], \
            {"epsilon": eps}


register_op("InstanceNormalization", inputs=["input", "scale", "B"], outputs=["output"],
            attrs={"epsilon": ("float", 1e-5)}, infer=_infer, samples=_samples)

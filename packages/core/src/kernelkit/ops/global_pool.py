"""GlobalAveragePool and GlobalMaxPool: reduce every spatial axis to 1."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import into, random
from ._window import compute_dtype


def _infer(ctx) -> TensorSpec:
    x = ctx.inputs[0]
    if x.rank < 3:
        raise ctx.error(f"X {x} must have rank >= 3 (N, C, D1, ...)")
    return TensorSpec((*x.shape[:2], *(1,) * (x.rank - 2)), x.dtype)


@register_kernel("GlobalAveragePool", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def global_average_pool(x, *, out=None):
    axes = tuple(range(2, x.ndim))
    if out is not None and compute_dtype(x.dtype) == x.dtype:
        return np.mean(x, axis=axes, keepdims=True, out=out)
    return into(out, x.mean(axis=axes, keepdims=True, dtype=compute_dtype(x.dtype)).astype(x.dtype, copy=False))


@register_kernel("GlobalMaxPool", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def global_max_pool(x):
    if x.size == 0:  # an empty batch or channel axis gives an empty output; an empty window has no max
        if x.shape[0] and x.shape[1]:
            raise ValueError(f"GlobalMaxPool over an empty spatial extent {x.shape[2:]}: the maximum is undefined")
        return np.empty((*x.shape[:2], *(1,) * (x.ndim - 2)), x.dtype)
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


def _samples(rng, dtype):
    for shape in [(2, 3, 4, 5), (1, 4, 7), (1, 2, 3, 2, 4), (2, 3, 1, 1)]:
        yield [random(rng, shape, dtype)], {}


for _name in ("GlobalAveragePool", "GlobalMaxPool"):
    register_op(_name, inputs=["X"], outputs=["Y"], infer=_infer, samples=_samples)

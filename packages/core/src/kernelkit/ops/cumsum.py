"""CumSum(x, axis): running sums along ``axis`` (a 0-d int input); ``exclusive`` leaves out the
element itself, ``reverse`` runs from the end."""
from __future__ import annotations

import numpy as np

from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random

DTYPES = ("float16", "float32", "float64", "int32", "int64", "uint32", "uint64")


def _rule(ctx: InferContext) -> TensorSpec:
    x, axis = ctx.inputs
    if axis.dtype not in ("int32", "int64") or axis.rank > 1:
        raise ctx.error(f"axis must be a 0-d int32/int64 tensor, got {axis}")
    if ctx.value(1) is not None:
        values = np.asarray(ctx.value(1)).reshape(-1)
        if values.size != 1:
            raise ctx.error(f"axis must hold one value, got {values.tolist()}")
        ctx.axis(int(values[0]), x.rank)
    return x


@register_kernel("CumSum", device="cpu", vendor="reference", dtype=DTYPES, priority=-100)
def cumsum(x, axis, *, exclusive=0, reverse=0):
    axis = np.asarray(axis).reshape(-1)
    if axis.size != 1 or not -x.ndim <= int(axis[0]) < x.ndim:
        raise ValueError(f"axis {axis.tolist()} is not one axis of a rank-{x.ndim} tensor")
    axis = int(axis[0]) % x.ndim
    data = np.flip(x, axis) if reverse else x
    out = np.cumsum(data, axis=axis, dtype=x.dtype)
    if exclusive and out.shape[axis]:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=axis)), np.delete(out, -1, axis=axis)], axis=axis)
    return np.ascontiguousarray(np.flip(out, axis) if reverse else out)


def _samples(rng, dtype):
    x = random(rng, (3, 5), dtype, -4, 4)
    modes = [(0, {}), (1, {}), (-1, {"exclusive": 1}), (0, {"reverse": 1}), (1, {"exclusive": 1, "reverse": 1})]
    for axis, attrs in modes:
        yield [x, np.array(axis, np.int64)], attrs
    yield [random(rng, (7,), dtype, -4, 4), np.array(0, np.int32)], {"reverse": 1}


register_op("CumSum", inputs=["x", "axis"], outputs=["y"], attrs={"exclusive": ("int", 0), "reverse": ("int", 0)},
            infer=_rule, samples=_samples)

"""EyeLike(input): ones on diagonal ``k`` of a 2-D tensor shaped like the input, of ``dtype``
(default the input's); Det(X): determinants of the trailing 2-D matrices; CumProd: running
products, as CumSum (cumsum.py) with ``exclusive``/``reverse``."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES, FLOAT_TYPES, dtype_name
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random
from .cumsum import DTYPES as CUM_DTYPES
from .cumsum import _rule as _cum_rule
from .cumsum import _samples as _cum_samples

_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def _eye_dtype(attr, given: str) -> str:
    if attr is None:
        return given
    if attr not in _ONNX_DTYPES:
        raise ValueError(f"dtype {attr} is not a kernelkit dtype")
    return _ONNX_DTYPES[attr]


@register_kernel("EyeLike", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def eye_like(x, *, dtype=None, k=0):
    return np.eye(x.shape[0], x.shape[1], k, dtype=_eye_dtype(dtype, dtype_name(x.dtype)))


def _eye_rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    if x.rank != 2:
        raise ctx.error(f"input must be 2-D, got {x}")
    try:
        return TensorSpec(x.shape, _eye_dtype(ctx.attrs["dtype"], x.dtype))
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


@register_kernel("Det", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def det(x):
    ct = np.float32 if x.dtype == np.float16 else x.dtype
    return np.asarray(np.linalg.det(x.astype(ct)), x.dtype)


def _det_rule(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    if x.rank < 2:
        raise ctx.error(f"input must have rank >= 2, got {x}")
    return TensorSpec(x.shape[:-2], x.dtype)


@register_kernel("CumProd", device="cpu", vendor="reference", dtype=CUM_DTYPES, priority=-100)
def cumprod(x, axis, *, exclusive=0, reverse=0):
    axis = np.asarray(axis).reshape(-1)
    if axis.size != 1 or not -x.ndim <= int(axis[0]) < x.ndim:
        raise ValueError(f"axis {axis.tolist()} is not one axis of a rank-{x.ndim} tensor")
    axis = int(axis[0]) % x.ndim
    data = np.flip(x, axis) if reverse else x
    if exclusive:
        ones = np.ones_like(np.take(data, [0], axis=axis))
        data = np.concatenate([ones, np.delete(data, -1, axis=axis)], axis=axis)
    out = np.cumprod(data, axis=axis, dtype=x.dtype)
    return np.ascontiguousarray(np.flip(out, axis) if reverse else out)


def _eye_samples(rng, dtype):
    yield [random(rng, (3, 4), dtype)], {}
    yield [random(rng, (4, 3), dtype)], {"k": -1, "dtype": 1}


def _det_samples(rng, dtype):
    yield [random(rng, (2, 3, 3), dtype)], {}


register_op("EyeLike", inputs=["input"], outputs=["output"], attrs={"dtype": ("int", None), "k": ("int", 0)},
            infer=_eye_rule, samples=_eye_samples)
register_op("Det", inputs=["X"], outputs=["Y"], infer=_det_rule, samples=_det_samples)
register_op("CumProd", inputs=["x", "axis"], outputs=["y"], attrs={"exclusive": ("int", 0), "reverse": ("int", 0)},
            infer=_cum_rule, samples=_cum_samples)

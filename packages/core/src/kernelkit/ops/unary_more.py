"""More elementwise unary ops, one table row each (as unary.py): activations (Mish, Celu, Softsign,
Shrink, ThresholdedRelu, Swish), Sign, Round (half to even), trigonometric and hyperbolic functions,
and IsNaN / IsInf (bool output)."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES, NUMERIC_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random, same_as_input


def _f32(fn):
    """Compute float16 in float32, round once at the end."""
    def kernel(x, **attrs):
        y = fn(x.astype(np.float32) if x.dtype == np.float16 else x, **attrs)
        return np.asarray(y).astype(x.dtype, copy=False)

    kernel.__name__ = fn.__name__
    return kernel


def _mish(x):
    return x * np.tanh(np.logaddexp(x, x.dtype.type(0)))


def _celu(x, *, alpha):
    a = x.dtype.type(alpha)
    return np.maximum(x, 0) + np.minimum(0, a * np.expm1(x / a))


def _softsign(x):
    return x / (1 + np.abs(x))


def _swish(x, *, alpha):
    """x / (1 + exp(-alpha x)) in one temporary (the passes fuse_silu makes SiLU into: the formula in
    four NumPy passes and four temporaries cost more than the Sigmoid and Mul it replaces)."""
    t = np.multiply(x, -x.dtype.type(alpha), out=np.empty_like(x))  # an array for a 0-d x too
    np.exp(t, out=t)
    t += x.dtype.type(1)
    return np.divide(x, t, out=t)


def _shrink(x, *, bias, lambd):
    xf = x.astype(np.float64)
    out = np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0))
    return out.astype(x.dtype)


def _thresholded_relu(x, *, alpha):
    return np.where(x > x.dtype.type(alpha), x, x.dtype.type(0))


FLOAT = FLOAT_TYPES
# name: (fn(x, **attrs), attrs schema, dtypes, sample range)
UNARY_MORE = {
    "Mish": (_f32(_mish), {}, FLOAT, (-4, 4)),
    "Celu": (_f32(_celu), {"alpha": ("float", 1.0)}, FLOAT, (-3, 3)),
    "Softsign": (_f32(_softsign), {}, FLOAT, (-4, 4)),
    "Swish": (_f32(_swish), {"alpha": ("float", 1.0)}, FLOAT, (-4, 4)),
    "Shrink": (_shrink, {"bias": ("float", 0.0), "lambd": ("float", 0.5)}, NUMERIC_TYPES, (-3, 3)),
    "ThresholdedRelu": (_f32(_thresholded_relu), {"alpha": ("float", 1.0)}, FLOAT, (-3, 3)),
    "Sign": (np.sign, {}, NUMERIC_TYPES, (-3, 3)),
    "Round": (np.round, {}, FLOAT, (-4, 4)),
    "Sin": (_f32(np.sin), {}, FLOAT, (-4, 4)), "Cos": (_f32(np.cos), {}, FLOAT, (-4, 4)),
    "Tan": (_f32(np.tan), {}, FLOAT, (-1.2, 1.2)), "Asin": (_f32(np.arcsin), {}, FLOAT, (-1, 1)),
    "Acos": (_f32(np.arccos), {}, FLOAT, (-1, 1)), "Atan": (_f32(np.arctan), {}, FLOAT, (-4, 4)),
    "Sinh": (_f32(np.sinh), {}, FLOAT, (-3, 3)), "Cosh": (_f32(np.cosh), {}, FLOAT, (-3, 3)),
    "Asinh": (_f32(np.arcsinh), {}, FLOAT, (-4, 4)), "Acosh": (_f32(np.arccosh), {}, FLOAT, (1, 5)),
    "Atanh": (_f32(np.arctanh), {}, FLOAT, (-0.9, 0.9)),
}


def _samples_for(low, high):
    def samples(rng, dtype):
        for shape in [(7,), (2, 3, 4), ()]:
            yield [random(rng, shape, dtype, low, high)], {}

    return samples


for _name, (_fn, _attrs, _dtypes, (_lo, _hi)) in UNARY_MORE.items():
    register_op(_name, inputs=["X"], outputs=["Y"], attrs=_attrs, infer=same_as_input,
                samples=_samples_for(_lo, _hi))
    register_kernel(_name, device="cpu", vendor="reference", dtype=_dtypes, priority=-100)(_fn)


def _bool_rule(ctx: InferContext) -> TensorSpec:
    return TensorSpec(ctx.inputs[0].shape, "bool")


def _special_samples(rng, dtype):
    yield [np.array([np.nan, np.inf, -np.inf, 0.0, 1.5, -2.0], dtype)], {}


@register_kernel("IsNaN", device="cpu", vendor="reference", dtype=FLOAT, priority=-100)
def is_nan(x):
    return np.isnan(x)


@register_kernel("IsInf", device="cpu", vendor="reference", dtype=FLOAT, priority=-100)
def is_inf(x, *, detect_negative=1, detect_positive=1):
    return (np.isneginf(x) & bool(detect_negative)) | (np.isposinf(x) & bool(detect_positive))


register_op("IsNaN", inputs=["X"], outputs=["Y"], infer=_bool_rule, samples=_special_samples)
register_op("IsInf", inputs=["X"], outputs=["Y"], attrs={"detect_negative": ("int", 1), "detect_positive": ("int", 1)},
            infer=_bool_rule, samples=_special_samples)

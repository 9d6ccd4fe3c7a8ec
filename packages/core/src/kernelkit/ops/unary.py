"""Elementwise unary ops, one table row each: name -> (NumPy expression, attrs, dtypes, sample range).

Each row becomes a schema (output = input shape and dtype) and a reference kernel."""
from __future__ import annotations

import math

import numpy as np

from ..activation import erf
from ..dtypes import FLOAT_TYPES, INT_TYPES, SIGNED_TYPES
from ..registry import register_kernel, register_op
from ._util import into, random, same_as_input, with_out


def _hard_sigmoid(x, *, alpha, beta):
    return np.clip(x * x.dtype.type(alpha) + x.dtype.type(beta), 0, 1).astype(x.dtype)


def _selu(x, *, alpha, gamma):
    a, g = x.dtype.type(alpha), x.dtype.type(gamma)
    return np.where(x > 0, g * x, g * (a * np.exp(x) - a)).astype(x.dtype)


def _elu(x, *, alpha):
    return np.where(x > 0, x, x.dtype.type(alpha) * np.expm1(x)).astype(x.dtype)


def _gelu(x, *, approximate):
    if approximate == "tanh":
        c = x.dtype.type(math.sqrt(2 / math.pi))
        # x * x * x, not x**3: NumPy's float32 power by 3 is a powf call per element (~20 ms on
        # GPT-2's 64 x 3072, the whole block otherwise ~0.5 ms; fuse_gelu makes GPT-2's blocks this op)
        return (0.5 * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * (x * x * x))))).astype(x.dtype)
    return (0.5 * x * (1 + erf(x / x.dtype.type(math.sqrt(2))))).astype(x.dtype)


FLOAT = FLOAT_TYPES
# name: (fn(x, **attrs), attrs schema, dtypes, sample range)
UNARY = {
    "Relu": (lambda x: np.maximum(x, x.dtype.type(0)), {}, SIGNED_TYPES, (-2, 2)),
    "LeakyRelu": (lambda x, *, alpha: np.where(x >= 0, x, x * x.dtype.type(alpha)).astype(x.dtype),
                  {"alpha": ("float", 0.01)}, FLOAT, (-2, 2)),
    "Sigmoid": (lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype), {}, FLOAT, (-6, 6)),
    "HardSigmoid": (_hard_sigmoid, {"alpha": ("float", 0.2), "beta": ("float", 0.5)}, FLOAT, (-4, 4)),
    "HardSwish": (lambda x: (x * np.clip(x / x.dtype.type(6) + x.dtype.type(0.5), 0, 1)).astype(x.dtype),
                  {}, FLOAT, (-5, 5)),
    "Tanh": (np.tanh, {}, FLOAT, (-4, 4)),
    "Elu": (_elu, {"alpha": ("float", 1.0)}, FLOAT, (-3, 3)),
    "Selu": (_selu, {"alpha": ("float", 1.67326319217681884765625),
                     "gamma": ("float", 1.05070102214813232421875)}, FLOAT, (-3, 3)),
    "Softplus": (lambda x: np.logaddexp(x, x.dtype.type(0)).astype(x.dtype), {}, FLOAT, (-5, 5)),
    "Gelu": (_gelu, {"approximate": ("string", "none")}, FLOAT, (-4, 4)),
    "Erf": (erf, {}, FLOAT, (-3, 3)),
    "Exp": (np.exp, {}, FLOAT, (-4, 4)),
    "Log": (np.log, {}, FLOAT, (0.05, 10)),
    "Sqrt": (np.sqrt, {}, FLOAT, (0, 10)),
    "Reciprocal": (lambda x: np.reciprocal(x), {}, FLOAT, (0.2, 4)),
    "Neg": (np.negative, {}, SIGNED_TYPES, (-4, 4)),
    "Abs": (np.abs, {}, SIGNED_TYPES + tuple(t for t in INT_TYPES if t.startswith("u")), (-4, 4)),
    "Floor": (np.floor, {}, FLOAT, (-4, 4)),
    "Ceil": (np.ceil, {}, FLOAT, (-4, 4)),
    "Identity": (lambda x: x, {}, ("*",), (-2, 2)),
}


def _erf_out(x, *, out=None):
    if out is None:
        return erf(x)
    try:
        from scipy.special import erf as sp_erf
    except ImportError:  # pragma: no cover - scipy is present in tests
        return into(out, erf(x))
    return sp_erf(x, out=out)


class _Zeros(dict):
    """dtype -> its zero as a read-only 0-d array, made once (making one per call costs more than
    Relu on a small tensor; a ufunc takes a 0-d array ~0.3 us faster than a NumPy scalar)."""

    def __missing__(self, dtype):
        zero = self[dtype] = np.zeros((), dtype)
        zero.setflags(write=False)
        return zero


_ZEROS = _Zeros()


def _sigmoid(x, *, out=None):
    y = np.negative(x, out=np.empty_like(x) if out is None else out)  # 1 / (1 + exp(-x)) in one array
    np.exp(y, out=y)
    y += y.dtype.type(1)
    return np.reciprocal(y, out=y)


def _ufunc(f, *extra):
    """A kernel ``f(x, *extra)`` that writes straight into ``out`` when given one."""
    return lambda x, *, out=None: f(x, *extra, out=out)


# ops whose reference writes straight into ``out`` (the rest compute, then copy into it)
DIRECT_OUT = {
    "Relu": lambda x, *, out=None: np.maximum(x, _ZEROS[x.dtype], out=out),
    "Sigmoid": _sigmoid, "Tanh": _ufunc(np.tanh), "Exp": _ufunc(np.exp), "Log": _ufunc(np.log), "Sqrt": _ufunc(np.sqrt),
    "Reciprocal": _ufunc(np.reciprocal), "Neg": _ufunc(np.negative), "Abs": _ufunc(np.abs),
    "Floor": _ufunc(np.floor), "Ceil": _ufunc(np.ceil), "Erf": _erf_out,
}


# IEEE edge values every float kernel must get right: infinities, huge magnitudes, signed zeros
_EDGES = (np.inf, -np.inf, 1e30, -1e30, 3e9, -3e9, 0.0, -0.0, 0.5, -0.5, 2.5, -2.5)
_EDGE_SAFE = {"Relu", "Floor", "Ceil", "Abs", "Neg", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish",
              "Identity", "Clip"}


def _samples_for(name, low, high):
    def samples(rng, dtype):
        for shape in [(7,), (2, 3, 4), (1, 8, 5, 5), ()]:
            yield [random(rng, shape, dtype, low, high)], {}
        if name in _EDGE_SAFE and dtype in ("float32", "float64"):
            yield [np.array(_EDGES, dtype)], {}

    return samples


for _name, (_fn, _attrs, _dtypes, (_lo, _hi)) in UNARY.items():
    register_op(_name, inputs=["X"], outputs=["Y"], attrs=_attrs, infer=same_as_input,
                samples=_samples_for(_name, _lo, _hi))
    _kernel = _fn if _name == "Identity" else DIRECT_OUT.get(_name) or with_out(_fn)  # Identity: a view
    register_kernel(_name, device="cpu", vendor="reference", dtype=_dtypes, priority=-100)(_kernel)

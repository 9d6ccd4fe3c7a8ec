"""Elementwise ops over any number of broadcast inputs: Max, Min, Sum, Mean (one table row each).

Max and Min propagate NaN, as NumPy's ``maximum``/``minimum`` and onnx's reference do."""
from __future__ import annotations

import functools

import numpy as np

from ..dtypes import FLOAT_TYPES, NUMERIC_TYPES
from ..registry import register_kernel, register_op
from ._util import broadcast_rule, random


def _fold(ufunc, xs):
    if not xs:
        raise ValueError("needs at least one input")
    out = functools.reduce(ufunc, xs)
    return np.broadcast_to(out, np.broadcast_shapes(*(x.shape for x in xs))).copy()


def _mean(*xs):
    return (_fold(np.add, xs) / xs[0].dtype.type(len(xs))).astype(xs[0].dtype, copy=False)


def _samples(rng, dtype):
    def r(shape):
        return random(rng, shape, dtype, -5, 5)

    yield [r((2, 3, 4))], {}
    yield [r((2, 3, 4)), r((2, 3, 4))], {}
    yield [r((3, 1)), r((1, 4)), r((4,))], {}
    yield [r(()), r((2, 5))], {}
    if np.dtype(dtype).kind == "f":  # NaN propagates, infinities order
        special = np.array([np.nan, 1.0, np.inf, -np.inf, 0.0, np.nan], dtype)
        yield [special, np.array([0.0, np.nan, 1.0, 2.0, -np.inf, np.inf], dtype)], {}


# name: (fn(*inputs), dtypes)
VARIADIC = {
    "Max": (lambda *xs: _fold(np.maximum, xs), NUMERIC_TYPES),
    "Min": (lambda *xs: _fold(np.minimum, xs), NUMERIC_TYPES),
    "Sum": (lambda *xs: _fold(np.add, xs), FLOAT_TYPES),
    "Mean": (_mean, FLOAT_TYPES),
}

for _name, (_fn, _dtypes) in VARIADIC.items():
    register_op(_name, inputs=["data_0*"], outputs=["out"], infer=broadcast_rule(), samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=_dtypes, priority=-100)(_fn)

"""Elementwise arithmetic over broadcast inputs: Add, Sub, Mul, Div, Pow (one table row each).

Integer Div truncates toward zero as ONNX (and C) define it; integer Add/Sub/Mul wrap around.
Pow's exponent may have another numeric dtype than the base; the result has the base's dtype."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES, NUMERIC_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext, broadcast_shapes
from ._util import broadcast_rule, into, random, trunc_divide

_SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1, 5), (1, 4, 1)), ((), (2, 3)), ((5,), ()), ((0, 3), (3,))]


def _div(a, b, *, out=None):
    if a.dtype.kind in "iu":
        return into(out, trunc_divide(a, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b, out=out)


def _pow(x, y, *, out=None):
    return into(out, _power(x, y))


def _power(x, y):
    if x.dtype.kind in "iu" and y.dtype.kind in "iu" and np.any(y < 0):
        raise ValueError("integer Pow with a negative exponent is not an integer")
    if x.dtype.kind == "f" and y.dtype.kind in "iu":
        y = y.astype(x.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.power(x, y).astype(x.dtype, copy=False)


def _binary_samples(low, high, nonzero_rhs=False):
    def samples(rng, dtype):
        for sa, sb in _SHAPES:
            a, b = random(rng, sa, dtype, low, high), random(rng, sb, dtype, low, high)
            if nonzero_rhs:
                b = np.where(b == 0, np.ones_like(b), b)
            yield [a, b], {}

    return samples


def _pow_samples(rng, dtype):
    low = 0.2 if np.dtype(dtype).kind == "f" else -3
    for sa, sb in _SHAPES[:4]:
        yield [random(rng, sa, dtype, low, 3), random(rng, sb, dtype, 0, 3)], {}
    if np.dtype(dtype).kind == "f":  # negative base with integral exponents, and an int64 exponent
        yield [random(rng, (3, 4), dtype, -3, 3), np.array([0.0, 1.0, 2.0, 3.0], dtype)], {}
        yield [random(rng, (2, 4), dtype, 0.5, 2), np.array([-2, -1, 2, 3], np.int64)], {}


def _pow_rule(ctx: InferContext) -> TensorSpec:
    x, y = ctx.inputs
    if x.dtype == "bool" or y.dtype == "bool":
        raise ctx.error(f"Pow takes numeric tensors, got {x.dtype} and {y.dtype}")
    return TensorSpec(broadcast_shapes(x.shape, y.shape, where=ctx.where), x.dtype)


# name: (fn, dtypes, samples)
BINARY = {
    "Add": (lambda a, b, *, out=None: np.add(a, b, out=out), NUMERIC_TYPES, _binary_samples(-4, 4)),
    "Sub": (lambda a, b, *, out=None: np.subtract(a, b, out=out), NUMERIC_TYPES, _binary_samples(-4, 4)),
    "Mul": (lambda a, b, *, out=None: np.multiply(a, b, out=out), NUMERIC_TYPES, _binary_samples(-4, 4)),
    "Div": (_div, NUMERIC_TYPES, _binary_samples(-9, 9, nonzero_rhs=True)),
}

for _name, (_fn, _dtypes, _samples) in BINARY.items():
    register_op(_name, inputs=["A", "B"], outputs=["C"], infer=broadcast_rule(), samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=_dtypes, priority=-100)(_fn)

register_op("Pow", inputs=["X", "Y"], outputs=["Z"], infer=_pow_rule, samples=_pow_samples)
register_kernel("Pow", device="cpu", vendor="reference", dtype=FLOAT_TYPES + ("int32", "int64"),
                priority=-100)(_pow)

"""Comparisons and boolean logic over broadcast inputs (one table row each): Equal, Less,
LessOrEqual, Greater, GreaterOrEqual (numeric or bool in, bool out), And, Or, Xor, Not (bool)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES, NUMERIC_TYPES
from ..registry import register_kernel, register_op
from ._util import broadcast_rule, random, same_as_input


def _compare_samples(rng, dtype):
    for sa, sb in [((2, 3, 4), (2, 3, 4)), ((3, 1, 4), (5, 1)), ((), (6,))]:
        a, b = random(rng, sa, dtype, -3, 3), random(rng, sb, dtype, -3, 3)
        yield [a, b], {}
    a = random(rng, (4, 5), dtype, -3, 3)
    yield [a, a.copy()], {}  # all equal: the boundary of every comparison


def _logic_samples(rng, dtype):
    for sa, sb in [((2, 3, 4), (2, 3, 4)), ((3, 1), (1, 4)), ((), (5,))]:
        yield [random(rng, sa, "bool"), random(rng, sb, "bool")], {}


def _not_samples(rng, dtype):
    for shape in [(7,), (2, 3, 4), ()]:
        yield [random(rng, shape, "bool")], {}


# name: (fn, dtypes, samples)
COMPARE = {
    "Equal": (np.equal, ALL_TYPES, _compare_samples),
    "Less": (np.less, NUMERIC_TYPES, _compare_samples),
    "LessOrEqual": (np.less_equal, NUMERIC_TYPES, _compare_samples),
    "Greater": (np.greater, NUMERIC_TYPES, _compare_samples),
    "GreaterOrEqual": (np.greater_equal, NUMERIC_TYPES, _compare_samples),
    "And": (np.logical_and, ("bool",), _logic_samples),
    "Or": (np.logical_or, ("bool",), _logic_samples),
    "Xor": (np.logical_xor, ("bool",), _logic_samples),
}

for _name, (_fn, _dtypes, _samples) in COMPARE.items():
    register_op(_name, inputs=["A", "B"], outputs=["C"], infer=broadcast_rule("bool"), samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=_dtypes, priority=-100)(_fn)

register_op("Not", inputs=["X"], outputs=["Y"], infer=same_as_input, samples=_not_samples)
register_kernel("Not", device="cpu", vendor="reference", dtype="bool", priority=-100)(np.logical_not)

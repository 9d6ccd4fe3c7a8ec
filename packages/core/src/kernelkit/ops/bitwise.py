"""Bitwise ops on integer tensors over broadcast inputs: BitwiseAnd, BitwiseOr, BitwiseXor,
BitwiseNot, and BitShift (``direction`` LEFT or RIGHT; signed types, as opset 28 allows, shift
arithmetically to the right; a shift by the type's width or more, or by a negative amount,
shifts everything out: 0, or -1 for a negative value shifted right)."""
from __future__ import annotations

import numpy as np

from ..dtypes import INT_TYPES
from ..registry import REQUIRED, register_kernel, register_op
from ._util import broadcast_rule, random, same_as_input


def _samples(rng, dtype):
    for sa, sb in [((2, 3, 4), (2, 3, 4)), ((3, 1), (1, 4)), ((), (5,))]:
        yield [random(rng, sa, dtype, -100, 100), random(rng, sb, dtype, -100, 100)], {}


def _not_samples(rng, dtype):
    yield [random(rng, (2, 3, 4), dtype, -100, 100)], {}


def _shift_samples(rng, dtype):
    width = np.dtype(dtype).itemsize * 8
    x = random(rng, (3, 4), dtype, 0, 200)
    yield [x, rng.integers(0, width, size=(3, 4)).astype(dtype)], {"direction": "LEFT"}
    yield [x, rng.integers(0, width, size=(4,)).astype(dtype)], {"direction": "RIGHT"}
    yield [x, np.array([0, 1, width, width + 3], dtype)], {"direction": "RIGHT"}


@register_kernel("BitShift", device="cpu", vendor="reference", dtype=INT_TYPES, priority=-100)
def bit_shift(x, y, *, direction):
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"direction must be LEFT or RIGHT, got {direction!r}")
    width = x.dtype.itemsize * 8
    out_of_range = (y < 0) | (y >= width)
    safe = np.where(out_of_range, 0, y).astype(x.dtype)
    if direction == "LEFT":
        out, gone = np.left_shift(x, safe), np.zeros_like(x)
    else:
        out, gone = np.right_shift(x, safe), np.where(x < 0, x.dtype.type(-1) if x.dtype.kind == "i" else 0, 0)
    return np.where(out_of_range, gone, out).astype(x.dtype, copy=False)


for _name, _fn in {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}.items():
    register_op(_name, inputs=["A", "B"], outputs=["C"], infer=broadcast_rule(), samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=INT_TYPES, priority=-100)(_fn)
register_op("BitwiseNot", inputs=["X"], outputs=["Y"], infer=same_as_input, samples=_not_samples)
register_kernel("BitwiseNot", device="cpu", vendor="reference", dtype=INT_TYPES, priority=-100)(np.invert)
register_op("BitShift", inputs=["X", "Y"], outputs=["Z"], attrs={"direction": ("string", REQUIRED)},
            infer=broadcast_rule(), samples=_shift_samples)

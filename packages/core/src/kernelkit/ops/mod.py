"""Mod(A, B) over broadcast inputs. ``fmod=0``: the remainder takes the divisor's sign, as
Python's ``%`` (floats too, as opset 28 allows); ``fmod=1``: C's fmod, the dividend's sign. An
integer remainder by zero is an error."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..registry import register_kernel, register_op
from ._util import broadcast_rule, random


@register_kernel("Mod", device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)
def mod(a, b, *, fmod=0):
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise ZeroDivisionError("integer Mod by zero")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.fmod(a, b) if fmod else np.mod(a, b)
    return out.astype(a.dtype, copy=False)


def _samples(rng, dtype):
    fmod = int(rng.integers(2))
    for sa, sb in [((2, 3, 4), (2, 3, 4)), ((3, 1, 5), (4, 1)), ((), (6,))]:
        a, b = random(rng, sa, dtype, -9, 9), random(rng, sb, dtype, -9, 9)
        yield [a, np.where(b == 0, np.ones_like(b), b)], {"fmod": fmod}


register_op("Mod", inputs=["A", "B"], outputs=["C"], attrs={"fmod": ("int", 0)}, infer=broadcast_rule(),
            samples=_samples)

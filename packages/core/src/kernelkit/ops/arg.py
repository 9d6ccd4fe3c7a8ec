"""ArgMax and ArgMin along one axis (int64 indices); ``select_last_index`` picks the last of equal
extremes instead of the first."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _rule(ctx: InferContext) -> TensorSpec:
    data = ctx.inputs[0]
    if data.rank == 0:
        raise ctx.error("input must have rank >= 1")
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    if ctx.attrs["keepdims"]:
        shape = tuple(1 if i == axis else d for i, d in enumerate(data.shape))
    else:
        shape = tuple(d for i, d in enumerate(data.shape) if i != axis)
    return TensorSpec(shape, "int64")


def _arg(find):
    def kernel(data, *, axis=0, keepdims=1, select_last_index=0):
        if data.shape[axis] == 0:
            raise ValueError(f"cannot take an arg-extreme along empty axis {axis}")
        if select_last_index:
            flipped = np.flip(data, axis)
            index = data.shape[axis] - 1 - find(flipped, axis=axis, keepdims=bool(keepdims))
        else:
            index = find(data, axis=axis, keepdims=bool(keepdims))
        return np.asarray(index, dtype=np.int64)

    return kernel


def _samples(rng, dtype):
    x = random(rng, (3, 4, 5), dtype, -2, 2)  # few distinct values for integers: ties are likely
    yield [x], {}
    yield [x], {"axis": 1, "keepdims": 0}
    yield [x], {"axis": -1, "select_last_index": 1}
    yield [x], {"axis": 2, "keepdims": 0, "select_last_index": 1}
    yield [random(rng, (7,), dtype, -2, 2)], {"keepdims": 0}


_ATTRS = {"axis": ("int", 0), "keepdims": ("int", 1), "select_last_index": ("int", 0)}
for _name, _find in {"ArgMax": np.argmax, "ArgMin": np.argmin}.items():
    register_op(_name, inputs=["data"], outputs=["reduced"], attrs=_ATTRS, infer=_rule, samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)(_arg(_find))

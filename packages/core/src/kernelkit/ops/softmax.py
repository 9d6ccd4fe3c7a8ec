"""Softmax and LogSoftmax (ONNX opset 13+ semantics: one axis, default -1), numerically stable."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import into, random
from ._window import compute_dtype


def _infer(ctx) -> TensorSpec:
    x = ctx.inputs[0]
    ctx.axis(ctx.attrs["axis"], x.rank)
    return x


def _shifted(x, axis):
    """x - max(x) along axis, a fresh array in the compute dtype (the caller may work in place)."""
    xc = x.astype(compute_dtype(x.dtype), copy=False)
    return xc - xc.max(axis=axis, keepdims=True, initial=-np.inf)  # initial: an empty axis is fine


def _softmax(x, *, axis=-1, out=None):
    if out is not None and compute_dtype(x.dtype) == x.dtype:
        np.subtract(x, x.max(axis=axis, keepdims=True, initial=-np.inf), out=out)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
        return out
    e = _shifted(x, axis)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return into(out, e.astype(x.dtype, copy=False))


def _log_softmax(x, *, axis=-1):
    s = _shifted(x, axis)
    s -= np.log(np.exp(s).sum(axis=axis, keepdims=True))
    return s.astype(x.dtype, copy=False)


def _samples(rng, dtype):
    yield [random(rng, (2, 7), dtype, -5, 5)], {}
    yield [random(rng, (2, 3, 4), dtype, -5, 5)], {"axis": 1}
    yield [random(rng, (2, 3, 4), dtype, -5, 5)], {"axis": 0}
    yield [random(rng, (1, 2, 3, 5), dtype, -30, 30)], {"axis": -2}
    yield [random(rng, (6,), dtype, -3, 3)], {}


for _name, _fn in (("Softmax", _softmax), ("LogSoftmax", _log_softmax)):
    register_op(_name, inputs=["input"], outputs=["output"], attrs={"axis": ("int", -1)}, infer=_infer,
                samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)(_fn)

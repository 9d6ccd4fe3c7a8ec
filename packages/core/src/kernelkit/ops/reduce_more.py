"""More reductions (opset 18+ form, as reduce.py): ReduceL1, ReduceL2, ReduceSumSquare,
ReduceLogSum, ReduceLogSumExp. Float16 accumulates in float32; LogSumExp subtracts the maximum
first so large inputs do not overflow. Also ReduceMax/ReduceMin's bool kernels (opset 20)."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..registry import register_kernel, register_op
from .reduce import _ATTRS, _reduction, _rule, _samples


def _acc(x):
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _log_sum_exp(x, axes, keep):
    x = _acc(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axes, keepdims=keep))
    top = np.max(x, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    out = np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True)) + top
    return out if keep else np.squeeze(out, axis=axes)


REDUCE_MORE = {
    "ReduceL1": lambda x, axes, keep: np.sum(np.abs(_acc(x)), axis=axes, keepdims=keep),
    "ReduceL2": lambda x, axes, keep: np.sqrt(np.sum(np.square(_acc(x).astype(np.float64)), axis=axes,
                                                     keepdims=keep)),
    "ReduceSumSquare": lambda x, axes, keep: np.sum(np.square(_acc(x)), axis=axes, keepdims=keep),
    "ReduceLogSum": lambda x, axes, keep: np.log(np.sum(_acc(x), axis=axes, keepdims=keep)),
    "ReduceLogSumExp": _log_sum_exp,
}

for _name, _compute in REDUCE_MORE.items():
    register_op(_name, inputs=["data", "axes?"], outputs=["reduced"], attrs=_ATTRS, infer=_rule,
                samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)(
        _reduction(_name, _compute))

# ReduceMax/ReduceMin over bool (opset 20): any / all (an empty set gives False / True)
register_kernel("ReduceMax", device="cpu", vendor="reference", dtype="bool", priority=-100)(
    _reduction("ReduceMax", lambda x, axes, keep: np.any(x, axis=axes, keepdims=keep)))
register_kernel("ReduceMin", device="cpu", vendor="reference", dtype="bool", priority=-100)(
    _reduction("ReduceMin", lambda x, axes, keep: np.all(x, axis=axes, keepdims=keep)))

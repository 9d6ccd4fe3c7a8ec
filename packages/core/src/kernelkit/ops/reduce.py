"""Reductions (opset 18+): ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, one table.

``axes`` is an optional int64 input; absent (or empty) means every axis, unless
``noop_with_empty_axes`` is set, which makes the op an identity. Reducing an empty set gives the
ufunc's identity (0 for Sum, 1 for Prod) and -inf/+inf (or the dtype's lowest/highest integer)
for Max/Min. Integer ReduceMean truncates toward zero; float16 accumulates in float32."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, ctx_axes, input_length, normalize_axes, random, trunc_divide


def _rule(ctx: InferContext) -> TensorSpec:
    data = ctx.inputs[0]
    keepdims, noop = ctx.attrs["keepdims"], ctx.attrs["noop_with_empty_axes"]
    if ctx.has(1):
        axes = const_ints(ctx, 1)
        if axes is None:  # known only at run time
            n = input_length(ctx, 1)
            if n == 0:
                axes = []
            elif keepdims:
                return TensorSpec(tuple(d if d == 1 else ctx.symbol() for d in data.shape), data.dtype)
            else:
                if n > data.rank:
                    raise ctx.error(f"{n} axes for rank {data.rank}")
                return TensorSpec(tuple(ctx.symbol() for _ in range(data.rank - n)), data.dtype)
    else:
        axes = []
    if not axes:
        if noop:
            return data
        axes = list(range(data.rank))
    axes = set(ctx_axes(ctx, axes, data.rank))
    if keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape))
    else:
        shape = tuple(d for i, d in enumerate(data.shape) if i not in axes)
    return TensorSpec(shape, data.dtype)


def _reduction(name, compute):
    def kernel(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        axes = [] if axes is None else list(np.asarray(axes).reshape(-1))
        if not axes:
            if noop_with_empty_axes:
                return data.copy()
            axes = range(data.ndim)
        axes = tuple(normalize_axes(axes, data.ndim))
        out = compute(data, axes, bool(keepdims))
        return np.asarray(out, dtype=data.dtype)

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _accumulate_dtype(x):
    return np.float32 if x.dtype == np.float16 else None


def _extreme(ufunc, x):
    if x.dtype.kind == "f":
        return -np.inf if ufunc is np.maximum else np.inf
    info = np.iinfo(x.dtype)
    return info.min if ufunc is np.maximum else info.max


def _mean(x, axes, keep):
    if x.dtype.kind in "iu":
        count = np.prod([x.shape[a] for a in axes], dtype=np.int64)
        if count == 0:
            raise ValueError("ReduceMean over an empty set of integers")
        total = np.sum(x, axis=axes, keepdims=keep, dtype=np.int64 if x.dtype.kind == "i" else np.uint64)
        return trunc_divide(total, np.asarray(count, total.dtype))
    return np.mean(x, axis=axes, keepdims=keep, dtype=_accumulate_dtype(x))


REDUCE = {
    "ReduceSum": lambda x, axes, keep: np.sum(x, axis=axes, keepdims=keep, dtype=_accumulate_dtype(x)),
    "ReduceMean": _mean,
    "ReduceMax": lambda x, axes, keep: np.max(x, axis=axes, keepdims=keep, initial=_extreme(np.maximum, x)),
    "ReduceMin": lambda x, axes, keep: np.min(x, axis=axes, keepdims=keep, initial=_extreme(np.minimum, x)),
    "ReduceProd": lambda x, axes, keep: np.prod(x, axis=axes, keepdims=keep, dtype=_accumulate_dtype(x)),
}


def _samples(rng, dtype):
    low, high = (-2, 2) if dtype != "uint8" else (0, 3)
    x = random(rng, (2, 3, 4), dtype, low, high)
    yield [x], {}
    yield [x], {"keepdims": 0}
    yield [x, np.array([1], np.int64)], {}
    yield [x, np.array([0, -1], np.int64)], {"keepdims": 0}
    yield [x, np.array([], np.int64)], {"noop_with_empty_axes": 1}
    yield [x, np.array([], np.int64)], {"keepdims": 0}
    yield [random(rng, (5,), dtype, low, high), np.array([0], np.int64)], {"keepdims": 0}
    yield [random(rng, (2, 1, 3, 4), dtype, low, high), np.array([2, 3], np.int64)], {}


_ATTRS = {"keepdims": ("int", 1), "noop_with_empty_axes": ("int", 0)}
for _name, _compute in REDUCE.items():
    register_op(_name, inputs=["data", "axes?"], outputs=["reduced"], attrs=_ATTRS, infer=_rule,
                samples=_samples)
    register_kernel(_name, device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)(
        _reduction(_name, _compute))

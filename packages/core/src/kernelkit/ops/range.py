"""Range(start, limit, delta): max(ceil((limit - start) / delta), 0) values start + i * delta.
Integer ranges are computed exactly; float ranges in float64, then cast (as onnx's reference)."""
from __future__ import annotations

import math

import numpy as np

from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ..shape import InferContext

DTYPES = ("float16", "float32", "float64", "int16", "int32", "int64")  # float16: opset 27


def range_length(start, limit, delta) -> int:
    if delta == 0:
        raise ValueError("Range delta is 0")
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        return max(-((start - limit) // delta), 0)
    return max(math.ceil((limit - start) / delta), 0)


def _scalar(x) -> int | float:
    x = np.asarray(x)
    if x.size != 1:
        raise ValueError(f"Range takes scalars, got shape {x.shape}")
    return x.reshape(()).item()


def _rule(ctx: InferContext) -> TensorSpec:
    dtypes = {s.dtype for s in ctx.inputs}
    if len(dtypes) != 1 or not dtypes <= set(DTYPES):
        raise ctx.error(f"start, limit and delta must share one of {DTYPES}, got {sorted(dtypes)}")
    values = [ctx.value(i) for i in range(3)]
    if any(v is None for v in values):
        return TensorSpec((ctx.symbol(),), ctx.inputs[0].dtype)
    try:
        n = range_length(*(_scalar(v) for v in values))
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    return TensorSpec((n,), ctx.inputs[0].dtype)


@register_kernel("Range", device="cpu", vendor="reference", dtype=DTYPES, priority=-100)
def range_(start, limit, delta):
    a, b, d = _scalar(start), _scalar(limit), _scalar(delta)
    n = range_length(a, b, d)
    check_tensor_bytes((n,), np.float64)  # computed in 64 bits, then cast
    if isinstance(a, int):
        return (a + np.arange(n, dtype=np.int64) * d).astype(start.dtype)
    return (a + np.arange(n, dtype=np.float64) * d).astype(start.dtype)


def _samples(rng, dtype):
    for a, b, d in [(0, 10, 1), (3, 17, 4), (10, -2, -3), (5, 5, 1), (5, 1, 2), (-1.5, 2.25, 0.5)]:
        if np.dtype(dtype).kind == "i" and not all(float(v).is_integer() for v in (a, b, d)):
            continue
        yield [np.array(a, dtype), np.array(b, dtype), np.array(d, dtype)], {}


register_op("Range", inputs=["start", "limit", "delta"], outputs=["output"], infer=_rule, samples=_samples)

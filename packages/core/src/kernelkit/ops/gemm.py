"""Gemm (ONNX opset 21): Y = alpha * A' @ B' + beta * C, C broadcast unidirectionally to (M, N);
with a fused activation."""
from __future__ import annotations

import numpy as np

from ..activation import ACTIVATION_ATTRS, apply_activation
from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import broadcast_shapes
from ._util import into, random
from ._window import compute_dtype

DTYPES = FLOAT_TYPES + ("int32", "int64", "uint32", "uint64")
ATTRS = {"alpha": ("float", 1.0), "beta": ("float", 1.0), "transA": ("int", 0), "transB": ("int", 0),
         **ACTIVATION_ATTRS}


def _dims(ctx):
    a, b = ctx.inputs[0], ctx.inputs[1]
    if a.rank != 2 or b.rank != 2:
        raise ctx.error(f"A {a} and B {b} must be 2-D")
    if a.dtype != b.dtype or (ctx.has(2) and ctx.inputs[2].dtype != a.dtype):
        raise ctx.error("A, B and C must share a dtype")
    m, k = a.shape[::-1] if ctx.attrs["transA"] else a.shape
    k2, n = b.shape[::-1] if ctx.attrs["transB"] else b.shape
    if isinstance(k, int) and isinstance(k2, int) and k != k2:
        raise ctx.error(f"inner dimensions differ: A' is ({m}, {k}), B' is ({k2}, {n})")
    if ctx.has(2):
        c = ctx.inputs[2]
        if c.rank > 2 or broadcast_shapes(c.shape, (m, n), where=ctx.where) != (m, n):
            raise ctx.error(f"C {c} does not broadcast to ({m}, {n})")
    return m, k, n


def _infer(ctx) -> TensorSpec:
    m, _, n = _dims(ctx)
    return TensorSpec((m, n), ctx.inputs[0].dtype)


def _flops(ctx) -> int | None:
    dims = _dims(ctx)
    return 2 * dims[0] * dims[1] * dims[2] if all(isinstance(d, int) for d in dims) else None


@register_kernel("Gemm", device="cpu", vendor="reference", dtype=DTYPES, priority=-100)
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, activation="", activation_params=(),
         out=None):
    ct = compute_dtype(a.dtype)
    if out is not None and ct != a.dtype:
        return into(out, gemm(a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB,
                              activation=activation, activation_params=activation_params))
    a = a.T if transA else a
    b = b.T if transB else b
    y = np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False), out=out)  # y is out when given
    if alpha != 1.0:
        y = np.multiply(y, alpha, out=y, casting="unsafe") if y is out else (y * alpha).astype(ct, copy=False)
    if c is not None and beta == 1.0:
        y += c.astype(ct, copy=False)  # y is a fresh (M, N) array and C broadcasts to it
    elif c is not None and beta != 0.0:
        y = y + c.astype(ct) * beta
    y = apply_activation(y, activation, activation_params).astype(a.dtype, copy=False)
    return y if y is out else into(out, y)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -1, 1) if dtype in FLOAT_TYPES else random(rng, shape, dtype, 0, 5)

    yield [r(3, 4), r(4, 5), r(3, 5)], {}
    yield [r(4, 3), r(4, 5), r(5)], {"transA": 1, "alpha": 0.5, "beta": 2.0}
    yield [r(3, 4), r(5, 4), r(1, 5)], {"transB": 1}
    yield [r(4, 3), r(5, 4), r(3, 1)], {"transA": 1, "transB": 1, "beta": 0.25}
    yield [r(2, 6), r(6, 3), None], {"alpha": 2.0}
    yield [r(3, 4), r(4, 5), r()], {}
    if dtype in FLOAT_TYPES:
        yield [r(2, 8), r(8, 4), r(4)], {"activation": "Sigmoid"}


register_op("Gemm", inputs=["A", "B", "C?"], outputs=["Y"], attrs=ATTRS, infer=_infer, samples=_samples,
            flops=_flops)

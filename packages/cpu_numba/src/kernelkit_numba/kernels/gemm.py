"""Gemm and MatMul: the product goes to BLAS (``np.dot``/``np.matmul`` on views, transposes
passed as BLAS flags rather than copies); Numba fuses scaling, bias and activation into one
parallel pass over the result."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel

from .._base import NumbaKernel
from .epilogue import NONE, bias_act_rows, scale_bias_act_cols


@register_kernel("Gemm", device="cpu", vendor="numba", dtype="float32")
class Gemm(NumbaKernel):
    """Y = act(alpha * A' @ B' + beta * C), A' = A.T if transA, B' = B.T if transB."""

    uses_blas = True

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)

    def work(self, a, b, c=None):
        return 2.0 * a.size * (b.size // max(1, a.shape[0] if self.attrs.get("transA", 0) else a.shape[1]))

    def compute(self, a, b, c=None):
        at = self.attrs
        dtype = a.dtype
        lhs = a.T if at.get("transA", 0) else a
        rhs = b.T if at.get("transB", 0) else b
        y = np.dot(lhs, rhs)
        n = y.shape[1]
        alpha, beta = dtype.type(at.get("alpha", 1.0)), dtype.type(at.get("beta", 1.0))
        code, p0, p1 = self.act
        if c is not None and c.size == n and c.ndim >= 1 and c.shape[-1] == n:
            bias = np.ascontiguousarray(c, dtype=dtype).reshape(n)  # one bias per column
        else:
            if c is not None:  # scalar, per-row or full C: NumPy broadcasting, then the epilogue
                y *= alpha
                y += beta * c
                alpha = dtype.type(1)
            bias, beta = np.zeros(n, dtype), dtype.type(0)
        if alpha != 1 or beta != 0 or code != NONE:
            scale_bias_act_cols(y, alpha, bias, beta, code, p0, p1)
        return y


@register_kernel("MatMul", device="cpu", vendor="numba", dtype="float32")
class MatMul(NumbaKernel):
    """NumPy matmul semantics (1-D operands promoted, batch dims broadcast) + fused activation."""

    uses_blas = True

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)

    def work(self, a, b):
        """2 * batch * M * N * K."""
        m = a.shape[-2] if a.ndim > 1 else 1
        n = b.shape[-1] if b.ndim > 1 else 1
        batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        return 2.0 * batch * m * n * (a.shape[-1] if a.ndim else 1)

    def compute(self, a, b):
        y = np.asarray(np.matmul(a, b))  # vector @ vector gives a NumPy scalar: keep a 0-d array
        code, p0, p1 = self.act
        if code != NONE:
            rows = y.reshape(1, -1, y.shape[-1] if y.ndim else 1)
            bias_act_rows(rows, np.zeros(rows.shape[1], y.dtype), code, p0, p1)
        return y

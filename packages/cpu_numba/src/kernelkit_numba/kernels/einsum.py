"""Einsum of two operands as a batched GEMM: labels are sorted into batch (in both operands and
the output), contracted (both, not the output), and left/right free ones; the operands are
transposed and reshaped into (batch, M, K) and (batch, K, N) views, multiplied by one compiled
loop of BLAS GEMMs, and the (batch, M, N) result is reshaped and transposed into the output.
Other equations (one or three operands, ellipses, repeated labels in one operand, a label summed
out of a single operand) are declined: the reference runs them."""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import NumbaKernel
from ..config import jit_parallel


@jit_parallel
def _bmm(a, b, out):
    for i in prange(a.shape[0]):
        out[i] = np.dot(a[i], b[i])


def plan(equation: str):
    """(left labels, right labels, output labels) of a supported two-operand equation, else None."""
    eq = equation.replace(" ", "")
    if "..." in eq or eq.count(",") != 1:
        return None
    lhs, arrow, out = eq.partition("->")
    left, right = lhs.split(",")
    if not arrow:
        counts = {c: lhs.count(c) for c in lhs}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(left)) != len(left) or len(set(right)) != len(right) or len(set(out)) != len(out):
        return None
    if any(c not in right and c not in out for c in left) or any(c not in left and c not in out for c in right):
        return None
    if any(c not in left and c not in right for c in out):
        return None
    return left, right, out


def einsum(a, b, equation):
    left, right, out = plan(equation)
    dims = {**dict(zip(left, a.shape)), **dict(zip(right, b.shape))}
    if any(a.shape[left.index(c)] != b.shape[right.index(c)] for c in set(left) & set(right)):
        return np.einsum(equation, a, b)  # a broadcast label: NumPy's own (rare in exported graphs)
    batch = [c for c in out if c in left and c in right]
    contract = [c for c in left if c in right and c not in out]
    m = [c for c in left if c not in right]
    n = [c for c in right if c not in left]
    size = lambda labels: int(np.prod([dims[c] for c in labels], dtype=np.int64))  # noqa: E731
    ct = np.promote_types(a.dtype, np.float32)
    a3 = np.ascontiguousarray(np.transpose(a, [left.index(c) for c in batch + m + contract]), ct)
    b3 = np.ascontiguousarray(np.transpose(b, [right.index(c) for c in batch + contract + n]), ct)
    a3 = a3.reshape(size(batch), size(m), size(contract))
    b3 = b3.reshape(size(batch), size(contract), size(n))
    y = np.empty((size(batch), size(m), size(n)), ct)
    _bmm(a3, b3, y)
    order = batch + m + n
    y = y.reshape([dims[c] for c in order])
    return np.ascontiguousarray(np.transpose(y, [order.index(c) for c in out])).astype(a.dtype, copy=False)


class Einsum(NumbaKernel):
    uses_blas = True

    def compute(self, a, b):
        return einsum(a, b, self.attrs["equation"])

    def work(self, a, b):
        return 2.0 * max(a.size, b.size) * 8


def _supported(input_specs, attrs) -> bool:
    return len(input_specs) == 2 and plan(attrs["equation"]) is not None


register_kernel("Einsum", device="cpu", vendor="numba", dtype="float32", supports=_supported)(Einsum)

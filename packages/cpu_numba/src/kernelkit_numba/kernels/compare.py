"""Comparisons (Equal, Greater, GreaterOrEqual, Less, LessOrEqual) of float32 tensors and the
logic ops (And, Or, Xor) of bool tensors, with broadcasting, into a bool result. One parallel
loop over output rows; each operand reads through its broadcast offset table (as in Where), so a
broadcast operand is never materialized."""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit, jit_parallel
from ._copy import broadcast_offsets, row_base

U = np.uint64  # unsigned index: no wraparound check in inner loops
EQ, GT, GE, LT, LE, AND, OR, XOR = range(8)


@jit
def _test(u, v, code):
    if code == EQ:
        return u == v
    if code == GT:
        return u > v
    if code == GE:
        return u >= v
    if code == LT:
        return u < v
    if code == LE:
        return u <= v
    if code == AND:
        return u and v
    if code == OR:
        return u or v
    return u != v  # XOR of bools


@jit_parallel
def _compare(a, b, oa, ob, starts, shape, out, code):
    rank = shape.shape[0]
    inner = shape[rank - 1]
    s = starts[rank - 1]
    sa, sb = min(oa[s + inner - 1] - oa[s], 1), min(ob[s + inner - 1] - ob[s], 1)  # 1 or 0 (broadcast)
    for r in prange(out.shape[0] // inner):
        ra = a[row_base(oa, starts, shape, r):]
        rb = b[row_base(ob, starts, shape, r):]
        dst = out[r * inner:(r + 1) * inner]
        for j in range(inner):
            dst[U(j)] = _test(ra[U(j * sa)], rb[U(j * sb)], code)


def _apply(a, b, code, out=None):
    shape = np.broadcast_shapes(a.shape, b.shape)
    if out is None:
        out = np.empty(shape, np.bool_)
    if out.size:
        full = shape or (1,)
        a, b = (np.ascontiguousarray(t).reshape(t.shape or (1,)) for t in (a, b))
        starts = np.cumsum((0,) + full[:-1]).astype(np.int64)
        _compare(a.reshape(-1), b.reshape(-1).astype(a.dtype, copy=False), broadcast_offsets(a, full),
                 broadcast_offsets(b, full), starts, np.array(full, np.int64), out.reshape(-1), code)
    return out


def _kernel(code):
    def kernel(a, b, *, out=None):
        return _apply(a, b, code, out)
    return kernel


for _name, _code, _dtype in [("Equal", EQ, "float32"), ("Greater", GT, "float32"), ("GreaterOrEqual", GE, "float32"),
                             ("Less", LT, "float32"), ("LessOrEqual", LE, "float32"), ("And", AND, "bool"),
                             ("Or", OR, "bool"), ("Xor", XOR, "bool")]:
    _fn = _kernel(_code)
    _fn.__name__ = _fn.__qualname__ = _name.lower()
    register_kernel(_name, device="cpu", vendor="numba", dtype=_dtype)(threaded(_fn))

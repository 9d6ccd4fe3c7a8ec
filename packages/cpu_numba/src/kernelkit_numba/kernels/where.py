"""Where(condition, X, Y) with three-way broadcasting: one parallel loop over output rows; each
operand reads through its own per-axis offset table (zero on broadcast axes), so nothing is
materialized."""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel
from ._copy import row_base

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _where(cond, x, y, oc, ox, oy, starts, shape, out):
    rank = shape.shape[0]
    inner = shape[rank - 1]
    s = starts[rank - 1]
    lc, lx, ly = oc[s:s + inner], ox[s:s + inner], oy[s:s + inner]
    for r in prange(out.shape[0] // inner):
        bc = row_base(oc, starts, shape, r)
        bx = row_base(ox, starts, shape, r)
        by = row_base(oy, starts, shape, r)
        dst = out[r * inner:(r + 1) * inner]
        for j in range(inner):
            dst[U(j)] = x[bx + lx[U(j)]] if cond[bc + lc[U(j)]] else y[by + ly[U(j)]]


def _broadcast_table(a, shape):
    """Concatenated per-axis offsets of ``a`` read as if broadcast to ``shape``."""
    dims = (1,) * (len(shape) - a.ndim) + a.shape
    tables, step = [], 1
    for d, n in zip(reversed(dims), reversed(shape)):
        tables.append(np.arange(n, dtype=np.int64) * step if d == n else np.zeros(n, np.int64))
        step *= d
    return np.concatenate(tables[::-1])


def where(condition, x, y):
    shape = np.broadcast_shapes(condition.shape, x.shape, y.shape)
    out = np.empty(shape, x.dtype)
    if out.size == 0:
        return out
    full = shape or (1,)
    ops = [np.ascontiguousarray(a).reshape(a.shape or (1,)) for a in (condition, x, y)]
    starts = np.cumsum((0,) + full[:-1]).astype(np.int64)
    _where(ops[0].reshape(-1).astype(np.bool_, copy=False), ops[1].reshape(-1), ops[2].reshape(-1).astype(x.dtype, copy=False),
           *(_broadcast_table(a, full) for a in ops), starts, np.array(full, np.int64), out.reshape(-1))
    return out


register_kernel("Where", device="cpu", vendor="numba", dtype="float32")(threaded(where))

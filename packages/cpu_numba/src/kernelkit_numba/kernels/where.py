"""Where(condition, X, Y) with three-way broadcasting: one parallel loop over output rows; each
operand reads through its own per-axis offset table (zero on broadcast axes), so nothing is
materialized."""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel
from ._copy import broadcast_offsets, row_base

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _where(cond, x, y, oc, ox, oy, starts, shape, out):
    """Each operand's last-axis table is arange (step 1) or zeros (broadcast, step 0)."""
    rank = shape.shape[0]
    inner = shape[rank - 1]
    s = starts[rank - 1]
    sc, sx, sy = oc[s + inner - 1] - oc[s], ox[s + inner - 1] - ox[s], oy[s + inner - 1] - oy[s]
    sc, sx, sy = min(sc, 1), min(sx, 1), min(sy, 1)
    for r in prange(out.shape[0] // inner):
        c = cond[row_base(oc, starts, shape, r):]
        a = x[row_base(ox, starts, shape, r):]
        b = y[row_base(oy, starts, shape, r):]
        dst = out[r * inner:(r + 1) * inner]
        for j in range(inner):
            dst[U(j)] = a[U(j * sx)] if c[U(j * sc)] else b[U(j * sy)]


def where(condition, x, y, *, out=None):
    shape = np.broadcast_shapes(condition.shape, x.shape, y.shape)
    if out is None:
        out = np.empty(shape, x.dtype)
    if out.size == 0:
        return out
    full = shape or (1,)
    ops = [np.ascontiguousarray(a).reshape(a.shape or (1,)) for a in (condition, x, y)]
    starts = np.cumsum((0,) + full[:-1]).astype(np.int64)
    _where(ops[0].reshape(-1).astype(np.bool_, copy=False), ops[1].reshape(-1),
           ops[2].reshape(-1).astype(x.dtype, copy=False),
           *(broadcast_offsets(a, full) for a in ops), starts, np.array(full, np.int64), out.reshape(-1))
    return out


register_kernel("Where", device="cpu", vendor="numba", dtype="float32")(threaded(where))

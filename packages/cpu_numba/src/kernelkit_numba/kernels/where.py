"""Where(condition, X, Y) with three-way broadcasting, as two NumPy masked copies into the output:
Y everywhere, then X where the condition holds (an output that is X's or Y's own memory skips
that operand's copy). Nothing is materialized; large outputs are cut into shards along their
first long axis (NumPy releases the GIL while it copies).

A select is memory-bound: the Numba loop this replaced read each operand through per-axis offset
tables and did not vectorise (GPT-2's causal mask, 1x12x64x64 scores against a 1x1x64x64 mask:
452 us against 130 us for the two copies, 162 us for ``np.where``, on the 2-core dev box)."""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel

from .. import config
from .._base import same_memory, threaded


def _select(cond, x, y, out) -> None:
    in_x, in_y = np.may_share_memory(out, x), np.may_share_memory(out, y)  # bounds only: ~0.2 us each
    if in_x and same_memory(x, out):
        np.copyto(out, y, where=np.logical_not(cond))
    elif in_y and same_memory(y, out):
        np.copyto(out, x, where=cond)
    elif in_x or in_y:  # a partial overlap: copy first
        np.copyto(out, np.where(cond, x, y))
    elif _full(x, out) and not _full(y, out):  # e.g. scores and a fill value (GPT-2's mask)
        np.copyto(out, x)  # a plain copy, then the fill where the condition fails: 29 vs 45 us for
        np.copyto(out, y, where=np.logical_not(cond))  # 1x12x64x64 (y first, x masked; np.where 58)
    else:
        np.copyto(out, y)
        np.copyto(out, x, where=cond)


def _full(a: np.ndarray, out: np.ndarray) -> bool:
    """Whether ``a`` has every element of ``out`` (no broadcast axis): the operand worth a plain copy."""
    return a.shape == out.shape and all(st or d <= 1 for st, d in zip(a.strides, a.shape))


def where(condition, x, y, *, out=None):
    shape = np.broadcast_shapes(condition.shape, x.shape, y.shape)
    if out is None:
        out = np.empty(shape, x.dtype)
    if out.size == 0:
        return out
    cond = condition if condition.dtype == np.bool_ else condition.astype(np.bool_)
    axis = next((k for k, d in enumerate(shape) if d >= 4), None)
    if axis is None or config.shard_count(shape[axis], 2.0 * out.size) <= 1:
        _select(cond, x, y, out)
        return out
    cv, xv, yv = (np.broadcast_to(a, shape) for a in (cond, x, y))
    lead = (slice(None),) * axis

    def shard(lo, hi):
        part = lead + (slice(lo, hi),)
        _select(cv[part], xv[part], yv[part], out[part])

    config.parallel_for(shard, shape[axis], (), 2.0 * out.size)
    return out


def _where_serial(input_specs):
    """``fn.serial`` of Where (``_base.FunctionKernel``): for static shapes, a call that goes straight
    to the two copies (the general path's per-call work cost ~50 us a node inside GPT-2, twice the
    copies: its 12 masks were the model's slowest nodes against the reference)."""
    if len(input_specs) != 3 or any(s is None or not s.is_static or s.layout for s in input_specs):
        return None
    shape = np.broadcast_shapes(*(tuple(s.shape) for s in input_specs))
    dtype = np.dtype(input_specs[1].dtype)

    def call(condition, x, y, *, out=None):
        if out is None:
            out = np.empty(shape, dtype)
        if out.size:
            _select(condition if condition.dtype == np.bool_ else condition.astype(np.bool_), x, y, out)
        return out

    return call


where.serial = _where_serial
register_kernel("Where", device="cpu", vendor="numba", dtype="float32")(threaded(where))

"""ArgMax and ArgMin along one axis (int64 indices; ties and NaNs resolved as NumPy's argmax on the
data, or on the flipped data when ``select_last_index``). The tensor is viewed as (outer, L,
inner) and each of the outer*inner lines is scanned once."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel


@jit_parallel
def _arg_lines(x, out, find_max, last):
    """out[o, i] = index along axis 1 of the extreme of x[o, :, i] (a NaN counts as the extreme)."""
    o_n, l_n, i_n = x.shape
    for oi in prange(o_n * i_n):
        o = oi // i_n
        i = oi - o * i_n
        best = x[o, 0, i]
        at = 0
        for k in range(1, l_n):
            v = x[o, k, i]
            if best != best:  # a NaN already holds: only a later NaN moves a last-index search
                if last and v != v:
                    at = k
                continue
            better = v > best if find_max else v < best
            if v != v or better or (last and v == best):
                best = v
                at = k
        out[o, i] = at


def _arg(data, axis, keepdims, select_last_index, find_max):
    axis = axis % data.ndim
    if data.shape[axis] == 0:
        raise ValueError(f"cannot take an arg-extreme along empty axis {axis}")
    outer, length = math.prod(data.shape[:axis]), data.shape[axis]
    lines = np.ascontiguousarray(data).reshape(outer, length, -1)
    shape = tuple(1 if i == axis else d for i, d in enumerate(data.shape)) if keepdims else \
        data.shape[:axis] + data.shape[axis + 1:]
    out = np.empty(shape, np.int64)
    if out.size:
        _arg_lines(lines, out.reshape(outer, -1), find_max, bool(select_last_index))
    return out


def argmax(data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(data, axis, keepdims, select_last_index, True)


def argmin(data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(data, axis, keepdims, select_last_index, False)


register_kernel("ArgMax", device="cpu", vendor="numba", dtype="float32")(threaded(argmax))
register_kernel("ArgMin", device="cpu", vendor="numba", dtype="float32")(threaded(argmin))

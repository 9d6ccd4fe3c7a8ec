"""Shared parallel copy loops for the data-movement kernels (compiled once, for every rank).

``take(x, tables, fill)`` builds the output whose element ``(i0, ..., ik)`` is
``x.flat[tables[0][i0] + ... + tables[k][ik]]``, or ``fill`` where any table entry is negative.
One table of source offsets (in elements) per output axis expresses Transpose (``arange * stride``
of the permuted axis), Slice (``(start + step * i) * stride``), Expand (zeros), Tile
(``(i % d) * stride``), Pad (clamped/reflected indices, or -1 for the constant), Gather (the
indices times the stride), DepthToSpace/SpaceToDepth (a reshape/transpose view) and nearest Resize.
The kernel runs over output rows in parallel (the last axis is the row); a row's source base
costs one divmod per outer axis. The longest arithmetic run of the last table around its middle
(contiguous, strided or broadcast) is copied as a strided row with unsigned indices; the entries
outside it (pad borders, reflections) are read from the table.

``copy_cols(src, dst, s_col, d_col, width)`` copies a column block between 2-D row-major
arrays: Concat and Split as (outer, axis * inner) matrices.
"""
from __future__ import annotations

import math

import numpy as np

from ..config import jit, jit_parallel, parallel_for

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit
def row_base(offsets, starts, shape, r):
    """Source offset of output row ``r`` (all axes but the last); -1 when any table says fill."""
    base = 0
    padded = False
    r = np.int64(r)  # a prange index may be unsigned, and uint64 // int64 is a float in Numba
    for k in range(shape.shape[0] - 2, -1, -1):
        d = shape[k]
        q = r // d
        o = offsets[starts[k] + r - q * d]
        padded = padded or o < 0
        base += o
        r = q
    return -1 if padded else base


@jit_parallel
def _take(src, offsets, starts, shape, dst, fill, lo, hi, step, r0, r1):
    """Rows of the output. On [lo, hi) the last axis's table is an arithmetic run with ``step``
    (a strided copy); outside it each entry is read from the table (-1: fill)."""
    rank = shape.shape[0]
    inner = shape[rank - 1]
    last = offsets[starts[rank - 1]:starts[rank - 1] + inner]
    for r in range(r0, r1):
        base = row_base(offsets, starts, shape, r)
        out = dst[r * inner:(r + 1) * inner]
        if base < 0:
            for j in range(inner):
                out[U(j)] = fill
            continue
        for j in range(lo):
            o = last[U(j)]
            out[U(j)] = src[U(base + o)] if o >= 0 else fill
        if hi > lo:
            row = src[base + last[lo]:]
            seg = out[lo:hi]
            if step == 1:  # contiguous: a plain copy loop that vectorises
                for j in range(hi - lo):
                    seg[U(j)] = row[U(j)]
            else:
                for j in range(hi - lo):
                    seg[U(j)] = row[U(j * step)]
        for j in range(hi, inner):
            o = last[U(j)]
            out[U(j)] = src[U(base + o)] if o >= 0 else fill


@jit_parallel
def _copy_cols(src, dst, s_col, d_col, width, lo, hi):
    for r in range(lo, hi):
        a = src[r, s_col:s_col + width]
        b = dst[r, d_col:d_col + width]
        for j in range(width):
            b[U(j)] = a[U(j)]


def strides(x) -> list[int]:
    """Element strides of a C-contiguous array of ``x``'s shape."""
    out, step = [], 1
    for d in reversed(x.shape):
        out.append(step)
        step *= d
    return out[::-1]


class TakePlan:
    """The kernel arguments derived from a list of per-axis tables, built once so that a class
    kernel can keep it between calls with the same input shape."""

    def __init__(self, tables):
        self.shape = tuple(len(t) for t in tables)
        self.size = math.prod(self.shape)
        if self.size == 0:
            return
        tables = [np.asarray(t, np.int64) for t in tables] or [np.zeros(1, np.int64)]  # rank 0: one element
        self.offsets = np.concatenate(tables)
        self.starts = np.cumsum([0] + [len(t) for t in tables[:-1]]).astype(np.int64)
        self.dims = np.array([len(t) for t in tables], np.int64)
        self.run = _run(tables[-1])

    def __call__(self, x, fill=0.0, out=None):
        """The gathered array, written into ``out`` (of as many elements, any shape) when given."""
        if out is None:
            y = np.empty(self.shape, x.dtype)
        else:  # a C-contiguous out of another shape (Gather, Expand...): a view of it in the table shape
            y = out if out.shape == self.shape else out.reshape(self.shape)
        if self.size:
            parallel_for(_take, self.size // self.shape[-1] if self.shape else 1,
                         (np.ascontiguousarray(x).reshape(-1), self.offsets, self.starts, self.dims, y.reshape(-1),
                          x.dtype.type(fill), *self.run), 4.0 * self.size)
        return y


def take(x, tables, fill=0.0, out=None):
    """Gather ``x`` (any dtype the caller registered) through per-axis offset tables (see module)."""
    return TakePlan(tables)(x, fill, out)


def _run(last):
    """(lo, hi, step): an arithmetic run of valid offsets (step >= 0) around the middle of
    ``last``, grown both ways; the kernel copies it as a strided row and reads the rest (pad
    borders, reflections) from the table. (0, 0, 0) when there is none."""
    n, mid = len(last), len(last) // 2
    if last[mid] < 0:
        return 0, 0, 0
    step = int(last[mid + 1] - last[mid]) if mid + 1 < n and last[mid + 1] >= 0 else 0
    if step < 0:
        return 0, 0, 0
    joined = (np.diff(last) == step) & (last[:-1] >= 0)  # joined[k]: k and k + 1 are in one run
    breaks_left = np.flatnonzero(~joined[:mid])
    breaks_right = np.flatnonzero(~joined[mid:])
    lo = int(breaks_left[-1]) + 1 if breaks_left.size else 0
    hi = mid + int(breaks_right[0]) + 1 if breaks_right.size else n
    return lo, hi, step


def broadcast_offsets(a, shape):
    """Concatenated per-axis offset tables of contiguous ``a`` read as if broadcast to ``shape``
    (zeros on broadcast axes): each last-axis table is ``arange`` or zeros."""
    dims = (1,) * (len(shape) - a.ndim) + a.shape
    tables, step = [], 1
    for d, n in zip(reversed(dims), reversed(shape)):
        tables.append(np.arange(n, dtype=np.int64) * step if d == n else np.zeros(n, np.int64))
        step *= d
    return np.concatenate(tables[::-1])


def axis_tables(x, index_per_axis):
    """Offset tables from per-axis source indices (-1 stays -1, the fill marker)."""
    return [np.where(idx >= 0, idx * s, -1) for idx, s in zip(index_per_axis, strides(x))]


def copy_cols(src, dst, s_col, d_col, width) -> None:
    if src.shape[0] and width:
        parallel_for(_copy_cols, src.shape[0], (src, dst, s_col, d_col, width), 2.0 * src.shape[0] * width)


def as_matrix(x, axis):
    """``x`` as the (outer, axis * inner) row-major matrix Concat and Split work on."""
    return np.ascontiguousarray(x).reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))

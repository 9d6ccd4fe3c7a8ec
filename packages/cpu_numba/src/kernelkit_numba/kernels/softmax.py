"""Softmax and LogSoftmax along one axis (ONNX opset 13). The tensor is viewed as
(outer, L, inner): with inner == 1 (the last axis, the common case) each contiguous row is
normalized (Softmax: max shift, a vectorised float32 exp and the sums in one Numba pass,
then the division; LogSoftmax: the exp from NumPy's vectorised loop);
otherwise each (L, inner) block is normalized column-wise with the inner axis innermost, so the
loops stay contiguous."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel

from .. import config
from .._base import threaded
from ..config import jit, jit_parallel, parallel_for
from . import tpair

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _shift_rows(x, y, lo, hi):
    """y = x - max(x) per row of (R, L), rows [lo, hi)."""
    l_n = x.shape[1]
    for r in range(lo, hi):
        src, dst = x[r], y[r]
        top = src[0]
        for k in range(1, l_n):
            top = max(top, src[U(k)])
        for k in range(l_n):
            dst[U(k)] = src[U(k)] - top


@jit_parallel
def _normalize_rows(e, y, log, lo, hi):
    """Given e = exp(y) per row: softmax y <- e / sum(e); log-softmax y <- y - log(sum(e))."""
    l_n = e.shape[1]
    for r in range(lo, hi):
        src, dst = e[r], y[r]
        total = 0.0
        for k in range(l_n):
            total += src[U(k)]
        if log:
            shift = math.log(total)
            for k in range(l_n):
                dst[U(k)] -= shift
        else:
            scale = 1.0 / total
            for k in range(l_n):
                dst[U(k)] = src[U(k)] * scale


# exp(t) for t <= 0 in float32 arithmetic that LLVM vectorises: t = n ln2 + r (n = round(t / ln2),
# ln2 split in two so n ln2 is exact), exp(r) by its degree-6 Taylor polynomial on |r| <= ln2 / 2
# (relative error <= 1.2e-7), and 2^n added to the exponent bits. t is clamped at -87 (n >= -126,
# a normal result): exp(-87) = 1.6e-38 stands for anything smaller, far below float32 tolerances.
_LOG2E, _LN2_HI, _LN2_LO = np.float32(1.4426950408889634), np.float32(0.693359375), np.float32(-2.12194440e-4)
_C2, _C3, _C4, _C5, _C6 = (np.float32(1 / 2), np.float32(1 / 6), np.float32(1 / 24), np.float32(1 / 120),
                           np.float32(1 / 720))
_FLOOR = np.float32(-87.0)
_ONE, _HALF = np.float32(1.0), np.float32(0.5)


INF_KEY = 0x7F800000  # exp_rows' sortable int32 key of +inf; of -inf (NaNs lie beyond these):
NINF_KEY = -0x7F800001


@jit
def exp_rows(s, scale, sums, powers):
    """In place on s (R, N) float32, C-contiguous: s = exp(s * scale - max(s * scale)) per row,
    sums[i] = the row's sum (float64). ``powers``: int32 scratch of N. Rows whose max is NaN or
    +-inf take the exact path with the reference's rules (NaN everywhere for a NaN or +inf max;
    an all -inf row is shifted by 0, so its exps are 0). Exps below ``_TINY`` come out as exact
    zeros: masked scores would otherwise turn subnormal in the division or in attention's P @ V.

    The max is found on the float32 bits as sortable int32 keys (``b ^ ((b >> 31) & 0x7fffffff)``
    orders the floats as their values, -0 just below +0, NaNs beyond the infinities), as
    qpack.float_range does: integer max/min reductions vectorise where a float max that must
    notice NaN stays a scalar chain (the scale-and-max pass was ~half of a 128-key row's time)."""
    n = s.shape[1]
    bits = s.view(np.int32)
    top_of = powers.view(np.float32)  # powers[0] turns the max's key back into its float32
    for i in range(s.shape[0]):
        row, rbits = s[i], bits[i]
        for j in range(n):
            row[U(j)] *= scale
        hi = np.int32(NINF_KEY)
        lo = np.int32(NINF_KEY)
        for j in range(n):
            b = rbits[U(j)]
            key = np.int32(b ^ ((b >> 31) & 0x7FFFFFFF))
            hi = max(hi, key)
            lo = min(lo, key)
        nan = hi > INF_KEY or lo < NINF_KEY  # a NaN of either sign
        top = np.float32(-np.inf)
        if not nan and hi != NINF_KEY:  # (an empty or all -inf row keeps -inf)
            powers[0] = np.int32(hi ^ ((hi >> 31) & 0x7FFFFFFF))
            top = top_of[0]
        if nan or top == np.inf or top == -np.inf:
            shift = np.nan if nan else (0.0 if top == -np.inf else top)
            total = 0.0
            for j in range(n):
                e = math.exp(row[U(j)] - shift)
                row[U(j)] = e
                total += e
            sums[i] = total
            continue
        for j in range(n):
            t = max(row[U(j)] - top, _FLOOR)
            k = np.floor(t * _LOG2E + _HALF)
            r = (t - k * _LN2_HI) - k * _LN2_LO
            row[U(j)] = _ONE + r * (_ONE + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * _C6)))))
            powers[U(j)] = np.int32(k) << 23
        total = 0.0
        for j in range(n):
            rbits[U(j)] += powers[U(j)]
            e = row[U(j)]
            e = e if e >= _TINY else np.float32(0)  # no subnormals downstream (see _TINY)
            row[U(j)] = e
            total += e
        sums[i] = total


def _softmax_rows(x, y, log):
    """Rows of (R, L): shift by the row max (Numba), exp (NumPy's SIMD loop, several times faster
    per element than a scalar libm call from Numba), normalize (Numba). A small Softmax (a
    classifier's head at batch 1) is one Numba call (_rows_small: _rows_shard's steps)."""
    if not log and x.size <= SMALL:
        _rows_small(x, y)
        return
    if not log and config.current_threads() == 2 and tpair.rows_pair(2, x.size) and tpair.softmax_rows(x, y):
        return  # two halves of rows on fpair's helper (tpair.py)
    parallel_for(_rows_shard, x.shape[0], (x, y, log), 8.0 * x.size)


SMALL = 4096  # elements: below this the Python between _rows_shard's three Numba calls was most of a call


@jit
def _rows_small(x, y):
    """_rows_shard's Softmax steps over all rows in one call (the same exp_rows and _scale_rows)."""
    for i in range(x.shape[0]):  # not y[...] = x: Numba compiles that one's shape-mismatch message
        for j in range(x.shape[1]):  # (unicode formatting: 3-10 s of a cold process on the AMD box)
            y[i, j] = x[i, j]
    sums = np.empty(x.shape[0])
    exp_rows(y, np.float32(1), sums, np.empty(x.shape[1], np.int32))
    _scale_rows(y, sums)


def _rows_shard(x, y, log, lo, hi):
    """Rows [lo, hi): passes over rows still in cache. Softmax: the shifted exp and its sums in one
    Numba pass (``exp_rows``), then the division; LogSoftmax: the shift, NumPy's exp, the log-sum."""
    part = y[lo:hi]
    if log:
        _shift_rows(x, y, lo, hi)
        _normalize_rows(np.exp(part), part, log, 0, hi - lo)
        return
    part[...] = x[lo:hi]
    sums = np.empty(hi - lo)
    exp_rows(part, np.float32(1), sums, np.empty(part.shape[1], np.int32))
    _scale_rows(part, sums)


# exps below this (exp(-80) of the row's maximum) become exact zeros (in exp_rows, so that the fused
# Attention's P @ V gets them too, and again in _scale_rows): exp_rows' polynomial gives masked
# entries (-inf, -1e4, a float32 minimum) exp(-87) = 1.6e-38, which the division and
# the next product (attention's P @ V) turn into subnormal numbers, each a microcode assist on Intel
# cores: the Xeon ran GPT-2's causal Softmax at 2x the reference's time and the P @ V products after
# it at 4.4 against 0.05 ms (AMD cores take subnormals at full speed: nothing showed on the dev box).
# The reference's exp gives those entries 0; any softmax value this small is far below tolerances.
_TINY = np.float32(1.8e-35)


@jit
def _scale_rows(y, sums):
    """y[i, :] *= 1 / sums[i], exps below _TINY set to exact zeros first (no subnormal results)."""
    zero = np.float32(0)
    for i in range(y.shape[0]):
        row = y[i]
        inv = np.float32(1.0 / sums[i])
        for j in range(row.shape[0]):
            e = row[U(j)]
            row[U(j)] = (e if e >= _TINY else zero) * inv


@jit_parallel
def _softmax_blocks(x, y, log, lo, hi):
    """x, y: (O, L, I); normalized along axis 1."""
    l_n, i_n = x.shape[1], x.shape[2]
    for o in range(lo, hi):
        src, dst = x[o], y[o]
        top = src[0].copy()
        for k in range(1, l_n):
            for i in range(i_n):
                top[U(i)] = max(top[U(i)], src[k, U(i)])
        total = np.zeros(i_n, np.float64)
        for k in range(l_n):
            for i in range(i_n):
                e = math.exp(src[k, U(i)] - top[U(i)])
                total[U(i)] += e
                if not log:
                    dst[k, U(i)] = e
        for i in range(i_n):
            total[U(i)] = top[U(i)] + math.log(total[U(i)]) if log else 1.0 / total[U(i)]
        for k in range(l_n):
            for i in range(i_n):
                if log:
                    dst[k, U(i)] = src[k, U(i)] - total[U(i)]
                else:
                    dst[k, U(i)] *= total[U(i)]


def _run(x, axis, log, out=None):
    y = np.empty(x.shape, x.dtype) if out is None else out
    if x.size == 0:
        return y
    rank = max(x.ndim, 1)
    axis = axis % rank
    outer = math.prod(x.shape[:axis])
    length = x.shape[axis] if x.ndim else 1
    xc = np.ascontiguousarray(x).reshape(outer, length, -1)
    if xc.shape[2] == 1:
        _softmax_rows(xc.reshape(outer, length), y.reshape(outer, length), log)
    else:
        parallel_for(_softmax_blocks, xc.shape[0], (xc, y.reshape(xc.shape), log), 8.0 * xc.size)
    return y


def softmax(x, *, axis=-1, out=None):
    return _run(x, axis, False, out)


def log_softmax(x, *, axis=-1, out=None):
    return _run(x, axis, True, out)


def _softmax_serial(input_specs, axis=-1):
    """``softmax.serial`` (_base.FunctionKernel): for a small static input normalized along its last
    axis (a classifier's head), a call straight to _rows_small with the shapes decided once (~1 us
    of Python against ~3 through _run)."""
    spec = input_specs[0] if len(input_specs) == 1 else None
    if spec is None or not spec.is_static or spec.layout or spec.rank == 0 or axis % spec.rank != spec.rank - 1:
        return None
    shape, dtype = tuple(spec.shape), np.dtype(spec.dtype)
    rows, length = math.prod(shape[:-1]), shape[-1]
    if not 0 < rows * length <= SMALL:
        return None
    flat = (rows, length)

    def call(x, *, out=None):
        y = np.empty(shape, dtype) if out is None or not out.flags.c_contiguous else out
        x2 = x.reshape(flat)  # a view (a copy when x is not contiguous): read-only as in _base
        if not x2.flags.c_contiguous:
            x2 = np.ascontiguousarray(x2)
        x2.setflags(write=False)
        _rows_small(x2, y.reshape(flat))
        if out is not None and y is not out:
            np.copyto(out, y)
            return out
        return y

    return call


softmax.serial = _softmax_serial
# at two threads the session's budget where the rows pair (tpair.by_rows; the last axis only)
SoftmaxKernel = register_kernel("Softmax", device="cpu", vendor="numba", dtype="float32")(
    tpair.by_rows(threaded(softmax), lambda x, axis: x.ndim > 1 and axis % x.ndim == x.ndim - 1 and
                  math.prod(x.shape[:-1]) > 1))
register_kernel("LogSoftmax", device="cpu", vendor="numba", dtype="float32")(threaded(log_softmax))

"""Elementwise binary arithmetic with NumPy/ONNX broadcasting: Add, Sub, Mul, Div, Pow, PRelu, and the
variadic Max, Min, Sum, Mean folded pairwise.

Broadcasting costs no copies: both operands become broadcast views (stride 0 on repeated axes),
adjacent axes that are contiguous in both are merged, and the result (rank <= 4 in practice) runs
as one parallel Numba loop. Same-shape contiguous operands take a flat loop that vectorises.
"""
from __future__ import annotations

import functools

import numpy as np
from kernelkit.registry import register_kernel
from numpy.lib.stride_tricks import as_strided

from .. import config
from .._base import threaded
from ..config import jit_inline, jit_parallel, parallel_for

U = np.uint64  # unsigned index: no wraparound check in inner loops

ADD, SUB, MUL, DIV, POW, MAX, MIN, PRELU = range(8)


@jit_inline
def _op(u, v, code):
    if code == ADD:
        return u + v
    if code == SUB:
        return u - v
    if code == MUL:
        return u * v
    if code == DIV:
        return u / v
    if code == POW:
        return u ** v
    if code == MAX:
        return u if u >= v or u != u else v
    if code == PRELU:  # u: x, v: slope
        return u * v if u < 0 else u
    return u if u <= v or u != u else v


def _loops(code: int):
    """The four loop shapes, compiled for one op: ``code`` is a closure constant, so ``_op`` (inlined)
    folds to the op's one expression and the inner loops vectorise. A run-time code argument instead
    kept every branch in the loop and made Add 10x slower than NumPy."""

    @jit_parallel
    def flat(a, b, out, lo, hi):
        for i in range(lo, hi):
            out[U(i)] = _op(a[U(i)], b[U(i)], code)

    @jit_parallel
    def rows(a, b, out, swapped, lo, hi):
        """out[r, l] = a[r, l] op b[l] (or b[l] op a[r, l] when swapped): a bias-like operand."""
        l_n = out.shape[1]
        for r in range(lo, hi):
            src, dst = a[r], out[r]
            if swapped:
                for k in range(l_n):
                    dst[U(k)] = _op(b[U(k)], src[U(k)], code)
            else:
                for k in range(l_n):
                    dst[U(k)] = _op(src[U(k)], b[U(k)], code)

    @jit_parallel
    def row_scalar(a, b, out, swapped, lo, hi):
        """out[r, l] = a[r, l] op b[r] (or b[r] op a[r, l]): one value per row, e.g. a per-channel scale."""
        l_n = out.shape[1]
        for r in range(lo, hi):
            src, dst, s = a[r], out[r], b[r]
            if swapped:
                for k in range(l_n):
                    dst[U(k)] = _op(s, src[U(k)], code)
            else:
                for k in range(l_n):
                    dst[U(k)] = _op(src[U(k)], s, code)

    @jit_parallel
    def with_scalar(a, s, out, swapped, lo, hi):
        """out = a op s (or s op a when swapped) over flat arrays."""
        if swapped:
            for i in range(lo, hi):
                out[U(i)] = _op(s, a[U(i)], code)
        else:
            for i in range(lo, hi):
                out[U(i)] = _op(a[U(i)], s, code)

    @jit_parallel
    def strided4(a, b, out, lo, hi):
        """out[i, j, k, l] = a[...] op b[...] on 4-D views (a and b may have zero strides), rows
        [lo, hi) of the flattened (i, j, k). A row where one operand is one repeated value (a
        per-channel scale: stride 0 on the last axis) gets a loop with that value hoisted."""
        d1, d2, d3 = out.shape[1], out.shape[2], out.shape[3]
        a_rep, b_rep = a.strides[3] == 0, b.strides[3] == 0
        for p in range(lo, hi):
            ij = p // d2
            k = p - ij * d2
            i = ij // d1
            j = ij - i * d1
            ra, rb, ro = a[i, j, k], b[i, j, k], out[i, j, k]
            if b_rep:
                s = rb[0]
                for m in range(d3):
                    ro[m] = _op(ra[m], s, code)
            elif a_rep:
                s = ra[0]
                for m in range(d3):
                    ro[m] = _op(s, rb[m], code)
            else:
                for m in range(d3):
                    ro[m] = _op(ra[m], rb[m], code)

    return flat, rows, with_scalar, strided4, row_scalar


_loops = functools.cache(_loops)  # built on first use: creating ~40 dispatchers at import cost ~1 s


def _coalesce(shape, *strides):
    """Drop unit axes and merge neighbours that are contiguous in every operand."""
    dims = [(n, [s[i] for s in strides]) for i, n in enumerate(shape) if n != 1]
    merged: list[tuple[int, list[int]]] = []
    for n, st in dims:
        if merged and all(ps == n * s for ps, s in zip(merged[-1][1], st)):
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    return [n for n, _ in merged], [[st[k] for _, st in merged] for k in range(len(strides))]


def _trailing(small, full) -> bool:
    """``small`` (leading 1s dropped) is exactly the trailing part of ``full``."""
    dims = list(small)
    while dims and dims[0] == 1:
        dims.pop(0)
    return not dims or tuple(full[len(full) - len(dims):]) == tuple(dims)


def _leading(small, full) -> bool:
    """``small`` (aligned to the right) equals ``full`` on its leading axes and is 1 after them:
    one value per row of ``full`` viewed as (small.size, rest)."""
    dims = (1,) * (len(full) - len(small)) + tuple(small)
    k = len(dims)
    while k and dims[k - 1] == 1:
        k -= 1
    return all(dims[i] == full[i] for i in range(k))


def _shards(loop, total, args, elements):
    """A loop over ``total`` outer iterations, sharded when the tensor is large (~4 work units per element)."""
    parallel_for(loop, total, args, 4.0 * elements)


# Add/Sub/Mul/Div are memory-bound: NumPy's SIMD loops ran them 1.3x faster than the Numba loops
# (1x96x112x112 Mul: 0.67 vs 0.87 ms), so they run as NumPy ufuncs on shards of the broadcast views
# (not Pow: NumPy's float32 power is ~8x slower than the Numba loop's powf for x ** 3, GPT-2's
# tanh GELU: 143 vs 18 ms over 12 layers)
_UFUNCS = {ADD: np.add, SUB: np.subtract, MUL: np.multiply, DIV: np.divide}


def _run_ufunc(ufunc, a, b, out) -> None:
    axis = next((k for k, d in enumerate(out.shape) if d >= 4), None)
    if axis is None or config.shard_count(out.shape[axis], 4.0 * out.size) <= 1:
        with np.errstate(all="ignore"):  # x / 0 is inf or NaN without a warning, as in the Numba loops
            ufunc(a, b, out=out)
        return
    av, bv, lead = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape), (slice(None),) * axis

    def shard(lo, hi):
        part = lead + (slice(lo, hi),)
        with np.errstate(all="ignore"):
            ufunc(av[part], bv[part], out=out[part])

    config.parallel_for(shard, out.shape[axis], (), 4.0 * out.size)


def _run(a, b, out, code):
    if code in _UFUNCS:
        _run_ufunc(_UFUNCS[code], a, b, out)
        return
    flat, rows, with_scalar, strided4, row_scalar = _loops(code)
    contiguous = a.flags.c_contiguous and b.flags.c_contiguous
    if contiguous and a.shape == b.shape == out.shape:
        _shards(flat, out.size, (a.reshape(-1), b.reshape(-1), out.reshape(-1)), out.size)
        return
    if contiguous and (a.shape == out.shape or b.shape == out.shape):  # a bias or a scalar: one row
        swapped = a.shape != out.shape
        big, small = (b, a) if swapped else (a, b)
        if small.size == 1:
            _shards(with_scalar, out.size, (big.reshape(-1), small.reshape(-1)[0], out.reshape(-1), swapped), out.size)
            return
        if _trailing(small.shape, out.shape):
            length = small.size
            _shards(rows, out.size // length, (big.reshape(-1, length), small.reshape(length), out.reshape(-1, length),
                                               swapped), out.size)
            return
        if _leading(small.shape, out.shape):
            count = small.size
            _shards(row_scalar, count, (big.reshape(count, -1), small.reshape(count), out.reshape(count, -1), swapped),
                    out.size)
            return
    av, bv = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape)
    shape, (sa, sb, so) = _coalesce(out.shape, av.strides, bv.strides, out.strides)
    if len(shape) > 4:  # rare: loop over the leading axes in Python
        lead = out.shape[0]
        for i in range(lead):
            _run(av[i], bv[i], out[i], code)
        return
    pad = 4 - len(shape)
    shape4 = (1,) * pad + tuple(shape)
    args = (as_strided(av, shape4, (0,) * pad + tuple(sa)), as_strided(bv, shape4, (0,) * pad + tuple(sb)),
            as_strided(out, shape4, (0,) * pad + tuple(so)))
    _shards(strided4, shape4[0] * shape4[1] * shape4[2], args, out.size)


def _binary(a, b, code, out=None):
    """a op b (broadcast), into ``out`` when given: of the result's shape and dtype, possibly the
    memory of an operand of that shape (each element is read before it is written)."""
    a = np.asarray(a)
    b = np.asarray(b, dtype=a.dtype)
    if out is None:
        out = np.empty(np.broadcast_shapes(a.shape, b.shape), a.dtype)
    if out.size:
        _run(a, b, out, code)
    return out


def _fold(xs, code, out=None):
    if len(xs) == 1:
        if out is None:
            return np.array(xs[0], copy=True)
        np.copyto(out, xs[0])
        return out
    acc = xs[0]
    for k, x in enumerate(xs[1:], 2):
        acc = _binary(acc, x, code, out if k == len(xs) else None)
    return acc


def _same_dtype(specs, attrs) -> bool:
    return all(s is None or s.dtype == specs[0].dtype for s in specs)


def add(a, b, *, out=None):
    return _binary(a, b, ADD, out)


def sub(a, b, *, out=None):
    return _binary(a, b, SUB, out)


def mul(a, b, *, out=None):
    return _binary(a, b, MUL, out)


def div(a, b, *, out=None):
    return _binary(a, b, DIV, out)


def pow_(x, y, *, out=None):
    if np.size(y) == 1 and np.ndim(y) <= np.ndim(x) and float(np.asarray(y).reshape(-1)[0]) == 2.0:
        # x ** 2 as x * x (NumPy's power takes that shortcut too; libm's powf(x, 2) is the same
        # correctly rounded square): the Numba loop's powf call per element ran 0.06 against the
        # reference's 0.014 ms for the detection head's 1x3x40x40x2 box sizes
        with np.errstate(all="ignore"):
            return np.multiply(x, x, out=out)
    return _binary(x, y, POW, out)


def prelu(x, slope, *, out=None):
    if np.broadcast_shapes(x.shape, np.shape(slope)) != x.shape:
        raise ValueError(f"PRelu slope {np.shape(slope)} does not broadcast to X {x.shape}")
    return _binary(x, slope, PRELU, out)


def max_(*xs, out=None):
    return _fold(xs, MAX, out)


def min_(*xs, out=None):
    return _fold(xs, MIN, out)


def sum_(*xs, out=None):
    return _fold(xs, ADD, out)


def mean(*xs, out=None):
    out = _fold(xs, ADD, out)
    out /= out.dtype.type(len(xs))
    return out


try:  # NumPy's error state is a context variable: setting it to a state made once is ~0.2 us
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _IGNORE = _make_extobj(all="ignore")
except (ImportError, TypeError):  # another NumPy: np.errstate
    _extobj_contextvar = None


def _quiet(ufunc):
    """``ufunc(a, b, out=out)`` under NumPy's error state "ignore" (no floating-point warnings).
    ``np.errstate`` builds its state on every entry: 3-4 us a call inside a model on the AMD box
    (RegNetY's 16 gate Muls: 279 against 221 us without it), as much as a small Mul itself."""
    if _extobj_contextvar is None:
        def call(a, b, *, out=None):
            with np.errstate(all="ignore"):
                return ufunc(a, b, out=out)
        call.bare = ufunc
        return call
    ignore, state = _IGNORE, _extobj_contextvar

    def call(a, b, *, out=None):
        token = state.set(ignore)
        try:
            return ufunc(a, b, out=out)
        finally:
            state.reset(token)

    call.bare = ufunc  # where the caller has set "ignore" already (a plan's step: ``step.quiet``)
    return call


def _ufunc_serial(code):
    """``fn.serial`` (``_base.FunctionKernel``) of Add/Sub/Mul/Div: on one thread the call is the
    NumPy ufunc itself, as the reference runs it (the generic path's checks cost ~5 us a node:
    an EfficientNet runs 65 Muls), without floating-point warnings as on the other paths. Views (a Split's
    parts) stay on the ufunc too: exact Numba loops for them moved the cold cost of NumPy's general iterator
    to the next node instead of removing it, and were slower on the Xeon (issue 11, session 14)."""
    call = _quiet(_UFUNCS[code])

    def make(input_specs, **attrs):
        if len(input_specs) != 2 or any(s is None or s.layout or s.dtype != input_specs[0].dtype
                                        for s in input_specs):
            return None
        return call

    return make


for _code, _fn in ((ADD, add), (SUB, sub), (MUL, mul), (DIV, div)):
    _fn.serial = _ufunc_serial(_code)

_SUPPORTS = {"Pow": _same_dtype}
for _name, _fn in {"Add": add, "Sub": sub, "Mul": mul, "Div": div, "Pow": pow_, "PRelu": prelu, "Max": max_,
                   "Min": min_, "Sum": sum_, "Mean": mean}.items():
    register_kernel(_name, device="cpu", vendor="numba", dtype="float32", supports=_SUPPORTS.get(_name))(
        threaded(_fn))

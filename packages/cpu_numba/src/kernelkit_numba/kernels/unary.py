"""Elementwise unary ops (one table row each, as core's ops/unary.py): a single parallel Numba
loop over the flattened tensor evaluates the row's scalar formula selected by code.

Identity is not here: it returns its input and costs nothing on the reference.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from kernelkit.registry import register_kernel

from .._base import threaded
from ..config import jit, jit_inline, jit_parallel, parallel_for
from .epilogue import erf as erf_scalar
from .epilogue import gelu as gelu_scalar
from .softmax import _C2, _C3, _C4, _C5, _C6, _FLOOR, _HALF, _LN2_HI, _LN2_LO, _LOG2E, _ONE

U = np.uint64  # unsigned index: no wraparound check in inner loops
_FAR, _ZERO = np.float32(87.0), np.float32(0.0)  # |x| beyond: Sigmoid is exactly 1 or 0 in float32

# op -> code; a kernel function per op maps its attributes onto the two parameters (a, b)
CODES = {name: i for i, name in enumerate((
    "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Softplus",
    "Gelu", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Clip"))}
(RELU, LEAKY_RELU, SIGMOID, HARD_SIGMOID, HARD_SWISH, TANH, ELU, SELU, SOFTPLUS, GELU, ERF, EXP,
 LOG, SQRT, RECIPROCAL, NEG, ABS, FLOOR, CEIL, CLIP) = CODES.values()


@jit_inline
def _scalar(v, code, a, b):
    if code == CLIP:
        return v if v != v else min(max(v, a), b)  # NaN stays NaN, as in np.clip
    if code == RELU:
        return max(v, a)  # a = 0
    if code == LEAKY_RELU:
        return v if v >= 0 else v * a
    if code == SIGMOID:
        return 1.0 / (1.0 + np.exp(-v))
    if code == HARD_SIGMOID:
        return min(max(v * a + b, 0.0), 1.0)
    if code == HARD_SWISH:
        return v * min(max(v / 6.0 + 0.5, 0.0), 1.0)
    if code == TANH:
        return math.tanh(v)
    if code == ELU:
        return v if v > 0 else a * np.expm1(v)
    if code == SELU:
        return b * v if v > 0 else b * (a * np.exp(v) - a)
    if code == SOFTPLUS:
        return max(v, 0.0) + math.log1p(np.exp(-abs(v)))
    if code == GELU:
        return gelu_scalar(v, a != 0)
    if code == ERF:
        return erf_scalar(v)
    if code == EXP:
        return np.exp(v)
    if code == LOG:
        return math.log(v) if v > 0 else (-np.inf if v == 0 else np.nan)
    if code == SQRT:
        return math.sqrt(v) if v >= 0 else np.nan
    if code == RECIPROCAL:
        return 1.0 / v
    if code == NEG:
        return -v
    if code == ABS:
        return abs(v)
    if code == FLOOR:
        return np.floor(v)
    if code == CEIL:
        return np.ceil(v)
    return v


def _loop(code: int):
    """y[lo:hi] = op(x[lo:hi]) over flat arrays for one op: ``code`` is a closure constant, so the
    inlined ``_scalar`` folds to the op's one formula (the loop vectorises, and compiling it costs
    only that formula: one loop over every op took seconds to compile for a model's one Relu)."""

    @jit_parallel
    def run(x, y, a, b, lo, hi):
        for i in range(lo, hi):
            y[U(i)] = _scalar(x[U(i)], code, a, b)

    return run


def _loop_inplace(code: int):
    """x[lo:hi] = op(x[lo:hi]) in place. ``_loop`` with y = x does not vectorise: LLVM's run-time
    check finds the two arrays overlapping and runs its scalar loop (Erf: 295 us instead of 37 us
    on the transformer's 128 x 1024, measured); one array has nothing to check."""

    @jit_parallel
    def run(x, a, b, lo, hi):
        for i in range(lo, hi):
            x[U(i)] = _scalar(x[U(i)], code, a, b)

    return run


_loop = functools.cache(_loop)  # built (and compiled) on first use only
_loop_inplace = functools.cache(_loop_inplace)


def _same(x, y) -> bool:
    """Whether x and y are the same memory in the same (C) order: an in-place call."""
    if y is x:
        return True
    if not np.may_share_memory(x, y):  # a bounds check, ~0.2 us (ctypes.data: ~2 us)
        return False
    return x.size == y.size and x.flags.c_contiguous and y.flags.c_contiguous and x.ctypes.data == y.ctypes.data


SIGMOID_CHUNK = 512  # elements a pass of _sigmoid (its three loops over scratch that stays in L1)


LOGISTIC, SWISH_PASS, GELU_TANH_PASS = 0, 1, 2  # _logistic's formulas
# GELU's tanh form as x * sigmoid(2u), u = sqrt(2 / pi) (x + 0.044715 x^3): 0.5 (1 + tanh(u)) = sigmoid(2u)
# exactly, without the cancellation of 1 + tanh(u) for u << 0 (and no libm tanhf, one value at a time)
_GT1 = np.float32(2.0 * math.sqrt(2.0 / math.pi))
_GT3 = np.float32(2.0 * math.sqrt(2.0 / math.pi) * 0.044715)


def _logistic(mode: int):
    """The Sigmoid pass (``mode`` LOGISTIC), the Swish pass, y = x * sigmoid(alpha * x) (SWISH_PASS:
    SiLU, x * Sigmoid(x), fused by core's ``fuse_silu``: one read of x and one write where Sigmoid
    then Mul read x twice and the sigmoid once more), or GELU's tanh form, y = x * sigmoid(2u)
    (GELU_TANH_PASS; alpha unused). ``mode`` is a closure constant, so each pass compiles only its
    own formula."""

    @jit
    def run(x, y, alpha, lo, hi):
        """y[lo:hi] = 1 / (1 + exp(-t)) (times x, for Swish and GELU) for float32 in one pass over
        memory, t = x, alpha * x or 2u, in chunks whose three loops vectorise: e = exp(-|t|) as
        softmax.exp_rows computes it (t = n ln2 + r, a degree-6 polynomial for exp(r), 2^n added to
        the exponent bits from an int32 scratch: a scalar libm exp from Numba does not vectorise),
        then 1 / (1 + e) for t >= 0 and e / (1 + e) below. |t| > 87 gives exactly 1 or 0 (the
        reference: 1, and 0 once exp(-x) overflows at x < -88.7); NaN stays NaN. The reference's
        four NumPy passes (negate, exp, add, reciprocal) cost 1.2-1.3x this."""
        scratch = np.empty(SIGMOID_CHUNK, np.float32)
        bits = scratch.view(np.int32)
        powers = np.empty(SIGMOID_CHUNK, np.int32)
        kept = np.empty(SIGMOID_CHUNK, np.float32)  # the chunk's x: y may be x (in place), and a loop
        # reading and writing one array fails LLVM's overlap check and runs scalar (see _loop_inplace)
        for c0 in range(lo, hi, SIGMOID_CHUNK):
            n = min(SIGMOID_CHUNK, hi - c0)
            src, dst = x[c0:c0 + n], y[c0:c0 + n]
            for j in range(n):
                w = src[U(j)]
                kept[U(j)] = w
                if mode == SWISH_PASS:
                    v = w * alpha
                elif mode == GELU_TANH_PASS:
                    v = w * (_GT1 + _GT3 * (w * w))
                else:
                    v = w
                t = -abs(v)
                t = t if t > _FLOOR else _FLOOR  # NaN too: no NaN reaches the int32 conversion
                k = np.floor(t * _LOG2E + _HALF)
                r = (t - k * _LN2_HI) - k * _LN2_LO
                scratch[U(j)] = _ONE + r * (_ONE + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * _C6)))))
                powers[U(j)] = np.int32(k) << 23
            for j in range(n):
                bits[U(j)] += powers[U(j)]
            for j in range(n):
                w = kept[U(j)]
                if mode == SWISH_PASS:
                    v = w * alpha
                elif mode == GELU_TANH_PASS:
                    v = w * (_GT1 + _GT3 * (w * w))
                else:
                    v = w
                e = scratch[U(j)]
                e = e if abs(v) <= _FAR else _ZERO  # NaN: 0, then v itself below
                s = _ONE / (_ONE + e)
                s = s if v >= 0 else (e * s if v == v else v)
                dst[U(j)] = s if mode == LOGISTIC else w * s

    return run


_sigmoid_pass, _swish_pass, _gelu_tanh_pass = (_logistic(m) for m in (LOGISTIC, SWISH_PASS, GELU_TANH_PASS))
_ALPHA_ONE = np.float32(1.0)


def _sigmoid(x, y, lo, hi):
    """y[lo:hi] = Sigmoid(x[lo:hi]) for float32: the one-pass loop of ``_logistic``."""
    _sigmoid_pass(x, y, _ALPHA_ONE, lo, hi)


def _numpy_sigmoid(x, y, lo, hi):
    """1 / (1 + exp(-x)) on y[lo:hi], the reference's formula in NumPy's SIMD loops (float64)."""
    v = y[lo:hi]
    np.negative(x[lo:hi], out=v)
    with np.errstate(over="ignore"):  # exp(-x) = inf for x < -88 gives the exact 0
        np.exp(v, out=v)
    v += v.dtype.type(1)
    np.divide(v.dtype.type(1), v, out=v)


def _sigmoid_shard(x, y, lo, hi):
    """Sigmoid on y[lo:hi]: the Numba pass for float32, NumPy's loops for other dtypes."""
    if x.dtype == np.float32:
        _sigmoid(x, y, lo, hi)
    else:
        _numpy_sigmoid(x, y, lo, hi)


def _numpy_ufunc(ufunc):
    def shard(x, y, lo, hi):
        ufunc(x[lo:hi], out=y[lo:hi])

    return shard


# ops whose libm function Numba cannot vectorise: NumPy's SIMD loops per shard (the GIL is released
# inside them, so shards still run in parallel)
_NUMPY = {SIGMOID: _sigmoid_shard, TANH: _numpy_ufunc(np.tanh), EXP: _numpy_ufunc(np.exp)}


def _apply(x, code, a=0.0, b=0.0, out=None):
    """y = op(x), into ``out`` when given (it may be ``x`` itself: each element is read before it is written)."""
    if out is not None and not out.flags.c_contiguous:  # the plan's are; a caller's may not be
        return _into(out, _apply(x, code, a, b))
    y = np.empty(x.shape, x.dtype) if out is None else out
    if x.size:
        t = x.dtype.type
        flat, dst = np.ascontiguousarray(x).reshape(-1), y.reshape(-1)
        if code in _NUMPY:
            parallel_for(_NUMPY[code], flat.size, (flat, dst), 8.0 * flat.size)
        elif _same(flat, dst):
            parallel_for(_loop_inplace(code), flat.size, (dst, t(a), t(b)), 8.0 * flat.size)
        else:
            parallel_for(_loop(code), flat.size, (flat, dst, t(a), t(b)), 8.0 * flat.size)
    return y


def _into(out, y):
    np.copyto(out, y)
    return out


def _serial(code, params=lambda **attrs: (0.0, 0.0)):
    """``fn.serial`` of a unary kernel (``_base.FunctionKernel``): for a static input shape, a call
    that runs the op's loop on the calling thread with everything but the arrays decided once."""

    def make(input_specs, **attrs):
        spec = input_specs[0] if input_specs else None
        if spec is None or not spec.is_static or spec.layout or len(input_specs) != 1:
            return None
        dtype, shape = np.dtype(spec.dtype), tuple(spec.shape)
        n = math.prod(shape)
        if code in _NUMPY:
            shard = _NUMPY[code]

            def call_numpy(x, *, out=None):
                if out is not None and not out.flags.c_contiguous:
                    return _into(out, call_numpy(x))
                y = np.empty(shape, dtype) if out is None else out
                if n:
                    shard(x.ravel(), y.ravel(), 0, n)
                return y

            return call_numpy
        loop, (a, b) = _loop(code), (dtype.type(v) for v in params(**attrs))
        inplace = _loop_inplace(code)

        def call(x, *, out=None):
            if out is not None and not out.flags.c_contiguous:  # the plan's are; a caller's may not be
                return _into(out, call(x))
            y = np.empty(shape, dtype) if out is None else out
            if n:
                if _same(x, y):
                    inplace(y.ravel(), a, b, 0, n)
                    return y
                flat = x.ravel()  # a view (a copy when x is not contiguous); read-only as in _base
                flat.setflags(write=False)
                loop(flat, y.ravel(), a, b, 0, n)  # ravel (a view here): 0.3 us cheaper than reshape(-1)
            return y

        return call

    return make


def leaky_relu(x, *, alpha=0.01, out=None):
    return _apply(x, LEAKY_RELU, alpha, out=out)


def hard_sigmoid(x, *, alpha=0.2, beta=0.5, out=None):
    return _apply(x, HARD_SIGMOID, alpha, beta, out=out)


def elu(x, *, alpha=1.0, out=None):
    return _apply(x, ELU, alpha, out=out)


def selu(x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875, out=None):
    return _apply(x, SELU, alpha, gamma, out=out)


def gelu(x, *, approximate="none", out=None):
    """Gelu; the tanh form for float32 in one pass as x * sigmoid(2u) (``_logistic``: ~40x the
    loop's libm tanhf, one value at a time: GPT-2's 64 x 3072, 3.3 ms against 0.1 on the AMD box)."""
    if approximate == "tanh" and x.dtype == np.float32:
        return _logistic_apply(_gelu_tanh_pass, x, _ALPHA_ONE, out)
    return _apply(x, GELU, 1.0 if approximate == "tanh" else 0.0, out=out)


leaky_relu.serial = _serial(LEAKY_RELU, lambda alpha=0.01: (alpha, 0.0))
hard_sigmoid.serial = _serial(HARD_SIGMOID, lambda alpha=0.2, beta=0.5: (alpha, beta))
elu.serial = _serial(ELU, lambda alpha=1.0: (alpha, 0.0))
selu.serial = _serial(SELU, lambda alpha=1.67326319217681884765625, gamma=1.05070102214813232421875: (alpha, gamma))
_gelu_loop_serial = _serial(GELU, lambda approximate="none": (1.0 if approximate == "tanh" else 0.0, 0.0))


def _gelu_serial(input_specs, approximate="none", **attrs):
    spec = input_specs[0] if input_specs else None
    if approximate == "tanh" and spec is not None and spec.dtype == "float32":
        return _logistic_serial(_gelu_tanh_pass, input_specs, _ALPHA_ONE)
    return _gelu_loop_serial(input_specs, approximate=approximate, **attrs)


gelu.serial = _gelu_serial


def _logistic_apply(run, x, alpha, out):
    """One of ``_logistic``'s passes over x (float32), sharded when large; ``out`` may be ``x``."""
    if out is not None and not out.flags.c_contiguous:  # the plan's are; a caller's may not be
        return _into(out, _logistic_apply(run, x, alpha, None))
    y = np.empty(x.shape, x.dtype) if out is None else out
    if x.size:
        flat = np.ascontiguousarray(x).reshape(-1)
        parallel_for(run, flat.size, (flat, y.reshape(-1), alpha), 8.0 * flat.size)
    return y


def _logistic_serial(run, input_specs, alpha):
    """The serial call of one of ``_logistic``'s passes: for a static shape, on the calling thread."""
    spec = input_specs[0] if input_specs else None
    if spec is None or not spec.is_static or spec.layout or len(input_specs) != 1:
        return None
    shape, n = tuple(spec.shape), math.prod(spec.shape)

    def call(x, *, out=None):
        if out is not None and not out.flags.c_contiguous:
            return _into(out, call(x))
        y = np.empty(shape, np.float32) if out is None else out
        if n:
            run(x.ravel(), y.ravel(), alpha, 0, n)
        return y

    return call


def swish(x, *, alpha=1.0, out=None):
    """x * Sigmoid(alpha * x) in one pass (``_logistic``); core's ``fuse_silu`` writes SiLU, x * Sigmoid(x),
    as this op. ``out`` may be ``x`` itself."""
    return _logistic_apply(_swish_pass, x, np.float32(alpha), out)


swish.serial = lambda input_specs, alpha=1.0, **attrs: _logistic_serial(_swish_pass, input_specs, np.float32(alpha))


def clip(x, lo=None, hi=None, *, out=None):
    """Clip's bounds are (scalar) inputs; min > max gives max everywhere, as in the reference."""
    lo = -np.inf if lo is None else float(np.asarray(lo).reshape(()))
    hi = np.inf if hi is None else float(np.asarray(hi).reshape(()))
    return _apply(x, CLIP, lo, hi, out=out)


def _plain(code):
    def kernel(x, *, out=None):
        return _apply(x, code, out=out)

    kernel.serial = _serial(code)
    return kernel


KERNELS = {"LeakyRelu": leaky_relu, "HardSigmoid": hard_sigmoid, "Elu": elu, "Selu": selu, "Gelu": gelu,
           "Clip": clip, "Swish": swish}
for _name in ("Relu", "Sigmoid", "HardSwish", "Tanh", "Softplus", "Erf", "Exp", "Log", "Sqrt",
              "Reciprocal", "Neg", "Abs", "Floor", "Ceil"):
    KERNELS[_name] = _plain(CODES[_name])
    KERNELS[_name].__name__ = KERNELS[_name].__qualname__ = _name.lower()
for _name, _fn in KERNELS.items():
    register_kernel(_name, device="cpu", vendor="numba", dtype="float32")(threaded(_fn))

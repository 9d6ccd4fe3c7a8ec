"""Fused epilogues: bias add plus the ``activation`` attribute (kernelkit/activation.py defines
the meanings) applied in one pass over a GEMM's output."""
from __future__ import annotations

import functools
import math

import numpy as np
from kernelkit.activation import ACTIVATIONS, resolve

from ..config import jit_inline, jit_parallel, parallel_for

U = np.uint64  # unsigned index: no wraparound check in inner loops

# one integer code per entry of core's activation table (same order), 0 for none
NONE, RELU, CLIP, LEAKY_RELU, SIGMOID, HARD_SWISH, TANH, GELU = range(8)
CODES = {"": NONE, **{name: i + 1 for i, name in enumerate(ACTIVATIONS)}}
assert CODES["Gelu"] == GELU and CODES["Relu"] == RELU and len(CODES) == 8, "core's activation table changed"


def activation_code(activation: str, params, dtype, where: str) -> tuple[int, object, object]:
    """(code, p0, p1) for the fused activation, parameters (core's defaults filled in) as ``dtype``
    scalars so that kernels compute in the tensor's precision. Relu is Clip(0, inf). Unknown names
    raise OpAttributeError naming ``where``."""
    t = np.dtype(dtype).type
    if not activation:
        return NONE, t(0), t(0)
    p = resolve(activation, params, where) + (0.0, 0.0)
    code = CODES[activation]
    if code == RELU:
        return CLIP, t(0), t(np.inf)
    return code, t(p[0]), t(p[1])


# erf(x) / x ~ P(x^2) / Q(x^2) on [0, 4]: an iteratively reweighted least-squares rational fit made
# for this backend (max abs error of erf 4e-7 evaluated in float32; beyond |x| = 4, erf is +-1 to 2e-8)
# float32 constants: a float32 argument is computed in float32 throughout (Python floats would
# promote every step to float64, half the vector width and a slow double division: the Gelu
# epilogue of a 128x1024 GEMM tile took 198 us that way, 4x a float32 loop)
_P0, _P1, _P2, _P3, _P4, _P5 = (np.float32(c) for c in (
    1.1283791611621568, 0.18576297279249043, 0.05216521509102259, 0.0035788432568703565, 0.00028271124449721213,
    2.1090663719358638e-06))
_Q1, _Q2, _Q3, _Q4, _Q5 = (np.float32(c) for c in (
    0.49796127966528836, 0.11221853146870972, 0.01458844345707708, 0.001121373237143378, 3.85975710942843e-05))
_ONE, _FOUR, _HALF = np.float32(1.0), np.float32(4.0), np.float32(0.5)
_SQRT_HALF, _TANH_A, _TANH_B = np.float32(0.7071067811865476), np.float32(0.7978845608028654), np.float32(0.044715)
_TANH_M2 = np.float32(-2.0 * 0.7978845608028654)


@jit_inline
def erf(v):
    """erf by the rational fit above: multiply/add/divide only, so loops over it vectorise
    (math.erf is a scalar libm call, ~10x slower per element)."""
    x = min(max(v, -_FOUR), _FOUR)
    t = x * x
    p = ((((_P5 * t + _P4) * t + _P3) * t + _P2) * t + _P1) * t + _P0
    q = ((((_Q5 * t + _Q4) * t + _Q3) * t + _Q2) * t + _Q1) * t + _ONE
    return min(max(x * p / q, -_ONE), _ONE)  # exactly +-1 at the ends (so gelu(-inf) is NaN, as defined)


@jit_inline
def gelu(v, approximate):
    if approximate:  # 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): libm's expf ~6x faster than tanhf per value,
        # and no cancellation in 1 + tanh(u) for u << 0 (-inf: NaN, +inf: inf, as the tanh form)
        return v / (_ONE + np.exp(_TANH_M2 * (v + _TANH_B * v * v * v)))
    return _HALF * v * (_ONE + erf(v * _SQRT_HALF))


def _act(v, code, p0, p1):
    """One activated value (same dtype as ``v``)."""
    if code == RELU:
        return max(v, 0)
    if code == CLIP:
        return min(max(v, p0), p1)
    if code == LEAKY_RELU:
        return v if v >= 0 else v * p0
    if code == SIGMOID:
        return 1 / (1 + np.exp(-v))
    if code == HARD_SWISH:
        return v * min(max(v / 6 + 0.5, 0), 1)
    if code == TANH:
        return math.tanh(v)
    if code == GELU:
        return gelu(v, p0 != 0)
    return v


act = jit_inline(_act)  # inlined: with a constant code the branch folds away


def _loops(code: int):
    """The epilogue loops compiled for one activation: ``code`` is a closure constant, so the
    inlined ``act`` folds to one formula and the row loops vectorise (a run-time code kept the
    branches in the loop and cost a GEMM of a transformer's linear layer a third of its time).
    Each runs over a range of rows, a shard of ``config.parallel_for``."""

    @jit_parallel
    def rows(y, bias, p0, p1, lo, hi):
        b_n, l_n = y.shape[1], y.shape[2]
        for ab in range(lo, hi):
            a = ab // b_n
            b = ab - a * b_n
            row = y[a, b]
            beta = bias[b]
            for i in range(l_n):
                row[U(i)] = act(row[U(i)] + beta, code, p0, p1)

    @jit_parallel
    def cols(y, alpha, bias, beta, p0, p1, r0, r1, c0, c1):
        """y[r, c] = act(alpha * y[r, c] + beta * bias[c]) on the tile [r0, r1) x [c0, c1)."""
        for i in range(r0, r1):
            row = y[i]
            for j in range(c0, c1):
                row[U(j)] = act(alpha * row[U(j)] + beta * bias[U(j)], code, p0, p1)

    @jit_parallel
    def block(y, bias, z, has_z, r0, r1, c0, c1, p0, p1):
        """y[r, c0:c1] = act(y[r, c0:c1] + bias[r] (+ z[r, c0:c1])) for rows [r0, r1): one GEMM
        tile, still in cache; z: the fused residual (pass fuse_residual) shaped like y, read only
        when ``has_z`` (one compiled loop for both: each compilation costs ~0.3 s cold)."""
        for r in range(r0, r1):
            row = y[r]
            beta = bias[r]
            if has_z:
                zr = z[r]
                for i in range(c0, c1):
                    row[U(i)] = act(row[U(i)] + beta + zr[U(i)], code, p0, p1)
            else:
                for i in range(c0, c1):
                    row[U(i)] = act(row[U(i)] + beta, code, p0, p1)

    return rows, cols, block


_loops = functools.cache(_loops)  # built on first use


def bias_act_rows(y, bias, code, p0, p1) -> None:
    """In place on y (A, B, L): y[a, b, :] = act(y[a, b, :] + bias[b]) (bias: B values)."""
    parallel_for(_loops(code)[0], y.shape[0] * y.shape[1], (y, bias, p0, p1), 4.0 * y.size)


def scale_bias_act_cols(y, alpha, bias, beta, code, p0, p1, r0=0, r1=None, c0=0, c1=None) -> None:
    """In place on the tile [r0, r1) x [c0, c1) of y (M, N), all of it by default:
    y[i, j] = act(alpha * y[i, j] + beta * bias[j]) (bias: N values)."""
    r1 = y.shape[0] if r1 is None else r1
    c1 = y.shape[1] if c1 is None else c1
    _loops(code)[1](y, alpha, bias, beta, p0, p1, r0, r1, c0, c1)


def bias_act_block(y, bias, r0, r1, c0, c1, code, p0, p1, z=None) -> None:
    """In place on the tile y[r0:r1, c0:c1] of a C-contiguous (R, L) array: + bias[r] (+ z, a
    residual shaped like y), activation."""
    zz = _no_residual(y.dtype) if z is None else z
    _loops(code)[2](y, bias, zz, z is not None, r0, r1, c0, c1, p0, p1)


@functools.cache
def _no_residual(dtype):
    """A read-only (1, 1) stand-in for an absent residual (the type of a fused one)."""
    a = np.zeros((1, 1), dtype)
    a.flags.writeable = False
    return a

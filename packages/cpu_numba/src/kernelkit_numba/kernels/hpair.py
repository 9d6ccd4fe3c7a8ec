"""One-row float32 products (a classifier head: MobileNetV2's 1 x 1280 x 1000 Gemm, 5 MiB of weights) as
two halves on fpair's helper at two threads (issue 11, session 11; docs/numba.md, "MobileNetV2 at two
threads: the head and small layers").

A matrix-vector product runs at memory speed (Xeon: 0.46-0.50 ms at one thread for MobileNetV2's head),
so two cores streaming half of the weights each finish sooner. ``Gemm._split_head`` split it through the
shard pool only while the pool's worker spins, which it never does in MobileNetV2 (its layers pair on
fpair's helper, cpair.py). Here the halves are output ranges (rows of B where B is transposed, else
column ranges of every row of B) handed over in compiled code: the descriptor uses fpair's layout
(``FN`` the half's address, ``AP`` and ``OUT`` the per-call addresses that ``fpair.run`` writes), so
fpair's one helper loop and caller side run it; the stall rule is fpair's (``STALL_S`` plus half the
caller's own half). The caller runs the first output range, the helper the second, every run (each
core's share of the weights is the same every run; 5 MiB does not stay in one core's L2 either way).

``ON`` (False: the one-thread call), ``MIN_BYTES`` (weights below it stay on the caller) and
``fpair.enabled()`` (``KERNELKIT_F32_PAIR=off``, ``KERNELKIT_NUMBA_SPIN_US=0``) are read when the node
binds.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

from ..config import jit
from . import fpair, pairs
from .pairs import _ptr

ON = True
MIN_BYTES = 1 << 20  # weights (bytes) below this: the caller alone (a 0.1 ms product gains ~nothing)
CUT_COLS = 16  # the cut: a multiple of this many outputs (whole cache lines of the output and bias)

FN, AP, BP, K, N, BIAS, OUT, CUT, MODE, FV = (fpair.FN, fpair.AP, fpair.BP, fpair.K, fpair.N, fpair.BIAS,
                                              fpair.OUT, fpair.CUT, fpair.MODE, fpair.FV)
TRANS, PLAIN = 0, 1  # B as (N, K) rows (transB = 1: one dot product an output), or (K, N)


@jit
def half(addr, side):
    """Side 0: outputs [0, CUT), side 1: [CUT, N) of out = alpha * a @ B + bias."""
    d = numba.carray(_ptr(addr), (fpair.NDESC,), np.int64)
    k_n, n_n, cut = d[K], d[N], d[CUT]
    a = numba.carray(_ptr(d[AP]), (k_n,), np.float32)
    bias = numba.carray(_ptr(d[BIAS]), (n_n,), np.float32)
    out = numba.carray(_ptr(d[OUT]), (n_n,), np.float32)
    alpha = numba.carray(_ptr(d[FV]), (1,), np.float32)[0]
    j0, j1 = (0, cut) if side == 0 else (cut, n_n)
    if d[MODE] == TRANS:
        b2 = numba.carray(_ptr(d[BP]), (n_n, k_n), np.float32)
        j = j0
        while j + 4 <= j1:  # four rows a pass: a read once for four dot products
            r0, r1, r2, r3 = b2[j], b2[j + 1], b2[j + 2], b2[j + 3]
            s0 = s1 = s2 = s3 = np.float32(0)
            for kk in range(k_n):
                av = a[kk]
                s0 += av * r0[kk]
                s1 += av * r1[kk]
                s2 += av * r2[kk]
                s3 += av * r3[kk]
            out[j] = alpha * s0 + bias[j]
            out[j + 1] = alpha * s1 + bias[j + 1]
            out[j + 2] = alpha * s2 + bias[j + 2]
            out[j + 3] = alpha * s3 + bias[j + 3]
            j += 4
        while j < j1:
            r0 = b2[j]
            s = np.float32(0)
            for kk in range(k_n):
                s += a[kk] * r0[kk]
            out[j] = alpha * s + bias[j]
            j += 1
    else:
        b2 = numba.carray(_ptr(d[BP]), (k_n, n_n), np.float32)
        acc = out[j0:j1]
        for j in range(j1 - j0):
            acc[j] = 0
        kk = 0
        while kk + 4 <= k_n:  # four rows of B a pass over the outputs
            a0, a1, a2, a3 = a[kk], a[kk + 1], a[kk + 2], a[kk + 3]
            r0, r1, r2, r3 = b2[kk, j0:j1], b2[kk + 1, j0:j1], b2[kk + 2, j0:j1], b2[kk + 3, j0:j1]
            for j in range(j1 - j0):
                acc[j] += a0 * r0[j] + a1 * r1[j] + a2 * r2[j] + a3 * r3[j]
            kk += 4
        while kk < k_n:
            av = a[kk]
            r0 = b2[kk, j0:j1]
            for j in range(j1 - j0):
                acc[j] += av * r0[j]
            kk += 1
        for j in range(j1 - j0):
            acc[j] = alpha * acc[j] + bias[j0 + j]
    return 0


@functools.cache
def half_address() -> int:
    """The C address of the compiled half (compiled or loaded now), 0 where there is none."""
    return pairs.function_address(half)


def usable(m: int, k: int, n: int, trans_a: int) -> bool:
    """Whether a product of this shape may pair here (bind time): one row, weights of MIN_BYTES or more,
    at least two cuts of outputs, float32 pairs enabled."""
    return ON and m == 1 and not trans_a and 4 * k * n >= MIN_BYTES and n >= 2 * CUT_COLS and fpair.enabled()


def descriptor(b, bias, alpha, k: int, n: int, trans_b: int):
    """fpair's descriptor of the product by the constant ``b`` (its array as the node gets it: (N, K) where
    ``trans_b``, else (K, N), C-contiguous) and ``bias`` (n float32 values, beta applied), or None where
    there is no compiled half or no cycle counter."""
    helper = fpair.server()
    if not helper.prepare():
        return None
    address = half_address()
    if not address:
        return None
    fv = np.asarray([alpha], np.float32)
    bias = np.ascontiguousarray(bias, np.float32)
    d = np.zeros(fpair.NDESC, np.int64)
    d[FN], d[BP], d[K], d[N] = address, b.ctypes.data, k, n
    d[BIAS], d[FV], d[MODE] = bias.ctypes.data, fv.ctypes.data, TRANS if trans_b else PLAIN
    d[CUT] = max(1, (n // 2 + CUT_COLS // 2) // CUT_COLS) * CUT_COLS
    d[fpair.AP_N], d[fpair.OUT_N] = k, n
    helper.wake()
    return fpair.Descriptor(d, (b, bias, fv), d[MODE])


__all__ = ["MIN_BYTES", "ON", "descriptor", "half", "half_address", "usable"]

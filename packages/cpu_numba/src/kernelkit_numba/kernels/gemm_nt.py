"""y = a @ b.T for a few rows of ``a`` (2 to ``NT_MAX_ROWS``), ``b`` stored (N, K) as Gemm's
transB=1 weights are: every output is a dot product of two contiguous K-vectors, computed 4 rows
of ``a`` x 4 rows of ``b`` at a time (16 vector accumulators, 8 loads per 16 FMAs, each block of
``b`` read from memory once and kept in L1 while all of ``a`` passes by).

OpenBLAS at one thread on the AMD box (benchmarks/bench_gemm_nt.py), (M, K, N) -> ms, this kernel
vs ``np.matmul(a, b.T)`` (the transposed operand as BLAS strides, the old path) vs ``np.matmul``
on a pre-transposed copy: (8, 512, 1000) 0.10 / 0.43 / 0.17, (16, 2048, 1000) 0.64 / 1.69 / 1.03,
(64, 784, 1024) 0.98 / 1.33 / 1.25; at 7x7-map convolution shapes (M 512-2048, N 49) it only ties
BLAS, so convolutions keep BLAS. Callers check the sizes (``usable``).
"""
from __future__ import annotations

import numpy as np

from ..config import jit_parallel

U = np.uint64  # unsigned index: no wraparound check in inner loops

NT_MAX_ROWS = 16  # above, BLAS's packed kernels catch up (Xeon: 64 rows 0.73-0.79x of OpenBLAS; docs/numba.md)
NT_MIN_COLS = 16  # below, a few dot products: BLAS (or the single-column loop here) is as good


def usable(m: int, n: int) -> bool:
    """Whether ``gemm_nt`` beats BLAS for an (m, K) @ (K, n) product (measured on the AMD box)."""
    return 2 <= m <= NT_MAX_ROWS and n >= NT_MIN_COLS


@jit_parallel
def gemm_nt(a, b, y, lo, hi):
    """y[:, 4*lo : min(N, 4*hi)] = a @ b[4*lo : 4*hi].T for C-contiguous a (M, K), b (N, K), y (M, N):
    column groups ``[lo, hi)`` of four (the last group may be narrower)."""
    m_n, k_n = a.shape
    n_n = y.shape[1]
    af = a.reshape(a.size)
    bf = b.reshape(b.size)
    yf = y.reshape(y.size)
    kk = U(k_n)
    zero = np.zeros(1, y.dtype)[0]
    n1 = min(n_n, 4 * hi)
    n = 4 * lo
    while n + 4 <= n1:
        b0 = U(n * k_n)
        b1 = b0 + kk
        b2 = b1 + kk
        b3 = b2 + kk
        m = 0
        while m + 4 <= m_n:
            a0 = U(m * k_n)
            a1 = a0 + kk
            a2 = a1 + kk
            a3 = a2 + kk
            s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
            s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
            for k in range(k_n):
                q = U(k)
                v0, v1, v2, v3 = bf[b0 + q], bf[b1 + q], bf[b2 + q], bf[b3 + q]
                x = af[a0 + q]
                s00 += x * v0
                s01 += x * v1
                s02 += x * v2
                s03 += x * v3
                x = af[a1 + q]
                s10 += x * v0
                s11 += x * v1
                s12 += x * v2
                s13 += x * v3
                x = af[a2 + q]
                s20 += x * v0
                s21 += x * v1
                s22 += x * v2
                s23 += x * v3
                x = af[a3 + q]
                s30 += x * v0
                s31 += x * v1
                s32 += x * v2
                s33 += x * v3
            d = U(m * n_n + n)
            yf[d], yf[d + U(1)], yf[d + U(2)], yf[d + U(3)] = s00, s01, s02, s03
            d += U(n_n)
            yf[d], yf[d + U(1)], yf[d + U(2)], yf[d + U(3)] = s10, s11, s12, s13
            d += U(n_n)
            yf[d], yf[d + U(1)], yf[d + U(2)], yf[d + U(3)] = s20, s21, s22, s23
            d += U(n_n)
            yf[d], yf[d + U(1)], yf[d + U(2)], yf[d + U(3)] = s30, s31, s32, s33
            m += 4
        for r in range(m, m_n):  # the last rows of a, one at a time against the four of b
            a0 = U(r * k_n)
            s00 = s01 = s02 = s03 = zero
            for k in range(k_n):
                q = U(k)
                x = af[a0 + q]
                s00 += x * bf[b0 + q]
                s01 += x * bf[b1 + q]
                s02 += x * bf[b2 + q]
                s03 += x * bf[b3 + q]
            d = U(r * n_n + n)
            yf[d], yf[d + U(1)], yf[d + U(2)], yf[d + U(3)] = s00, s01, s02, s03
        n += 4
    for j in range(n, n1):  # a last group narrower than four
        b0 = U(j * k_n)
        for r in range(m_n):
            a0 = U(r * k_n)
            acc = zero
            for k in range(k_n):
                acc += af[a0 + U(k)] * bf[b0 + U(k)]
            yf[U(r * n_n + j)] = acc


@jit_parallel
def gemm_nt_rows(a, b, y, kc, lo, hi):
    """y[4*lo : min(M, 4*hi)] = a[4*lo : 4*hi] @ b.T for C-contiguous a (M, K), b (N, K), y (M, N),
    for an ``a`` of many rows against few rows of ``b`` (a convolution's weights against the
    columns of a 7x7 map): per group of four rows of ``a``, K in chunks of ``kc`` with every group
    of four rows of ``b`` inside, so each weight is read from memory once (BLAS packs them first:
    a read, a write and a read of cold weights) while ``b`` stays in L2."""
    m_n, k_n = a.shape
    n_n = y.shape[1]
    af = a.reshape(a.size)
    bf = b.reshape(b.size)
    yf = y.reshape(y.size)
    kk = U(k_n)
    zero = np.zeros(1, y.dtype)[0]
    for g in range(lo, hi):
        m = 4 * g
        rows = min(4, m_n - m)
        for r in range(m, m + rows):
            for j in range(n_n):
                yf[U(r * n_n + j)] = zero
        for k0 in range(0, k_n, kc):
            k1 = min(k_n, k0 + kc)
            if rows < 4:  # the last rows of a: one at a time
                for r in range(m, m + rows):
                    ar = U(r * k_n)
                    for j in range(n_n):
                        bj = U(j * k_n)
                        acc = zero
                        for k in range(k0, k1):
                            acc += af[ar + U(k)] * bf[bj + U(k)]
                        yf[U(r * n_n + j)] += acc
                continue
            a0 = U(m * k_n)
            a1 = a0 + kk
            a2 = a1 + kk
            a3 = a2 + kk
            n = 0
            while n + 4 <= n_n:
                b0 = U(n * k_n)
                b1 = b0 + kk
                b2 = b1 + kk
                b3 = b2 + kk
                s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
                s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
                for k in range(k0, k1):
                    q = U(k)
                    v0, v1, v2, v3 = bf[b0 + q], bf[b1 + q], bf[b2 + q], bf[b3 + q]
                    x = af[a0 + q]
                    s00 += x * v0
                    s01 += x * v1
                    s02 += x * v2
                    s03 += x * v3
                    x = af[a1 + q]
                    s10 += x * v0
                    s11 += x * v1
                    s12 += x * v2
                    s13 += x * v3
                    x = af[a2 + q]
                    s20 += x * v0
                    s21 += x * v1
                    s22 += x * v2
                    s23 += x * v3
                    x = af[a3 + q]
                    s30 += x * v0
                    s31 += x * v1
                    s32 += x * v2
                    s33 += x * v3
                d = U(m * n_n + n)
                yf[d] += s00
                yf[d + U(1)] += s01
                yf[d + U(2)] += s02
                yf[d + U(3)] += s03
                d += U(n_n)
                yf[d] += s10
                yf[d + U(1)] += s11
                yf[d + U(2)] += s12
                yf[d + U(3)] += s13
                d += U(n_n)
                yf[d] += s20
                yf[d + U(1)] += s21
                yf[d + U(2)] += s22
                yf[d + U(3)] += s23
                d += U(n_n)
                yf[d] += s30
                yf[d + U(1)] += s31
                yf[d + U(2)] += s32
                yf[d + U(3)] += s33
                n += 4
            for j in range(n, n_n):  # the last columns of y: four dot products each
                bj = U(j * k_n)
                t0 = t1 = t2 = t3 = zero
                for k in range(k0, k1):
                    q = U(k)
                    v = bf[bj + q]
                    t0 += af[a0 + q] * v
                    t1 += af[a1 + q] * v
                    t2 += af[a2 + q] * v
                    t3 += af[a3 + q] * v
                yf[U(m * n_n + j)] += t0
                yf[U((m + 1) * n_n + j)] += t1
                yf[U((m + 2) * n_n + j)] += t2
                yf[U((m + 3) * n_n + j)] += t3

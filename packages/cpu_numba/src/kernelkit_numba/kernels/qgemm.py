"""Integer matrix products: MatMulInteger, QLinearMatMul and com.microsoft::QGemm, plus the exact
integer GEMM and requantize epilogue that the integer convolutions share.

Exact integer products on float32 BLAS: the operands minus their zero points are small integers
(|a - a_zp| <= 255, |b - b_zp| <= 255), so a dot product over a K-block of length
``kc = 2**24 // (max|a - a_zp| * max|b - b_zp|)`` (at least 258, 518 for int8 weights) has every
partial sum an integer below 2**24, which float32 represents exactly whatever order BLAS adds in.
A longer K is cut into such blocks whose exact results are added in int32, so the result is
the int32 accumulation ONNX defines, bit for bit, at float32 GEMM speed. Constant weights are
converted and packed once per kernel (``PackedWeights``); the requantize (+ bias, x per-channel
multiplier, round half to even, + zero point, clamp for a fused Relu/Clip) is one parallel pass
over the last block's result. Products with few rows of A (batch-1 dense layers) are integer dot
products on the raw int8 operands instead (``gemv_int8``: int32 arithmetic that LLVM turns into
``vpmaddwd``), which read the int8 weights themselves; see docs/quantization.md.
"""
from __future__ import annotations

import math

import numpy as np
from kernelkit.ops.integer import split_columns
from kernelkit.ops.qlinear import clamp_bounds, multiplier
from kernelkit.registry import register_kernel
from numba import prange

from .. import by_kind, config
from .._base import NumbaKernel
from .._base import readonly as _readonly
from ..config import jit_exact, jit_parallel
from . import qamx, qpack, qpair, qtile
from .norm import layer_normalization
from .quantize import dynamic_range, quantize_flat, quantize_offset

EXACT = float(1 << 24)  # float32 represents every integer up to this exactly


@jit_parallel
def offset_rows(x, zp, per_row, out):
    """out[r, c] = float32(x[r, c] - zp) for 2-D int8/uint8 x; zp one value, one per row
    (``per_row``) or one per column."""
    rows, cols = x.shape
    per_col = zp.shape[0] > 1 and not per_row
    for r in prange(rows):
        z = np.float32(zp[np.int64(r)] if per_row else zp[0])
        src = x[r]
        dst = out[r]
        if per_col:
            for c in range(cols):
                dst[c] = np.float32(src[c]) - np.float32(zp[c])
        else:
            for c in range(cols):
                dst[c] = np.float32(src[c]) - z


@jit_parallel
def accumulate(acc, y):
    """acc += int32(y): one exact K-block's result added into the int32 accumulators."""
    rows, cols = y.shape
    for r in prange(rows):
        for c in range(cols):
            acc[r, c] += np.int32(y[r, c])


@jit_parallel
def requantize(y, acc, has_acc, bias, has_bias, mult, per_row, zp, lo, hi, out):
    """out = clamp(rint(float32(int32(y) [+ acc] [+ bias]) * mult) + zp, lo, hi), with bias and
    mult per row (``per_row``: conv channels) or per column (GEMM columns); a one-element mult is
    per tensor. The inner loops stay in int32/float32 without branches, so they vectorise."""
    rows, cols = y.shape
    per_col_mult = mult.shape[0] > 1 and not per_row
    for r in prange(rows):
        src = y[r]
        dst = out[r]
        ri = np.int64(r)
        m = mult[ri if mult.shape[0] > 1 else 0]
        b = np.int32(bias[ri]) if has_bias and per_row else np.int32(0)
        col_bias = has_bias and not per_row
        if has_acc:
            a = acc[r]
            for c in range(cols):
                v = np.int32(np.int32(src[c]) + a[c] + b + (bias[c] if col_bias else np.int32(0)))
                q = np.float32(np.rint(np.float32(v) * (mult[c] if per_col_mult else m))) + zp
                dst[c] = min(max(q, lo), hi)
        elif per_row or not (col_bias or per_col_mult):
            for c in range(cols):
                q = np.float32(np.rint(np.float32(np.int32(np.int32(src[c]) + b)) * m)) + zp
                dst[c] = min(max(q, lo), hi)
        else:
            for c in range(cols):
                v = np.int32(np.int32(src[c]) + (bias[c] if col_bias else np.int32(0)))
                q = np.float32(np.rint(np.float32(v) * (mult[c] if per_col_mult else m))) + zp
                dst[c] = min(max(q, lo), hi)


@jit_parallel
def requantize_block(y, bias, mult, zp, lo, hi, out, r0, r1, c0, c1):
    """requantize (per row: conv output channels) of the block [r0, r1) x [c0, c1) of y into the same
    block of out: one tile of a sharded GEMM, right after its BLAS call."""
    for r in range(r0, r1):
        src = y[r]
        dst = out[r]
        b = np.int32(bias[r])
        m = mult[r]
        for c in range(c0, c1):
            q = np.float32(np.rint(np.float32(np.int32(np.int32(src[c]) + b)) * m)) + zp
            dst[c] = min(max(q, lo), hi)


@jit_parallel
def to_int32(y, acc, has_acc, out):
    """out = int32(y) [+ acc]: the last block of an integer product."""
    rows, cols = y.shape
    for r in prange(rows):
        for c in range(cols):
            v = np.int32(y[r, c])
            if has_acc:
                v += acc[r, c]
            out[r, c] = v


@jit_exact
def to_float(y, acc, has_acc, mult, bias, has_bias, out):
    """out = float32(int32(y) [+ acc]) * mult[col] [+ bias[col]] (a one-element mult is per tensor),
    rounded as the op-by-op Cast -> Mul -> Add (no FMA contraction: bit-identical to op by op)."""
    rows, cols = y.shape
    scalar = mult.shape[0] == 1
    for r in prange(rows):
        for c in range(cols):
            v = np.int32(y[r, c])
            if has_acc:
                v += acc[r, c]
            f = np.float32(v) * mult[0 if scalar else c]
            out[r, c] = f + bias[c] if has_bias else f


# DynamicQuantizeMatMul's work in loop units (config.SERIAL_WORK) per integer operation, and the
# products of few rows that are cut into column shards at two threads or more (below: one call).
# Measured on the Xeon at `taskset -c 0,1` (docs/quantization.md, session 6): a parallel product
# ran slower than one thread (onnxruntime's int8 products gained nothing either), and column shards
# made the batch-1 MLP's products 0.100 -> 0.170 ms; so the threshold stays session 5's (1.0:
# products of >= 2**25 operations get the session's threads; 32 would give it to every product of
# >= 2**20) and column shards are off (a machine whose two threads are two cores may try 1 << 20).
# Session 8 (AMX tiles: a 2**26-operation product takes ~0.1 ms, as long as a job's hand-offs): the
# int8 transformer ran 3.93-5.83 ms at two threads against 3.52-3.55 at one in alternating processes,
# never faster in any call of the session; so products take the session's threads from 2**27
# operations (0.25: the transformer's 128 x 256 x 1024 products stay on the calling thread, a
# batch-8 transformer's go to the pool).
INT8_WORK = 0.25
COLUMN_SHARD_OPS = float("inf")

GEMV_ROWS = 8  # products with at most this many rows of A run as integer dot products (gemv_int8)


@jit_parallel
def gemv_int8(a, bt, azp, col_sums, bzp, out, lo, hi):
    """out[m, n] = sum_k (a[m, k] - azp) * (bt[n, k] - bzp[n]) for columns n in [lo, hi), a and bt raw
    int8/uint8 (B transposed; bzp of one element or one per column): int32 dot products of the raw
    values, four columns at a time, then the zero points out as MLAS does, - azp * colsum(B)[n]
    - bzp[n] * rowsum(A)[m] + K * azp * bzp[n] (wrapping to int32 as the accumulator would). Each
    product is truncated back to int32 (Numba widens integer arithmetic to int64; the truncation
    lets LLVM narrow it again), so the loops vectorise to vpmaddwd (16 multiply-adds an instruction
    on AVX2; VNNI's vpdpwssd where the CPU has it): exact, reading the int8 weights themselves."""
    rows, k_n = a.shape
    n4 = lo + (hi - lo) // 4 * 4
    per_col = bzp.shape[0] > 1
    for m in range(rows):
        x = a[m]
        for n in range(lo, n4, 4):
            r0, r1, r2, r3 = bt[n], bt[n + 1], bt[n + 2], bt[n + 3]
            s0 = s1 = s2 = s3 = np.int32(0)
            for k in range(k_n):
                u = np.int32(x[k])
                s0 = np.int32(s0 + u * np.int32(r0[k]))
                s1 = np.int32(s1 + u * np.int32(r1[k]))
                s2 = np.int32(s2 + u * np.int32(r2[k]))
                s3 = np.int32(s3 + u * np.int32(r3[k]))
            out[m, n], out[m, n + 1], out[m, n + 2], out[m, n + 3] = s0, s1, s2, s3
        for n in range(n4, hi):
            r = bt[n]
            s = np.int32(0)
            for k in range(k_n):
                s = np.int32(s + np.int32(x[k]) * np.int32(r[k]))
            out[m, n] = s
        row_sum = np.int32(0)
        for k in range(k_n):
            row_sum = np.int32(row_sum + np.int32(x[k]))
        for n in range(lo, hi):
            z = np.int64(bzp[n if per_col else 0])
            out[m, n] = np.int32(out[m, n] - azp * col_sums[n] - z * row_sum + k_n * azp * z)


class GemvWeights:
    """B (2-D, constant) for gemv_product: transposed to (N, K) and its column sums, made once."""

    def __init__(self, b):
        self.b = b
        self.bt = np.ascontiguousarray(b.T)
        self.col_sums = b.sum(axis=0, dtype=np.int64)


def gemv_product(a: np.ndarray, a_zero_point, w: GemvWeights, b_zero_point) -> np.ndarray:
    """Exact int32 (A - a_zp) @ (B - b_zp) for few rows of a raw int8/uint8 A (gemv_int8)."""
    a2 = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
    n = w.b.shape[1]
    out = np.empty((a2.shape[0], n), np.int32)
    azp = np.int64(0 if a_zero_point is None else np.asarray(a_zero_point).reshape(()))
    bzp = np.zeros(1, np.int64) if b_zero_point is None else np.asarray(b_zero_point).reshape(-1)
    config.parallel_for(gemv_int8, n, (a2, w.bt, azp, w.col_sums, bzp, out), 2.0 * a2.size * n)
    return out.reshape(*a.shape[:-1], n)


def dtype_reach(dtype, zp) -> int:
    """max |v - zp| over the values v of an int8/uint8 dtype, for every zero point in ``zp``."""
    info = np.iinfo(dtype)
    z = np.asarray(zp, np.int64).reshape(-1) if zp is not None else np.zeros(1, np.int64)
    return int(max(np.max(z) - info.min, info.max - np.min(z), 1))


def exact_blocks(rows: np.ndarray, a_reach: int) -> list[tuple[int, int]]:
    """Cut K into blocks [k0, k1) in which every dot product of a weight row (``rows``: (R, K),
    the float32 offsets) with activations of magnitude <= ``a_reach`` stays exact in float32:
    a_reach * sum_k |w[r, k]| <= 2**24 bounds every partial sum, whatever order BLAS adds in."""
    k = rows.shape[1]
    if not rows.size:
        return [(0, k)]
    cum = np.cumsum(np.abs(rows, dtype=np.float64), axis=1) * a_reach
    blocks, k0, base = [], 0, np.zeros((rows.shape[0], 1))
    while k0 < k:
        over = np.any(cum[:, k0:] - base > EXACT, axis=0)
        k1 = k0 + (int(np.argmax(over)) if over.any() else k - k0)
        k1 = max(k1, k0 + 1)  # one term is always exact (255 * 255 < 2**24)
        blocks.append((k0, k1))
        base = cum[:, k1 - 1:k1]
        k0 = k1
    return blocks


class PackedWeights:
    """A constant weight as float32 ``w - w_zp``, made once and reused while the same arrays come in
    (the session hands a kernel the same read-only constants every run; a writable array may change,
    so it is packed per call), with its exact K-blocks per activation reach. The reach is rounded up
    to a multiple of 32 (a larger reach only makes blocks shorter, never inexact): a run-time zero
    point (DynamicQuantizeLinear's) then costs at most 8 block computations, not one per value."""

    def __init__(self, pack, rows):
        self.pack, self.rows = pack, rows  # pack(w, zp) -> float32 array; rows(packed) -> (R, K) view
        self.key = None

    def get(self, w, zp, a_reach: int):
        """(packed float32 array, [(k0, k1), ...] exact blocks) for activations up to ``a_reach``."""
        key = (id(w), id(zp))
        if key != self.key or w.flags.writeable:
            self.data = self.pack(w, zp)
            self.blocks = {}
            self.key = key if not w.flags.writeable else None
            self._refs = (w, zp)  # keep the keyed objects alive: their ids stay theirs
        reach = min(255, -(-a_reach // 32) * 32)
        if reach not in self.blocks:
            self.blocks[reach] = exact_blocks(self.rows(self.data), reach)
        return self.data, self.blocks[reach]


def derived(kernel, params: tuple, make):
    """``make()`` computed once while the same read-only arrays come in as ``params`` (scales, zero
    points, bias: constants of the model), then reused; writable (caller) arrays: every call."""
    cached = kernel.__dict__.get("_derived")
    if cached is None or len(cached[0]) != len(params) or any(p is not q for p, q in zip(params, cached[0])) or \
            any(p is not None and np.asarray(p).flags.writeable for p in params):
        cached = (params, make())
        kernel._derived = cached
    return cached[1]


def derived_weight(kernel, w: np.ndarray, make):
    """``make()`` of a constant weight (e.g. its transpose), kept while the same read-only array comes in."""
    cached = kernel.__dict__.get("_derived_weight")
    if cached is None or cached[0] is not w or w.flags.writeable:
        cached = (w, make())
        kernel._derived_weight = cached
    return cached[1]


def offset(x: np.ndarray, zp) -> np.ndarray:
    """float32 ``x - zp`` of an integer array (any rank); zp per tensor or per column (last axis)."""
    x2 = np.ascontiguousarray(x).reshape(-1, x.shape[-1] if x.ndim else 1)
    z = np.zeros(1, x.dtype) if zp is None else np.ascontiguousarray(zp).reshape(-1)
    if z.size > 1 and z.size != x2.shape[1]:
        raise ValueError(f"zero point of {z.size} elements is neither per tensor nor per column of {x.shape}")
    out = np.empty(x2.shape, np.float32)
    offset_rows(x2, z, False, out)
    return out.reshape(x.shape)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b; a 2-D b with enough work is cut into row blocks of a on the shard pool, one BLAS call
    at one thread each (as the float Gemm and Conv do), so that ``Session(threads=n)`` reaches BLAS."""
    rows, k_n, n_n = math.prod(a.shape[:-1]), a.shape[-1], b.shape[-1]
    count = config.shard_count(rows, 2.0 * rows * k_n * n_n, unit=config.MIN_TILE_WORK) if b.ndim == 2 else 1
    if count <= 1 or rows < 2 * count:
        return np.matmul(a, b)
    a2 = a.reshape(rows, k_n)
    y = np.empty((rows, n_n), np.float32)

    def block(i):
        r0, r1 = i * rows // count, (i + 1) * rows // count
        np.matmul(a2[r0:r1], b, out=y[r0:r1])

    config.run_shards(block, count)
    return y.reshape(*a.shape[:-1], n_n)


def integer_product(af: np.ndarray, bf: np.ndarray, blocks, epilogue):
    """Exact (A - a_zp) @ (B - b_zp) from float32 offsets (..., M, K) @ (..., K, N), one BLAS call
    per exact K-block, blocks summed in int32; ``epilogue(y, acc, has_acc, shape)`` gets the last
    block's float32 result as 2-D (rows = all leading axes) and the int32 sum of the earlier ones."""
    acc, has_acc = NO_ACC, False
    for i, (k0, k1) in enumerate(blocks):
        y = _matmul(af[..., k0:k1], bf[..., k0:k1, :])
        y2 = y.reshape(-1, y.shape[-1])
        if i == len(blocks) - 1:
            return epilogue(y2, acc, has_acc, y.shape)
        if not has_acc:
            acc, has_acc = np.zeros(y2.shape, np.int32), True
        accumulate(acc, y2)


NO_ACC = np.zeros((1, 1), np.int32)


def _matmul_packing(b_ndim: int):
    """PackedWeights for a B of rank ``b_ndim``: 2-D B gets exact blocks from its column sums; an N-D
    (batched) B the uniform worst-case block."""
    if b_ndim == 2:
        return PackedWeights(offset, lambda bf: bf.T)
    return PackedWeights(offset, lambda bf: np.full((1, bf.shape[-2]), 255.0, np.float32))


def matmul_supported(specs, b_index: int, a_zp_index: int) -> bool:
    """Operands of rank >= 2 (1-D ones stay on the reference) and a per-tensor A zero point."""
    a, b = specs[0], specs[b_index]
    zp = specs[a_zp_index] if a_zp_index < len(specs) else None
    return a.rank >= 2 and b.rank >= 2 and (zp is None or zp.size == 1)


@register_kernel("MatMulInteger", device="cpu", vendor="numba", dtype=("int8", "uint8"),
                 supports=lambda specs, attrs: matmul_supported(specs, 1, 2))
class MatMulInteger(NumbaKernel):
    """(A - a_zp) @ (B - b_zp) exactly, int32 out; B (when constant) packed once."""

    uses_blas = True

    def setup(self, input_specs):
        self.packed = _matmul_packing(input_specs[1].rank)

    def work(self, a, b, *zps):
        return 2.0 * a.size * b.shape[-1]

    def compute(self, a, b, a_zero_point=None, b_zero_point=None):
        tile = tiled(self, b, b_zero_point)
        if tile is not None:
            return tiled_int32(self, tile, a, a_zero_point)
        bf, blocks = self.packed.get(b, b_zero_point, dtype_reach(a.dtype, a_zero_point))
        af = offset(a, a_zero_point)

        def finish(y, acc, has_acc, shape):
            out = np.empty(y.shape, np.int32)
            to_int32(y, acc, has_acc, out)
            return out.reshape(shape)

        return integer_product(af, bf, blocks, finish)


def quantized_output(y, acc, has_acc, bias, mult, per_row, y_zero_point, bounds):
    """The requantize epilogue into a fresh array of the zero point's dtype."""
    zp = np.asarray(y_zero_point)
    out = np.empty(y.shape, zp.dtype)
    has_bias = bias is not None
    requantize(y, acc, has_acc, bias if has_bias else np.zeros(1, np.int32), has_bias,
               np.ascontiguousarray(mult, np.float32).reshape(-1), per_row, np.float32(zp.reshape(())),
               np.float32(bounds[0]), np.float32(bounds[1]), out)
    return out


def _bounds(kernel, y_scale, y_zero_point):
    a = kernel.attrs
    return clamp_bounds(np.asarray(y_zero_point).dtype, y_scale, y_zero_point, a.get("activation", ""),
                        a.get("activation_params", ()))


@register_kernel("QLinearMatMul", device="cpu", vendor="numba", dtype=("int8", "uint8"),
                 supports=lambda specs, attrs: matmul_supported(specs, 3, 2))
class QLinearMatMul(NumbaKernel):
    """Exact integer product, requantized per tensor or per column of B."""

    uses_blas = True

    def setup(self, input_specs):
        self.packed = _matmul_packing(input_specs[3].rank)

    def work(self, a, *rest):
        return 2.0 * a.size * rest[2].shape[-1]

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        mult, bounds = derived(self, (a_scale, b_scale, y_scale, y_zero_point),
                               lambda: (multiplier(a_scale, b_scale, y_scale), _bounds(self, y_scale, y_zero_point)))
        tile = tiled(self, b, b_zero_point)
        if tile is not None:
            return tiled_requantized(self, tile, a, a_zero_point, mult, None, y_zero_point, bounds)
        bf, blocks = self.packed.get(b, b_zero_point, dtype_reach(a.dtype, a_zero_point))
        af = offset(a, a_zero_point)

        def finish(y, acc, has_acc, shape):
            return quantized_output(y, acc, has_acc, None, mult, False, y_zero_point, bounds).reshape(shape)

        return integer_product(af, bf, blocks, finish)


def _pack_gemm_b(trans_b):
    def pack(b, zp):  # B' = B.T for transB, offsets per column of B' (zp of length N)
        bt = np.ascontiguousarray(b.T if trans_b else b)
        z = np.zeros(1, b.dtype) if zp is None else np.ascontiguousarray(zp).reshape(-1)
        out = np.empty(bt.shape, np.float32)
        offset_rows(bt, z, False, out)  # one zero point, or one per column of B'
        return out

    return pack


@register_kernel("QGemm", domain="com.microsoft", device="cpu", vendor="numba", dtype=("int8", "uint8"))
class QGemm(NumbaKernel):
    """alpha * (A' - a_zp) @ (B' - b_zp) + C, requantized (or scaled to float32 without y_zero_point)."""

    uses_blas = True

    def setup(self, input_specs):
        self.packed = PackedWeights(_pack_gemm_b(self.attrs.get("transB", 0)), lambda bf: bf.T)

    def work(self, a, *rest):
        return 2.0 * a.size * rest[2].shape[1]

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None):
        at = self.attrs
        a_eff = np.ascontiguousarray(a.T) if at.get("transA", 0) else a
        b_eff = b.T if at.get("transB", 0) else b  # (K, N)
        n = b_eff.shape[1]

        def make():
            mult = multiplier(a_scale, b_scale, y_scale, at.get("alpha", 1.0))
            per_column = c is not None and c.size == n and c.shape[-1] == n  # fused into the epilogue
            bias = np.ascontiguousarray(c, np.int32).reshape(n) if per_column else None
            bounds = _bounds(self, y_scale, y_zero_point) if y_zero_point is not None else None
            return mult, bias, bounds

        mult, bias, bounds = derived(self, (a_scale, b_scale, c, y_scale, y_zero_point), make)
        full_c = c if (c is not None and bias is None) else None  # (M, 1), (M, N), scalar: added to acc

        def finish(y, acc, has_acc, shape):
            if full_c is not None:
                acc = (acc if has_acc else np.zeros(y.shape, np.int32)) + np.broadcast_to(full_c, y.shape)
                acc, has_acc = acc.astype(np.int32), True
            if y_zero_point is None:
                out = np.empty(y.shape, np.int32)
                to_int32(y, acc, has_acc, out)
                if bias is not None:
                    out += bias
                return out.astype(np.float32) * (mult.reshape(()) if mult.size == 1 else mult)
            return quantized_output(y, acc, has_acc, bias, mult, False, y_zero_point, bounds)

        tile = tiled(self, b, b_zero_point, bool(at.get("transB", 0)))
        if tile is not None and full_c is None and y_zero_point is not None:
            return tiled_requantized(self, tile, a_eff, a_zero_point, mult, bias, y_zero_point, bounds)
        if few_rows(a_eff.shape, b_eff):  # a classifier at batch 1: integer dot products on the int8 weights
            return gemv_finish(self, a_eff, a_zero_point, b, b_zero_point, finish, bool(at.get("transB", 0)))
        bf, blocks = self.packed.get(b, b_zero_point, dtype_reach(a.dtype, a_zero_point))
        return integer_product(offset(a_eff, a_zero_point), bf, blocks, finish)


def conv_weight_offsets(w, zp) -> np.ndarray:
    """float32 (M, C/group * kh * kw) offsets of a conv weight; zp per tensor or output channel."""
    m = w.shape[0]
    w2 = np.ascontiguousarray(w).reshape(m, math.prod(w.shape[1:]))
    z = np.zeros(1, w.dtype) if zp is None else np.ascontiguousarray(zp).reshape(-1)
    out = np.empty(w2.shape, np.float32)
    offset_rows(w2, z, z.size > 1, out)
    return out


@register_kernel("MatMulIntegerToFloat", domain="com.microsoft", device="cpu", vendor="numba", dtype=("int8", "uint8"),
                 supports=lambda specs, attrs: matmul_supported(specs, 1, 4))
class MatMulIntegerToFloat(NumbaKernel):
    """float32(exact int32 product) * (a_scale * b_scale) [+ bias] in one epilogue pass: a dynamic
    model's MatMulInteger -> Cast -> Mul [-> Add] (fused by fuse_qdq)."""

    uses_blas = True

    def setup(self, input_specs):
        self.packed = _matmul_packing(input_specs[1].rank)

    def work(self, a, b, *rest):
        return 2.0 * a.size * b.shape[-1]

    def compute(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        mult = (np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)).reshape(-1)  # as the Mul node
        tile = tiled(self, b, b_zero_point)
        if tile is not None:
            return tiled_float(self, tile, a, a_zero_point, mult, bias)
        finish = float_epilogue(self, mult, bias)
        if few_rows(a.shape, b):
            return gemv_finish(self, a, a_zero_point, b, b_zero_point, finish)
        bf, blocks = self.packed.get(b, b_zero_point, dtype_reach(a.dtype, a_zero_point))
        return integer_product(offset(a, a_zero_point), bf, blocks, finish)


@register_kernel("DynamicQuantizeMatMul", domain="com.microsoft", device="cpu", vendor="numba", dtype="float32",
                 supports=lambda specs, attrs: specs[0].rank >= 2 and specs[1].rank >= 2)
class DynamicQuantizeMatMul(NumbaKernel):
    """DynamicQuantizeLinear(A) and MatMulIntegerToFloat in one kernel (onnxruntime's fusion): A's
    range, then A quantized straight into the int8 micro-kernel's panels (qtile.py), or, on the
    float32-BLAS path, quantized and minus its zero point into the float32 operand (no uint8 array,
    no second conversion pass); the exact product and the float32 scale (+ bias) epilogue. BLAS
    (set to one thread, config.blas_single) only on the float32-BLAS path: the micro-kernel's calls
    skip that check, and calls on one thread take ``serial_call``."""

    _plain = None  # the serial call's pre-bound arguments (_bind_small)

    def setup(self, input_specs):
        self.packed = _matmul_packing(input_specs[1].rank)
        self._plain = None

    def work(self, a, b, *rest):
        """The product's integer operations in loop units (config.SERIAL_WORK), INT8_WORK each."""
        return 2.0 * a.size * b.shape[-1] * INT8_WORK

    def serial_call(self, step):
        """Calls on the calling thread alone (one thread, or little work): the pre-bound call
        (``_plain``, _bind_small: one Numba call whose arguments were made for this A shape, the
        constants checked by identity), else the one-call path (small_dynamic), else ``run`` (the
        general path at this node's thread budget)."""
        run, kernel, env_raw, f32 = self.run, self, qtile.requested_raw, np.dtype(np.float32)

        def call(a, b, b_scale, b_zero_point=None, bias=None, residual=None, norm_scale=None, norm_bias=None,
                 out=None):
            p = kernel._plain
            if p is not None and a.shape == p[0] and b is p[1] and b_scale is p[2] and b_zero_point is p[3] and \
                    bias is p[4] and norm_scale is p[5] and norm_bias is p[6] and (residual is None) is p[7] and \
                    a.dtype is f32 and env_raw() == p[8]:
                x2 = a.reshape(p[9])
                if x2.flags.c_contiguous:
                    x2.setflags(write=False)  # one compiled signature (readonly inputs, as _base.readonly)
                    flat = np.empty(p[10], np.float32)
                    fn = p[18]
                    pr = p[19]  # two halves on two cores where the helper spins (qpair.py)
                    if p[11] is not None:  # one output, no residual, no norm
                        if pr is not None and _paired(pr, x2, flat, qpair.NO_RES):
                            return flat.reshape(p[13])
                        if fn[0](p[11], x2, *p[12], flat):
                            if fn[2]:  # compiled now: its entry point from the next call on
                                fn[0], fn[2] = _entry(fn[1], (p[11], x2, *p[12], flat)), False
                            return flat.reshape(p[13])
                    elif residual is None:
                        if pr is not None and _paired(pr, x2, flat, qpair.NO_RES):
                            return column_parts(flat, p[15][0], p[0])
                        if fn[0](p[14], x2, *p[12], flat, *p[15]):
                            if fn[2]:
                                fn[0], fn[2] = _entry(fn[1], (p[14], x2, *p[12], flat, *p[15])), False
                            return column_parts(flat, p[15][0], p[0])
                    elif residual.shape == p[16] and residual.dtype is f32:
                        res = residual.reshape(p[17])
                        if res.flags.c_contiguous:
                            if pr is not None:
                                res.setflags(write=False)  # one compiled signature, as qpair.NO_RES
                            if pr is not None and _paired(pr, x2, flat, res):
                                return column_parts(flat, p[15][0], p[0])
                            if fn[1](p[14], x2, *p[12], flat, p[15][0], res, *p[15][2:]):
                                return column_parts(flat, p[15][0], p[0])
            a = _readonly(a)
            y = small_dynamic(self, a, b, b_scale, b_zero_point, bias, True, residual, norm_scale, norm_bias) \
                if a.size and a.shape[-1] else None
            if y is not None:
                _bind_small(kernel, a, b, b_scale, b_zero_point, bias, residual, norm_scale, norm_bias, env_raw())
            return run((a, b, b_scale, b_zero_point, bias, residual, norm_scale, norm_bias), None) if y is None else y

        return call

    def compute(self, a, b, b_scale, b_zero_point=None, bias=None, residual=None, norm_scale=None, norm_bias=None):
        """The product [+ bias], then the fused Relu (attribute ``activation``, the fuse_dynamic_relu
        pass) or + ``residual`` (kernelkit's input, the fuse_dynamic_add pass); one output, or one per
        part of the columns (attribute ``split``, merge_dynamic_matmul: the micro-kernel's epilogue
        writes each part into its own array); then LayerNormalization over the last axis (inputs
        ``norm_scale``, ``norm_bias``, attribute ``norm_epsilon``: the fuse_dynamic_norm pass)."""
        if residual is not None and residual.shape != a.shape[:-1] + b.shape[-1:] or \
                norm_scale is not None and _norm_params(self, norm_scale, norm_bias, b.shape[-1]) is None:
            y = self.compute(a, b, b_scale, b_zero_point, bias)  # broadcasting: the Add and LayerNormalization nodes'
            y = y if residual is None else np.add(y, residual)
            return y if norm_scale is None else layer_normalization(
                y, norm_scale, norm_bias, axis=-1, epsilon=self.attrs.get("norm_epsilon", 1e-5))[0]
        if a.shape[-1] and a.size:  # one Numba call where one shard takes it (one thread; batch 1)
            out = small_dynamic(self, a, b, b_scale, b_zero_point, bias, False, residual, norm_scale, norm_bias)
            if out is not None:
                return out
        y, bounds = self._product(a, b, b_scale, b_zero_point, bias, residual, norm_scale, norm_bias)
        if bounds is not None:  # the micro-kernel's epilogue added the residual, activated, normalized
            return column_parts(y, bounds, a.shape)
        if residual is not None:  # the paths without the fused add (same shape here)
            np.add(y, residual, out=y)
        if norm_scale is not None:
            y = layer_normalization(y, norm_scale, norm_bias, axis=-1, epsilon=self.attrs.get("norm_epsilon", 1e-5))[0]
        act = activation_code(self)
        if act == qpack.ACT_SOFTMAX:
            qpack.softmax_rows(y.reshape(-1, y.shape[-1]))
        else:
            qpack.activate(y.reshape(-1), act)
        split = self.attrs.get("split")
        return split_columns(y, split) if split else y

    def _product(self, a, b, b_scale, b_zero_point, bias, residual, norm_scale=None, norm_bias=None):
        """(y, bounds): the parts laid one after the other in a flat y (column_parts; + residual
        included), or (the whole product, None)."""
        flat, a_scale, a_zp = dynamic_range(a)
        if not np.isfinite(a_scale):  # an infinity in A (NaN: scale NaN): the reference's steps, whose
            # 0 * inf products make NaN where the exact-integer paths' epilogues differ (-inf)
            from kernelkit.ops.integer import dynamic_quantize_matmul

            return dynamic_quantize_matmul(a, b, b_scale, b_zero_point, bias), None
        mult = (np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)).reshape(-1)  # as the Mul node
        tile = tiled(self, b, b_zero_point)
        if tile is not None:  # A quantized straight into the micro-kernel's panels
            bounds = column_bounds(self, tile[1].n)
            x2 = flat.reshape(-1, a.shape[-1])
            norm = _norm_params(self, norm_scale, norm_bias, tile[1].n)
            return tiled_dynamic(self, tile, x2, a_scale, a_zp, mult, bias, bounds, _residual(residual, x2),
                                 activation_code(self), norm), bounds
        finish = float_epilogue(self, mult, bias)
        if few_rows(a.shape, b):  # integer dot products read the uint8 A
            q = np.empty(a.shape, np.uint8)
            quantize_flat(flat, a_scale, a_zp, q.reshape(-1))
            return gemv_finish(self, q, a_zp, b, b_zero_point, finish), None
        af = np.empty(a.shape, np.float32)  # BLAS reads float32: quantized minus zp in one pass
        quantize_offset(flat, a_scale, np.float32(a_zp), af.reshape(-1))
        bf, blocks = self.packed.get(b, b_zero_point, max(int(a_zp), 255 - int(a_zp)))
        config.blas_single()  # uses_blas is off for the micro-kernel's sake
        return integer_product(af, bf, blocks, finish), None


def column_bounds(kernel, n: int) -> np.ndarray:
    """int64 [0, n1, n1 + n2, ..., n]: the column parts of the node's outputs (attribute ``split``;
    without it one part, [0, n]), kept on the kernel."""
    hit = kernel.__dict__.get("_column_bounds")
    if hit is None or hit[0] != n:
        split = [int(v) for v in kernel.attrs.get("split") or ()]
        if split and (sum(split) != n or min(split) < 0):
            raise ValueError(f"split {split} does not cut the product's {n} columns")
        hit = kernel._column_bounds = (n, np.cumsum([0, *split], dtype=np.int64) if split else
                                       np.array([0, n], np.int64))
    return hit[1]


def column_parts(flat: np.ndarray, bounds: np.ndarray, a_shape):
    """The outputs whose parts qpack.to_float_parts wrote one after the other into ``flat``: one
    array (..., n), or a tuple of C-contiguous (..., width) views, one per part."""
    lead = tuple(a_shape[:-1])
    if bounds.shape[0] == 2:
        return flat.reshape(*lead, int(bounds[1]))
    m = math.prod(lead)
    return tuple(flat[m * int(c0):m * int(c1)].reshape(*lead, int(c1 - c0)) for c0, c1 in zip(bounds[:-1], bounds[1:]))


def _norm_params(kernel, scale, bias, n: int):
    """(nscale, nbias, eps, has_norm) arguments of the qpack kernels for a fused LayerNormalization
    over the last axis: scale and bias as N contiguous float32 (as the LayerNormalization kernel makes
    them), a stand-in without one, None where they are not of N. (Separate arguments, not a tuple:
    Numba's dispatcher types a tuple argument in Python, ~1 us a call.)"""
    if scale is None:
        return NO_NORM
    if scale.size != n or (bias is not None and bias.size != n):
        return None
    eps = float(kernel.attrs.get("norm_epsilon", 1e-5))
    s = np.ascontiguousarray(scale, np.float32).reshape(n)
    b = np.zeros(n, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32).reshape(n)
    return s, b, eps, True


NO_NORM = (np.zeros(1, np.float32), np.zeros(1, np.float32), 0.0, False)


def activation_code(kernel) -> int:
    """qpack's code of the node's fused activation (attribute ``activation``: "", "Relu", "Gelu"; or
    ``softmax`` 1: a Softmax over the last axis)."""
    if kernel.attrs.get("softmax"):
        return qpack.ACT_SOFTMAX
    return _ACT[kernel.attrs.get("activation") or ""]


_ACT = {"": qpack.ACT_NONE, "Relu": qpack.ACT_RELU, "Gelu": qpack.ACT_GELU}


def _residual(residual, x2) -> tuple:
    """(res, has_res) arguments of the qpack kernels: ``residual`` as (rows, N) float32, or a stand-in."""
    if residual is None:
        return NO_RESIDUAL, False
    return np.ascontiguousarray(residual, np.float32).reshape(x2.shape[0], -1), True


NO_RESIDUAL = np.zeros((1, 1), np.float32)


def small_dynamic(kernel, a, b, b_scale, b_zero_point, bias, serial: bool = False, residual=None, norm_scale=None,
                  norm_bias=None):
    """DynamicQuantizeMatMul on the micro-kernel as one Numba call (qpack.dq_matmul_small: range,
    parameters, quantize into the panels, product, epilogue) where the product is one shard (one
    thread, or little work), its constant arguments kept on the kernel while the same read-only arrays
    and KERNELKIT_INT8_GEMM come in; None where the micro-kernel does not take B, the work is cut into
    shards (unless ``serial``: the caller runs on one thread), or A holds a NaN or an infinity (the
    general path)."""
    env = qtile.requested()
    hit = kernel.__dict__.get("_small")
    few = math.prod(a.shape[:-1]) < qamx.ROWS  # batch 1: no AMX tile (tiled's ``rows``)
    if hit is None or hit[0] is not b or hit[1] is not b_scale or hit[2] is not b_zero_point or hit[3] is not bias \
            or hit[4] != env or hit[5] or hit[9] is not few:
        tile = tiled(kernel, b, b_zero_point, rows=1 if few else None)
        head = None
        if tile is not None and np.ndim(b_scale) <= 1:
            variant, pb = tile
            has_bias = bias is not None
            bias_arr = np.ascontiguousarray(bias, np.float32).reshape(-1) if has_bias else np.zeros(1, np.float32)
            head = (qtile.KIND[variant.name], variant.mr, pb.data, pb.kq, pb.n_panels, pb.n, pb.col_sums, pb.k,
                    pb.zp, pb.has_zp, np.ascontiguousarray(b_scale, np.float32).reshape(-1), bias_arr, has_bias)
        volatile = any(p is not None and p.flags.writeable for p in (b, b_scale, b_zero_point, bias))
        extra = (activation_code(kernel), column_bounds(kernel, head[5])) if head is not None else (0, None)
        hit = (b, b_scale, b_zero_point, bias, env, volatile, head, *extra, few)  # volatile: writable, every call
        kernel._small = hit
    head = hit[6]
    if head is None or (residual is not None and residual.shape != a.shape[:-1] + (head[5],)):
        return None
    x2 = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
    m_n, k_n, n_n = x2.shape[0], x2.shape[1], head[5]
    block = m_n if m_n <= GEMV_ROWS else qpack.block_rows(m_n, k_n, head[4] * qpack.NR, head[1])
    act, bounds = hit[7], hit[8]
    norm = NO_NORM if norm_scale is None else _norm_params(kernel, norm_scale, norm_bias, n_n)
    if norm is None:
        return None
    if not serial:
        threads = config.current_threads()
        if m_n > block and config.shard_count(-(-m_n // block), 2.0 * m_n * k_n * n_n) > 1:
            return None  # row blocks on the pool (tiled_dynamic)
        groups = -(-head[4] // qpack.GROUP_PANELS)
        if m_n <= GEMV_ROWS and threads > 1 and groups > 1 and 2.0 * m_n * k_n * n_n >= COLUMN_SHARD_OPS and \
                not norm[3] and act != qpack.ACT_SOFTMAX:  # a norm and a Softmax need whole rows
            return _column_shards(head, x2, bounds, act, min(groups, threads), groups, a.shape, residual)
    flat = np.empty(m_n * n_n, np.float32)
    if residual is None and not norm[3] and bounds.shape[0] == 2:  # the plain call: fewer arguments
        if not qpack.dq_matmul_plain(head[0], x2, *head[1:], flat, block, act):
            return None
        return flat.reshape(*a.shape[:-1], n_n)
    res = (NO_RESIDUAL, False) if residual is None else _residual(residual, x2)
    if not qpack.dq_matmul_small(head[0], x2, *head[1:], flat, bounds, *res, block, act, *norm):
        return None
    return column_parts(flat, bounds, a.shape)


def _bind_small(kernel, a, b, b_scale, b_zero_point, bias, residual, norm_scale, norm_bias, env_raw) -> None:
    """Keep on the kernel (``_plain``) the arguments of the serial call's one Numba call for A of
    ``a``'s shape, after a small_dynamic call made its constants: (0 A shape, 1-6 B, B scale, B zero
    point, bias, norm scale, norm bias, 7 no residual, 8 the raw KERNELKIT_INT8_GEMM, 9 A as 2-D,
    10 output size, 11 qpack.dq_matmul_bound's integer arguments (one output, no residual, no norm;
    else None), 12 the constant arrays, 13 the output shape, 14 dq_matmul_bound_small's integer
    arguments, 15 its (bounds, residual stand-in, norm scale, norm bias, epsilon), 16 the residual's
    shape, 17 it as 2-D, 18 [the call, the by_kind copy of qpack.dq_matmul_bound(_small) for the
    variant, whether the entry point is still to be looked up]: the copy, after its first call its
    compiled entry point (_entry), so that later calls skip the by_kind lookup and the dispatcher's
    typing of each argument), 19 the two halves on two cores (_pair, qpair.py) or None). The serial
    call checks them by identity and goes straight to one Numba call: ~1 us of Python instead of
    ~5-13 (small_dynamic's checks, the norm's and residual's conversions, 24 arguments to type). None
    where small_dynamic did not take the call (writable constants, which it re-reads every call)."""
    kernel._plain = None
    hit = kernel.__dict__.get("_small")
    if hit is None or hit[5] or hit[6] is None or hit[0] is not b or hit[1] is not b_scale \
            or hit[2] is not b_zero_point or hit[3] is not bias:
        return
    head, bounds = hit[6], hit[8]
    m_n, k_n, n_n = math.prod(a.shape[:-1]), a.shape[-1], head[5]
    norm = NO_NORM if norm_scale is None else _norm_params(kernel, norm_scale, norm_bias, n_n)
    if not m_n or not k_n or norm is None or any(x is not None and x.flags.writeable for x in (norm_scale, norm_bias)):
        return
    block = m_n if m_n <= GEMV_ROWS else qpack.block_rows(m_n, k_n, head[4] * qpack.NR, head[1])
    kind, mr, bdata, kq, n_panels, n, col_sums, k, zb, has_zb, b_scale_arr, bias_arr, has_bias = head
    ints = [kind, mr, kq, n_panels, n, k, has_zb, has_bias, block, hit[7]]
    plain = residual is None and not norm[3] and bounds.shape[0] == 2
    lead = tuple(a.shape[:-1])
    copy = by_kind.specialize(qpack.dq_matmul_bound if plain else qpack.dq_matmul_bound_small, kind)
    kernel._plain = (a.shape, b, b_scale, b_zero_point, bias, norm_scale, norm_bias, residual is None, env_raw,
                     (m_n, k_n), m_n * n_n, np.array(ints, np.int64) if plain else None,
                     (bdata, col_sums, zb, b_scale_arr, bias_arr), (*lead, n_n),
                     np.array([*ints, residual is not None, norm[3]], np.int64), (bounds, NO_RESIDUAL, *norm[:3]),
                     (*lead, n_n), (m_n, n_n), [copy, copy, True],
                     _pair(kernel, head, (m_n, k_n), hit[7], plain, (block, bounds, residual is not None, *norm)))


# Bound products in a session of two threads or more run as two halves, the calling thread's and a
# spinning helper's (qpair.py): few rows (batch 1: one output, no residual, no norm, no Softmax) as
# halves of B's column groups from PAIR_OPS integer operations, more rows as halves of A's row blocks
# (every epilogue: parts, residual, activation, norm) from PAIR_ROW_OPS (KERNELKIT_INT8_PAIR=few: the
# few-row products only; the Xeon's int8 transformer at two threads: 3.79-4.39 ms with the row halves
# against 5.44-6.23 without, alternating processes); inf: never. (The 2-core box:
# a 784 x 1024 half 6.6 us against 11.2 for the whole product on one thread; the Xeon: the batch-1
# MLP's run 0.067 ms in pairs against 0.096 on one thread, in one process.)
PAIR_OPS = float(1 << 20)
PAIR_ROW_OPS = float(1 << 22)


def _pair(kernel, head, x2_shape, act, plain: bool, rows: tuple):
    """[the helper, its descriptor, the descriptor's arrays, the pair call (its by_kind copy for the
    variant, then its entry point), whether the entry point is still to be looked up] of a bound
    product that runs as two halves (qpair.py) in this session, or None. ``rows``: (block rows, the
    column bounds, whether a residual comes, norm scale, norm bias, epsilon, whether a norm)."""
    m_n, k_n = x2_shape
    threads = kernel.threads if kernel.threads is not None else config.default_threads()
    ops = 2.0 * m_n * k_n * head[5]
    if threads < 2 or not qpair.enabled():
        return None
    if m_n <= GEMV_ROWS:  # B's column groups: one output, no Softmax (whole rows), not AMX
        if not plain or ops < PAIR_OPS or head[0] == qtile.KIND["amx"] or act == qpack.ACT_SOFTMAX:
            return None
        made = qpair.descriptor(head, x2_shape, act)
    else:
        if ops < PAIR_ROW_OPS or not qpair.rows_enabled():
            return None
        made = qpair.descriptor(head, x2_shape, act, rows)
    if made is None:
        return None
    helper = qpair.server(head[0])  # fpair's helper, the one for every pair
    if not qpair.prepare(head[0]):  # both sides compiled now (the node's first call), the helper started
        return None
    helper.wake()
    return [helper, made[0], made[1], by_kind.specialize(qpair.pair_run, head[0]), True, head[0]]


def _paired(pr, x2, flat, res) -> bool:
    """The product in two halves (qpair.py) where the helper spins (else it is woken, and False: the
    caller's one-thread call); False too where A holds a NaN or an infinity or the slot is taken."""
    helper = pr[0]
    if not helper.usable():
        helper.asleep()
        return False
    done = pr[3](helper.ctl, pr[1], x2, flat, res)
    if pr[4]:  # compiled now: its entry point from the next call on
        pr[3], pr[4] = _entry(pr[3], (helper.ctl, pr[1], x2, flat, res)), False
    if done == 1 or done == 2:
        helper.result(done, strict=True)  # qpair's stall rule (STALL_S), not fpair's slack for long halves
        return True
    return False


def _entry(dispatcher, args):
    """The compiled entry point of ``dispatcher`` (a by_kind copy) for the Numba types of ``args``
    (``CompileResult.entry_point``: the compiled function's own Python wrapper, which unboxes the
    arguments as that signature says without the dispatcher typing each one first: ~0.4 us of a
    batch-1 product's ~2 us call), or the dispatcher where it has none (NUMBA_DISABLE_JIT=1). The
    serial call passes it only arguments of those types: its own arrays, and A as a readonly
    C-contiguous 2-D float32 view (checked before each call)."""
    overloads = getattr(dispatcher, "overloads", None)
    if not overloads:
        return dispatcher
    import numba

    try:
        cres = overloads.get(tuple(numba.typeof(x) for x in args))
    except ValueError:  # (a type numba.typeof does not know: never, for these arguments)
        return dispatcher
    entry = getattr(cres, "entry_point", None)
    return dispatcher if entry is None else entry


def _column_shards(head, x2, bounds, act, count, groups, a_shape, residual):
    """small_dynamic's product for one row block (a few rows) cut into ``count`` shards of B's
    column groups on the pool (qpack.dq_matmul_panels; each shard quantizes the few rows of A
    itself); None when A holds a NaN or an infinity."""
    flat = np.empty(x2.shape[0] * head[5], np.float32)
    ok = np.ones(1, np.bool_)
    args = (head[0], x2, *head[1:], flat, bounds, *_residual(residual, x2), act, ok)
    config.run_shards(lambda i: qpack.dq_matmul_panels(*args, i * groups // count, (i + 1) * groups // count), count)
    return column_parts(flat, bounds, a_shape) if ok[0] else None


def few_rows(a_shape, b) -> bool:
    """Whether A @ B runs as integer dot products (gemv_product) rather than on BLAS."""
    return b.ndim == 2 and math.prod(a_shape) <= GEMV_ROWS * a_shape[-1]


def float_epilogue(kernel, mult, bias):
    """``finish`` for integer_product: float32(int32 result) * mult [+ bias] (MatMulIntegerToFloat's steps)."""
    has_bias = bias is not None
    bias_arr = derived(kernel, (bias,), lambda: np.ascontiguousarray(bias, np.float32).reshape(-1) if has_bias
                       else np.zeros(1, np.float32))

    def finish(y, acc, has_acc, shape):
        out = np.empty(y.shape, np.float32)
        to_float(y, acc, has_acc, mult, bias_arr, has_bias, out)
        return out.reshape(shape)

    return finish


def gemv_finish(kernel, a, a_zero_point, b, b_zero_point, finish, trans_b: bool = False):
    """few_rows products: integer dot products on the raw operands, then ``finish``; B is ``b``, or
    ``b.T`` with ``trans_b`` (QGemm's transB)."""
    w = derived_weight(kernel, b, lambda: GemvWeights(b.T if trans_b else b))
    y = gemv_product(a, a_zero_point, w, b_zero_point)
    return finish(y.reshape(-1, y.shape[-1]), NO_ACC, False, y.shape)


def tiled(kernel, b, b_zero_point, trans_b: bool = False, rows=None):
    """(variant, PackedB) when an int8 micro-kernel (qtile.py) takes the product with constant 2-D B
    (``b.T`` with ``trans_b``), else None (the float32-BLAS path): KERNELKIT_INT8_GEMM=off, or avx2
    only on a CPU without VNNI with weights whose pairs could saturate. ``rows``: A's row count where
    the caller knows it: fewer than one AMX tile's (qamx.ROWS) keep vnni512 on the unpadded panels."""
    if b.ndim != 2 or qtile.requested() == "off":
        return None
    pb = qpack.packed_b(kernel, lambda: b if trans_b else b.T, b, b_zero_point)
    variant = qtile.select(pb.safe_pairs)
    if variant is None:
        return None
    if rows is not None and rows < qamx.ROWS:  # the AMX driver runs such rows on vnni512's few-row tiles
        return variant, pb  # anyway, over B padded to 64-byte K steps (+6% of bytes at K = 784)
    return qamx.upgrade(variant, pb)  # AMX tiles where the CPU has them


def _zp(zero_point) -> int:
    return 0 if zero_point is None else int(np.asarray(zero_point).reshape(()))


def _terms(kernel, pb, a2, a_zero_point, bias=None):
    return qpack.column_terms(kernel, pb, _zp(a_zero_point) + qpack.flip_of(a2.dtype)[1], bias)


def tiled_int32(kernel, tile, a, a_zero_point):
    """MatMulInteger on the micro-kernel: int32 (A - a_zp) @ (B - b_zp), one Numba call a shard."""
    variant, pb = tile
    a2 = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
    out = np.empty((a2.shape[0], pb.n), np.int32)
    args = (_terms(kernel, pb, a2, a_zero_point), pb.zp, pb.has_zp, out)
    qpack.run_blocks(qpack.int32_blocks, variant, pb, a2, args)
    return out.reshape(*a.shape[:-1], pb.n)


def tiled_float(kernel, tile, a, a_zero_point, mult, bias):
    """float32(int32 product) * mult [+ bias] (MatMulIntegerToFloat's steps) on the micro-kernel."""
    variant, pb = tile
    a2 = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
    out = np.empty((a2.shape[0], pb.n), np.float32)
    has_bias = bias is not None
    bias_arr = derived(kernel, (bias,), lambda: np.ascontiguousarray(bias, np.float32).reshape(-1) if has_bias
                       else np.zeros(1, np.float32))
    args = (_terms(kernel, pb, a2, a_zero_point), pb.zp, pb.has_zp, mult, mult.shape[0] > 1, bias_arr, has_bias, out)
    qpack.run_blocks(qpack.float_blocks, variant, pb, a2, args)
    return out.reshape(*a.shape[:-1], pb.n)


def tiled_requantized(kernel, tile, a, a_zero_point, mult, bias, y_zero_point, bounds):
    """The requantize epilogue (bias per column folded into the column terms) on the micro-kernel."""
    variant, pb = tile
    a2 = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
    zp = np.asarray(y_zero_point)
    out = np.empty((a2.shape[0], pb.n), zp.dtype)
    mult = np.ascontiguousarray(mult, np.float32).reshape(-1)
    args = (_terms(kernel, pb, a2, a_zero_point, bias), pb.zp, pb.has_zp, mult, mult.shape[0] > 1,
            np.float32(zp.reshape(())), np.float32(bounds[0]), np.float32(bounds[1]), out)
    qpack.run_blocks(qpack.requant_blocks, variant, pb, a2, args)
    return out.reshape(*a.shape[:-1], pb.n)


def tiled_dynamic(kernel, tile, x2, a_scale, a_zp, mult, bias, bounds, res, act, norm):
    """DynamicQuantizeMatMul on the micro-kernel, one Numba call per shard of row blocks
    (qpack.dq_matmul_rows): quantize into the panels, product, float32 epilogue into the column
    parts ``bounds`` laid one after the other in the flat result (column_parts)."""
    variant, pb = tile
    m_n = x2.shape[0]
    out = np.empty(m_n * pb.n, np.float32)
    has_bias = bias is not None
    bias_arr = derived(kernel, (bias,), lambda: np.ascontiguousarray(bias, np.float32).reshape(-1) if has_bias
                       else np.zeros(1, np.float32))
    block = qpack.block_rows(m_n, pb.k, pb.n_panels * pb.nr, variant.mr)
    blocks = -(-m_n // block)
    args = (qtile.KIND[variant.name], x2, np.float32(a_scale), np.uint8(a_zp), variant.mr, pb.data, pb.kq,
            pb.n_panels, pb.n, pb.col_sums, pb.k, pb.zp, pb.has_zp, mult, mult.shape[0] > 1, bias_arr, has_bias, out,
            bounds, *res, act, *norm, block)
    config.parallel_for(qpack.dq_matmul_rows, blocks, args, 2.0 * m_n * pb.k * pb.n)
    return out



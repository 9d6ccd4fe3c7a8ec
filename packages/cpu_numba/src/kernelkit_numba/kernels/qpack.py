"""Operands of the int8 micro-kernels (qtile.py): constant weights packed once into B panels, the
activations packed per call into A panels (one pass from the raw int8/uint8 input, im2col included
for convolutions), and the epilogues that take the zero points out and requantize, scale or copy
the int32 block into the output.

The micro-kernel multiplies uint8 A by int8 B. int8 activations become uint8 by flipping the sign bit
(``a + 128``, zero point + 128), uint8 weights become int8 the same way (``b - 128``); the products
of the offsets are unchanged. With S = sum_k A'[m, k] * B'[k, n] (the micro-kernel's result):

    sum_k (A'[m, k] - za) * (B'[k, n] - zb[n]) = S - za * colsum(B')[n] - zb[n] * rowsum(A')[m] + K * za * zb[n]

(all wrapping in int32 as the accumulator does). The column terms and a bias fold into one int32 per
column (``column_terms``); the row term is computed only when some zb is nonzero.
"""
from __future__ import annotations

import numpy as np

from .. import config
from ..by_kind import by_kind, kind_taking
from ..config import jit, jit_exact
from . import norm as _norm
from . import qtile, unary
from . import softmax as _softmax

U = np.uint64  # unsigned index: no wraparound check in inner loops
BLOCK_BYTES = 192 * 1024  # rows of A per block: the packed block stays in L2 while B's panels pass
C_BLOCK_BYTES = 64 * 1024  # and the block's int32 result stays in L1/L2 for the epilogue


class PackedB:
    """B (K, N) as int8 panels of ``nr`` columns: ``bt`` is B transposed, (N, K) (a conv weight
    (M, C*kh*kw) as it is; a MatMul's B.T), int8 or uint8, ``zp`` one zero point or one per column."""

    def __init__(self, bt: np.ndarray, zp, nr: int):
        bt = np.asarray(bt)
        n, k = bt.shape
        z = np.zeros(1, np.int32) if zp is None else np.asarray(zp).astype(np.int32).reshape(-1)
        if bt.dtype == np.uint8:
            s8 = (bt.astype(np.int16) - 128).astype(np.int8)
            z = z - 128
        else:
            s8 = bt.astype(np.int8, copy=False)
        self.n, self.k, self.nr = n, k, nr
        self.kq = -(-k // 4)
        self.n_panels = -(-n // nr)
        padded = np.zeros((self.n_panels * nr, self.kq * 4), np.int8)
        padded[:n, :k] = s8
        panels = padded.reshape(self.n_panels, nr, self.kq, 4).transpose(0, 2, 1, 3)
        self.data = np.ascontiguousarray(panels).reshape(-1)
        wide = s8.astype(np.int32)
        self.col_sums = wide.sum(axis=1, dtype=np.int64).astype(np.int32)
        self.zp = np.ascontiguousarray(np.broadcast_to(z, (n,)), np.int32)
        self.has_zp = bool(np.any(self.zp))
        pairs = np.abs(padded.astype(np.int32)).reshape(-1, 2).sum(axis=1)
        self.safe_pairs = bool(pairs.max(initial=0) <= qtile.AVX2_PAIR_LIMIT)

    def column_terms(self, za: int, bias=None) -> np.ndarray:
        """int32 per column: - za * colsum + K * za * zb [+ bias], wrapping as int32."""
        v = -np.int64(za) * self.col_sums.astype(np.int64) + np.int64(self.k) * za * self.zp.astype(np.int64)
        if bias is not None:
            v = v + np.asarray(bias).astype(np.int64).reshape(-1)
        return ((v + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


NR = 16  # every variant's panel width (qtile.VARIANTS), so one packing serves whichever runs


def packed_b(kernel, bt_of, w_ref, zp, nr: int = NR) -> PackedB:
    """``PackedB(bt_of(), zp, nr)`` of a constant weight, kept on ``kernel`` while the same read-only
    ``w_ref`` and ``zp`` come in (a writable caller array is packed every call)."""
    cache = kernel.__dict__.setdefault("_packed_b", {})
    hit = cache.get(nr)
    if hit is None or hit[0] is not w_ref or hit[1] is not zp or w_ref.flags.writeable:
        hit = cache[nr] = (w_ref, zp, PackedB(bt_of(), zp, nr))
    return hit[2]


def column_terms(kernel, pb: PackedB, za: int, bias=None) -> np.ndarray:
    """pb.column_terms(za, bias), kept on ``kernel`` while the packing, za and the bias array stay."""
    hit = kernel.__dict__.get("_column_terms")
    if hit is None or hit[0] is not pb or hit[1] != za or hit[2] is not bias:
        hit = (pb, za, bias, pb.column_terms(za, bias))
        kernel._column_terms = hit
    return hit[3]


# -------------------------------------------------------------------------------------- A packing
@jit
def pack_rows(a, r0, r1, flip, mr, kq, out, rowsum):
    """Rows [r0, r1) of 2-D int8/uint8 ``a`` into A panels (full panels of mr rows, then one-row
    panels) as uint8 (``flip``: int8 + 128), K padded with 0 to 4 * kq; rowsum[r - r0] their sums."""
    k_n = a.shape[1]
    rows = r1 - r0
    full = rows // mr
    fl = np.int32(128 if flip else 0)
    for r in range(rows):
        p = r // mr
        if p < full:
            base, step = p * kq * mr * 4 + (r - p * mr) * 4, mr * 4
        else:
            base, step = full * mr * kq * 4 + (r - full * mr) * kq * 4, 4
        src = a[r0 + r]
        s = np.int32(0)
        for q in range(kq):
            d = base + q * step
            for t in range(4):
                k = q * 4 + t
                v = np.int32(np.uint8(np.int32(src[k]) + fl)) if k < k_n else np.int32(0)
                out[d + t] = np.uint8(v)
                s += v
        rowsum[r] = s


@jit
def pack_words(a32, r0, r1, mask, mr, kq, out32):
    """pack_rows for K a multiple of 4, 4 bytes a step: ``a32`` is A viewed as uint32 (M, K / 4),
    ``mask`` 0x80808080 flips int8 to uint8 (0: uint8 as is); no row sums (callers that need them
    compute them apart)."""
    rows = r1 - r0
    full = rows // mr
    for p in range(full):
        base = p * kq * mr
        for r in range(mr):
            src = a32[r0 + p * mr + r]
            for q in range(kq):
                out32[base + q * mr + r] = src[q] ^ mask
    tail = full * mr * kq
    for r in range(full * mr, rows):
        src = a32[r0 + r]
        d = tail + (r - full * mr) * kq
        for q in range(kq):
            out32[d + q] = src[q] ^ mask


# ---------------------------------------------------------------------------------------- epilogues
@jit
def requantize_rows(c, ldc, rows, n_n, terms, zb, rowsum, has_zb, mult, per_col, zp, lo, hi, out, r0):
    """out[r0 + r, n] = clamp(rint(float32(S + terms[n] - zb[n] * rowsum[r]) * mult[n or 0]) + zp),
    through a float32 row (a loop with the int8 store stays scalar), the branches out of the loops."""
    buf = np.empty(n_n, np.float32)
    for r in range(rows):
        dst = out[r0 + r]
        src = c[r * ldc:r * ldc + n_n]
        rs = np.int32(rowsum[r] if has_zb else 0)
        if per_col:
            for n in range(n_n):
                v = np.int32(src[n] + terms[n] - zb[n] * rs)
                buf[n] = min(max(np.float32(np.rint(np.float32(v) * mult[n])) + zp, lo), hi)
        else:
            m = mult[0]
            for n in range(n_n):
                v = np.int32(src[n] + terms[n] - zb[n] * rs)
                buf[n] = min(max(np.float32(np.rint(np.float32(v) * m)) + zp, lo), hi)
        for n in range(n_n):
            dst[n] = buf[n]


@jit
def to_int32_rows(c, ldc, rows, n_n, terms, zb, rowsum, has_zb, out, r0):
    """out[r0 + r, n] = S + terms[n] - zb[n] * rowsum[r] (int32: MatMulInteger)."""
    for r in range(rows):
        dst = out[r0 + r]
        src = c[r * ldc:r * ldc + n_n]
        if has_zb:
            rs = np.int32(rowsum[r])
            for n in range(n_n):
                dst[n] = np.int32(src[n] + terms[n] - zb[n] * rs)
        else:
            for n in range(n_n):
                dst[n] = np.int32(src[n] + terms[n])


@jit_exact
def to_float_rows(c, ldc, rows, n_n, terms, zb, rowsum, has_zb, mult, per_col, bias, has_bias, out, r0):
    """out[r0 + r, n] = float32(int32 product) * mult[n or 0] [+ bias[n]], rounded as Cast -> Mul ->
    Add (no FMA contraction: bit-identical to op by op, as qgemm.to_float). The branches stay out
    of the inner loops (one loop per case), so they vectorise."""
    for r in range(rows):
        dst = out[r0 + r]
        src = c[r * ldc:r * ldc + n_n]
        if has_zb:
            rs = rowsum[r]
            for n in range(n_n):
                f = np.float32(np.int32(src[n] + terms[n] - zb[n] * rs)) * mult[n if per_col else 0]
                dst[n] = f + bias[n] if has_bias else f
        elif per_col and has_bias:
            for n in range(n_n):
                dst[n] = np.float32(np.int32(src[n] + terms[n])) * mult[n] + bias[n]
        elif per_col:
            for n in range(n_n):
                dst[n] = np.float32(np.int32(src[n] + terms[n])) * mult[n]
        elif has_bias:
            m = mult[0]
            for n in range(n_n):
                dst[n] = np.float32(np.int32(src[n] + terms[n])) * m + bias[n]
        else:
            m = mult[0]
            for n in range(n_n):
                dst[n] = np.float32(np.int32(src[n] + terms[n])) * m


# ------------------------------------------------------------------- DynamicQuantizeMatMul, fused
@jit
def pack_quantized(x2, r0, r1, scale, zp, mr, kq, out32, row, rowsum):
    """Rows [r0, r1) of float32 ``x2`` quantized as DynamicQuantizeLinear does (clamp(rint(x /
    scale) + zp, 0, 255), the float32 steps of quantize._quantize) into uint8 A panels: each row
    into ``row`` (4 kq bytes, K padded with 0), then 4 bytes at a time into the panels (``out32``:
    the panel buffer as uint32); rowsum[r] the row's byte sum."""
    k_n = x2.shape[1]
    rows = r1 - r0
    full = rows // mr
    row32 = row.view(np.uint32)
    zf = np.float32(zp)
    for r in range(rows):
        src = x2[r0 + r]
        s = np.int32(0)
        for k in range(k_n):
            v = np.float32(np.rint(src[k] / scale)) + zf
            b = np.uint8(min(max(v, np.float32(0)), np.float32(255)))
            row[k] = b
            s += np.int32(b)
        for k in range(k_n, kq * 4):
            row[k] = 0
        rowsum[r] = s
        p = r // mr
        if p < full:
            base, step = p * kq * mr + (r - p * mr), mr
        else:
            base, step = full * mr * kq + (r - full * mr) * kq, 1
        for q in range(kq):
            out32[base + q * step] = row32[q]


@jit_exact
def to_float_parts(cbuf, ldc, rows, terms, zb, rowsum, has_zb, mult, per_col, bias, has_bias, flat, bounds, res,
                   has_res, act, nscale, nbias, eps, has_norm, m_n, r0):
    """to_float_rows for each part p of the columns, [bounds[p], bounds[p + 1]), into its own
    C-contiguous (m_n, width) array laid one after the other in ``flat`` (one part: the whole
    (m_n, N) output; several: a merged DynamicQuantizeMatMul's outputs, its ``split`` attribute),
    then + res[row, col] (``has_res``: a residual Add fused by fuse_dynamic_add; res (m_n, N)
    float32, its own rounding after the epilogue's, as the Add node's), then the fused activation
    (``act``: ACT_RELU, ACT_GELU; the Relu and Gelu kernels' own loops) on the rows, still in cache.
    ``has_norm`` (one part, no activation; fuse_dynamic_norm): the rows go to a scratch block and
    the LayerNormalization kernel's row loop (norm._layer_norm: ``nscale``, ``nbias``, ``eps``
    over the last axis) writes them normalized into the output."""
    if has_norm:
        n_n = bounds[1]
        tmp = np.empty((rows, n_n), np.float32)
        to_float_rows(cbuf, ldc, rows, n_n, terms, zb, rowsum, has_zb, mult, per_col, bias, has_bias, tmp, 0)
        if has_res:
            for r in range(rows):
                add_row(tmp[r], res[r0 + r])
        dst = flat[:m_n * n_n].reshape((m_n, n_n))
        stats = np.empty(2 * rows, np.float32)
        _norm_rows(tmp, nscale, nbias, eps, dst[r0:r0 + rows], stats[:rows], stats[rows:], 0, rows)
        return
    for p in range(bounds.shape[0] - 1):
        c0, c1 = bounds[p], bounds[p + 1]
        if c1 <= c0:
            continue
        dst = flat[m_n * c0:m_n * c1].reshape((m_n, c1 - c0))
        to_float_rows(cbuf[c0:], ldc, rows, c1 - c0, terms[c0:c1], zb[c0:c1], rowsum, has_zb,
                      mult[c0:c1] if per_col else mult[0:1], per_col, bias[c0:c1] if has_bias else bias[0:1],
                      has_bias, dst, r0)
        if has_res:
            for r in range(r0, r0 + rows):
                add_row(dst[r], res[r][c0:c1])
        if act == ACT_SOFTMAX:  # whole rows (one part: the fused Softmax goes without split)
            softmax_rows(dst[r0:r0 + rows])
        elif act != ACT_NONE:
            activate(dst[r0:r0 + rows].reshape(-1), act)


_norm_rows = _norm._layer_norm  # the LayerNormalization kernel's row loop
# DynamicQuantizeMatMul's fused activation (attribute ``activation``)
ACT_NONE, ACT_RELU, ACT_GELU, ACT_SOFTMAX = 0, 1, 2, 3
_GELU_INPLACE = unary._loop_inplace(unary.GELU)  # the Gelu node's in-place loop (approximate="none")


@jit
def activate(y, act):
    """The fused activation in place on the C-contiguous float32 ``y``: Relu as relu_flat (the Relu
    kernel's max), Gelu by the Gelu kernel's own loop, so that the fused node equals the pair."""
    if act == ACT_RELU:
        relu_flat(y)
    elif act == ACT_GELU:
        _GELU_INPLACE(y, np.float32(0), np.float32(0), 0, y.shape[0])


@jit
def softmax_rows(y):
    """The Softmax kernel's steps over each row of the C-contiguous 2-D float32 ``y``, in place
    (softmax._rows_small after its copy: exp_rows, then _scale_rows), so that a DynamicQuantizeMatMul
    with a fused Softmax equals the pair bit for bit."""
    sums = np.empty(y.shape[0])
    _softmax.exp_rows(y, np.float32(1), sums, np.empty(y.shape[1], np.int32))
    _softmax._scale_rows(y, sums)


@jit_exact
def add_row(dst, src):
    """dst += src (float32, one rounding: the Add node's)."""
    for n in range(dst.shape[0]):
        dst[n] = dst[n] + src[n]


@jit_exact
def dq_matmul_rows(kind, x2, scale, zp, mr, bdata, kq, n_panels, n_n, col_sums, k_n, zb, has_zb, mult, per_col,
                   bias, has_bias, flat, bounds, res, has_res, act, nscale, nbias, eps, has_norm, block, b_lo, b_hi):
    """Row blocks [b_lo, b_hi) (``block`` rows each) of DynamicQuantizeMatMul on the A-panel
    micro-kernel (qtile.gemm_kind): the rows quantized straight into the panels (pack_quantized),
    the int32 block, then to_float_rows' epilogue (Cast -> Mul -> Add, no FMA contraction) into the
    column parts of ``flat`` (to_float_parts). The column terms of this run's zero point
    (PackedB.column_terms) are computed here, wrapping in int32."""
    m_n = x2.shape[0]
    za = np.int64(zp)
    terms = np.empty(n_n, np.int32)
    for n in range(n_n):
        terms[n] = np.int32(-za * np.int64(col_sums[n]) + np.int64(k_n) * za * np.int64(zb[n]))
    ldc = n_panels * 16
    abuf = np.empty(block * kq * 4, np.uint8)
    cbuf = np.empty(block * ldc, np.int32)
    row = np.empty(kq * 4, np.uint8)
    rowsum = np.empty(block, np.int32)
    a32 = abuf.view(np.uint32)
    for b in range(b_lo, b_hi):
        r0 = b * block
        r1 = min(m_n, r0 + block)
        pack_quantized(x2, r0, r1, scale, zp, mr, kq, a32, row, rowsum)
        qtile.gemm_kind(kind, abuf, bdata, kq, n_panels, cbuf, ldc, r1 - r0)
        to_float_parts(cbuf, ldc, r1 - r0, terms, zb, rowsum, has_zb, mult, per_col, bias, has_bias, flat, bounds,
                       res, has_res, act, nscale, nbias, eps, has_norm, m_n, r0)


INF_KEY = 0x7F800000  # float_range's key of +inf; of -inf:
NINF_KEY = -0x7F800001


@jit
def float_range(xi):
    """(finite, lo, hi): the min and max of the float32 values whose int32 bits are the 2-D ``xi``,
    with 0 in the range (as DynamicQuantizeLinear's), as float32. Compared as sortable integer keys
    (``b ^ ((b >> 31) & 0x7fffffff)`` orders the floats as their values, -0 below +0, NaNs beyond
    the infinities): one vectorised integer pass, where a float min/max that must let NaN through
    stays a scalar chain. ``finite`` is False when a NaN or an infinity is among them."""
    lo = np.int32(0)
    hi = np.int32(0)
    for r in range(xi.shape[0]):
        src = xi[r]
        for k in range(xi.shape[1]):
            b = src[k]
            key = np.int32(b ^ ((b >> 31) & 0x7FFFFFFF))
            lo = min(lo, key)
            hi = max(hi, key)
    bits = np.empty(2, np.int32)
    bits[0] = np.int32(lo ^ ((lo >> 31) & 0x7FFFFFFF))
    bits[1] = np.int32(hi ^ ((hi >> 31) & 0x7FFFFFFF))
    f = bits.view(np.float32)
    return NINF_KEY < lo and hi < INF_KEY, f[0], f[1]


@jit
def relu_flat(y):
    """y[i] = max(y[i], 0) over a C-contiguous float32 array: the numba Relu kernel's expression (a
    DynamicQuantizeMatMul with a fused Relu equals the unfused pair bit for bit)."""
    flat = y.reshape(-1)
    zero = np.float32(0)
    for i in range(flat.shape[0]):
        flat[i] = max(flat[i], zero)


@jit
def dq_params(x2, b_scale, mult):
    """(finite, scale, zero point) of DynamicQuantizeLinear over the C-contiguous float32 ``x2``
    (float_range; the float32 steps of kernelkit.ops.quantize.dynamic_params) and ``mult[n] =
    scale * b_scale[n]`` (the Mul node's float32 product); finite False (the rest unset) when x2
    holds a NaN or an infinity."""
    finite, lo, hi = float_range(x2.view(np.int32))
    if not finite:
        return False, np.float32(1), np.uint8(0)
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zf = np.float32(np.float32(0) - lo / scale)
    zf = np.float32(np.rint(min(max(zf, np.float32(0)), np.float32(255))))
    for n in range(b_scale.shape[0]):
        mult[n] = scale * b_scale[n]
    return True, scale, np.uint8(zf)


GROUP_PANELS = 8  # column shards of dq_matmul_panels: 8 panels (128 columns, the 1 x 128 wide tile) a group


@jit_exact
def dq_matmul_panels(kind, x2, mr, bdata, kq, n_panels, n_n, col_sums, k_n, zb, has_zb, b_scale, bias, has_bias,
                     flat, bounds, res, has_res, act, ok, g_lo, g_hi):
    """Column groups [g_lo, g_hi) (GROUP_PANELS B panels each) of DynamicQuantizeMatMul for a few
    rows of A (one row block: batch 1 at two threads, each shard a group range): A's range and
    parameters (dq_params) and its quantized panels are computed by every shard (a few hundred
    values: cheaper than a second parallel region), then this shard's panels' product and
    epilogue (to_float_rows, the same float32 steps as dq_matmul_rows), residual and activation.
    ``ok[0]`` is set False, computing nothing, when A holds a NaN or an infinity."""
    m_n = x2.shape[0]
    mult = np.empty(b_scale.shape[0], np.float32)
    finite, scale, zp = dq_params(x2, b_scale, mult)
    if not finite:
        ok[0] = False
        return
    per_col = b_scale.shape[0] > 1
    p0 = g_lo * GROUP_PANELS
    p1 = min(n_panels, g_hi * GROUP_PANELS)
    c0 = p0 * 16
    c1 = min(n_n, p1 * 16)
    if c1 <= c0:
        return
    za = np.int64(zp)
    terms = np.empty(c1 - c0, np.int32)
    for n in range(c0, c1):
        terms[n - c0] = np.int32(-za * np.int64(col_sums[n]) + np.int64(k_n) * za * np.int64(zb[n]))
    abuf = np.empty(m_n * kq * 4, np.uint8)
    row = np.empty(kq * 4, np.uint8)
    rowsum = np.empty(m_n, np.int32)
    pack_quantized(x2, 0, m_n, scale, zp, mr, kq, abuf.view(np.uint32), row, rowsum)
    ldc = (p1 - p0) * 16
    cbuf = np.empty(m_n * ldc, np.int32)
    qtile.gemm_kind(kind, abuf, bdata[p0 * kq * 64:], kq, p1 - p0, cbuf, ldc, m_n)
    for p in range(bounds.shape[0] - 1):  # each output part's share of [c0, c1)
        lo, hi = max(c0, bounds[p]), min(c1, bounds[p + 1])
        if hi <= lo:
            continue
        width = bounds[p + 1] - bounds[p]
        mu = mult[lo:hi] if per_col else mult[0:1]
        bs = bias[lo:hi] if has_bias else bias[0:1]
        for r in range(m_n):
            at = m_n * bounds[p] + r * width + lo - bounds[p]
            dst = flat[at:at + hi - lo].reshape((1, hi - lo))
            to_float_rows(cbuf[r * ldc + lo - c0:], ldc, 1, hi - lo, terms[lo - c0:], zb[lo:hi], rowsum[r:r + 1],
                          has_zb, mu, per_col, bs, has_bias, dst, 0)
            if has_res:
                add_row(dst[0], res[r][lo:hi])
            if act != ACT_NONE:
                activate(dst.reshape(-1), act)


@jit_exact
def dq_matmul_small(kind, x2, mr, bdata, kq, n_panels, n_n, col_sums, k_n, zb, has_zb, b_scale, bias, has_bias,
                    flat, bounds, res, has_res, block, act, nscale, nbias, eps, has_norm) -> bool:
    """DynamicQuantizeMatMul in one call (at one thread; batch 1 above all): A's range
    (float_range), its scale and zero point in float32 as kernelkit.ops.quantize.dynamic_params
    computes them, ``mult = a_scale * b_scale`` (the Mul node's float32 product), then
    dq_matmul_rows over all row blocks of ``block`` rows (x2 C-contiguous; the fused activation
    ``act`` in its epilogue). Returns
    False, computing nothing, when A holds a NaN or an infinity (the caller's general path keeps
    NumPy's handling of those)."""
    m_n = x2.shape[0]
    mult = np.empty(b_scale.shape[0], np.float32)
    finite, scale, zp = dq_params(x2, b_scale, mult)
    if not finite:
        return False
    per_col = b_scale.shape[0] > 1
    dq_matmul_rows(kind, x2, scale, zp, mr, bdata, kq, n_panels, n_n, col_sums, k_n, zb, has_zb, mult, per_col,
                   bias, has_bias, flat, bounds, res, has_res, act, nscale, nbias, eps, has_norm, block, 0,
                   (m_n + block - 1) // block)
    return True


@jit_exact
def dq_matmul_plain(kind, x2, mr, bdata, kq, n_panels, n_n, col_sums, k_n, zb, has_zb, b_scale, bias, has_bias,
                    flat, block, act) -> bool:
    """dq_matmul_small with one output, no residual and no norm: its stand-in arguments made here,
    so that the call from Python passes 17 arguments, not 24 (Numba's dispatcher types each one:
    ~0.3 us apiece, a batch-1 MLP layer's call is ~10 us)."""
    bounds = np.empty(2, np.int64)
    bounds[0] = 0
    bounds[1] = n_n
    res = np.zeros((1, 1), np.float32)
    none = np.zeros(1, np.float32)
    return dq_matmul_small(kind, x2, mr, bdata, kq, n_panels, n_n, col_sums, k_n, zb, has_zb, b_scale, bias,
                           has_bias, flat, bounds, res, False, block, act, none, none, 0.0, False)


@jit_exact
def dq_matmul_bound(kind, dims, x2, bdata, col_sums, zb, b_scale, bias, flat) -> bool:
    """dq_matmul_plain with its integer arguments in one int64 array ``dims`` (kind again, mr, kq,
    n_panels, n_n, k_n, has_zb, has_bias, block, act): the serial call of a bound
    DynamicQuantizeMatMul (qgemm._bind_small) passes 9 arguments, not 17 (Numba's dispatcher types
    each one). ``kind`` comes first, so that by_kind compiles only that variant."""
    return dq_matmul_plain(kind, x2, dims[1], bdata, dims[2], dims[3], dims[4], col_sums, dims[5], zb,
                           dims[6] != 0, b_scale, bias, dims[7] != 0, flat, dims[8], dims[9])


@jit_exact
def dq_matmul_bound_small(kind, dims, x2, bdata, col_sums, zb, b_scale, bias, flat, bounds, res, nscale, nbias,
                          eps) -> bool:
    """dq_matmul_small with its integer arguments in one int64 array ``dims`` (dq_matmul_bound's, then
    has_res, has_norm): the bound serial call of a DynamicQuantizeMatMul with several outputs, a fused
    residual or a fused norm (qgemm._bind_small) passes 13 arguments, not 24."""
    return dq_matmul_small(kind, x2, dims[1], bdata, dims[2], dims[3], dims[4], col_sums, dims[5], zb,
                           dims[6] != 0, b_scale, bias, dims[7] != 0, flat, bounds, res, dims[10] != 0, dims[8],
                           dims[9], nscale, nbias, eps, dims[11] != 0)


# --------------------------------------------------------- matrix products: one Numba call a shard
@jit
def _pack_any(a2, a32, words, mask, flip, r0, r1, mr, kq, abuf, rowsum):
    if words:
        pack_words(a32, r0, r1, mask, mr, kq, abuf.view(np.uint32))
    else:
        pack_rows(a2, r0, r1, flip, mr, kq, abuf, rowsum)


@jit
def int32_blocks(kind, a2, a32, words, mask, flip, mr, bdata, kq, n_panels, n_n, terms, zb, has_zb, out, block,
                 b_lo, b_hi):
    """Row blocks [b_lo, b_hi) of an A-panel product into int32 ``out`` (MatMulInteger): pack A's rows
    (4 bytes a step when ``words``), the micro-kernel, to_int32_rows."""
    m_n = a2.shape[0]
    ldc = n_panels * 16
    abuf = np.empty(block * kq * 4, np.uint8)
    cbuf = np.empty(block * ldc, np.int32)
    rowsum = np.zeros(block, np.int32)
    for b in range(b_lo, b_hi):
        r0, r1 = b * block, min(m_n, (b + 1) * block)
        _pack_any(a2, a32, words, mask, flip, r0, r1, mr, kq, abuf, rowsum)
        qtile.gemm_kind(kind, abuf, bdata, kq, n_panels, cbuf, ldc, r1 - r0)
        to_int32_rows(cbuf, ldc, r1 - r0, n_n, terms, zb, rowsum, has_zb, out, r0)


@jit_exact
def float_blocks(kind, a2, a32, words, mask, flip, mr, bdata, kq, n_panels, n_n, terms, zb, has_zb, mult, per_col,
                 bias, has_bias, out, block, b_lo, b_hi):
    """int32_blocks with to_float_rows' epilogue (MatMulIntegerToFloat)."""
    m_n = a2.shape[0]
    ldc = n_panels * 16
    abuf = np.empty(block * kq * 4, np.uint8)
    cbuf = np.empty(block * ldc, np.int32)
    rowsum = np.zeros(block, np.int32)
    for b in range(b_lo, b_hi):
        r0, r1 = b * block, min(m_n, (b + 1) * block)
        _pack_any(a2, a32, words, mask, flip, r0, r1, mr, kq, abuf, rowsum)
        qtile.gemm_kind(kind, abuf, bdata, kq, n_panels, cbuf, ldc, r1 - r0)
        to_float_rows(cbuf, ldc, r1 - r0, n_n, terms, zb, rowsum, has_zb, mult, per_col, bias, has_bias, out, r0)


@jit
def requant_blocks(kind, a2, a32, words, mask, flip, mr, bdata, kq, n_panels, n_n, terms, zb, has_zb, mult, per_col,
                   zp, lo, hi, out, block, b_lo, b_hi):
    """int32_blocks with requantize_rows' epilogue (QLinearMatMul, QGemm)."""
    m_n = a2.shape[0]
    ldc = n_panels * 16
    abuf = np.empty(block * kq * 4, np.uint8)
    cbuf = np.empty(block * ldc, np.int32)
    rowsum = np.zeros(block, np.int32)
    for b in range(b_lo, b_hi):
        r0, r1 = b * block, min(m_n, (b + 1) * block)
        _pack_any(a2, a32, words, mask, flip, r0, r1, mr, kq, abuf, rowsum)
        qtile.gemm_kind(kind, abuf, bdata, kq, n_panels, cbuf, ldc, r1 - r0)
        requantize_rows(cbuf, ldc, r1 - r0, n_n, terms, zb, rowsum, has_zb, mult, per_col, zp, lo, hi, out, r0)


def a_operand(variant, a2: np.ndarray, pb: PackedB) -> tuple:
    """(kind, a2, a32, words, mask, flip, mr): A's arguments of the *_blocks drivers."""
    flip, _ = flip_of(a2.dtype)
    words = a2.shape[1] == 4 * pb.kq and a2.flags.c_contiguous and not pb.has_zp  # kq: padded for amx
    a32 = a2.reshape(-1).view(np.uint32).reshape(a2.shape[0], pb.kq) if words else _NO_WORDS
    mask = np.uint32(0x80808080 if flip else 0)
    return qtile.KIND[variant.name], a2, a32, words, mask, flip, variant.mr


_NO_WORDS = np.zeros((1, 1), np.uint32)


def run_blocks(driver, variant, pb: PackedB, a2: np.ndarray, args: tuple) -> None:
    """``driver(*a_operand, bdata, kq, n_panels, n, terms, zb, has_zb, *args, block, lo, hi)`` over
    row blocks on the shard pool."""
    m_n = a2.shape[0]
    block = block_rows(m_n, pb.k, pb.n_panels * pb.nr, variant.mr)
    head = (*a_operand(variant, a2, pb), pb.data, pb.kq, pb.n_panels, pb.n)
    config.parallel_for(driver, -(-m_n // block), (*head, *args, block), 2.0 * m_n * pb.k * pb.n)


# ------------------------------------------------------------------------ convolutions, rows kernel
@jit
def im2col_i8(x, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, pad, k_lo, k_hi):
    """Rows [k_lo, k_hi) of one image's int8/uint8 im2col (C * kh * kw, oh * ow), in x's dtype,
    taps outside the image = ``pad`` (the zero point); rows past C * kh * kw (K's padding to a
    multiple of 4) are 0. Flat unsigned indices, no per-row slices (7x7 planes: a view per output
    row cost more than its seven bytes): a contiguous copy per output row for stride 1."""
    c_n, h_n, w_n = x.shape
    k_n = c_n * kh * kw
    xf = x.reshape(-1)
    for k in range(k_lo, k_hi):
        dst = col[k]
        if k >= k_n:
            dst[:] = 0
            continue
        c = k // (kh * kw)
        ij = k - c * kh * kw
        i = ij // kw
        j = ij - i * kw
        off = j * dw - pw
        lo = (-off + sw - 1) // sw if off < 0 else 0
        hi = (w_n - 1 - off) // sw + 1 if w_n - 1 - off >= 0 else 0
        lo, hi = min(lo, ow_n), max(min(hi, ow_n), min(lo, ow_n))
        plane0 = c * h_n * w_n
        for oh in range(oh_n):
            ih = oh * sh - ph + i * dh
            base = oh * ow_n
            if ih < 0 or ih >= h_n:
                for ow in range(ow_n):
                    dst[U(base + ow)] = pad
                continue
            src = plane0 + ih * w_n + off  # + ow * sw: the tap's input for output column ow
            for ow in range(lo):
                dst[U(base + ow)] = pad
            if sw == 1:  # unsigned indices (no wraparound check), a contiguous copy: vectorises
                for ow in range(lo, hi):
                    dst[U(base + ow)] = xf[U(src + ow)]
            else:
                for ow in range(lo, hi):
                    dst[U(base + ow)] = xf[U(src + ow * sw)]
            for ow in range(hi, ow_n):
                dst[U(base + ow)] = pad


@jit
def im2col_i8_map(x, col, taps, pad, k_lo, k_hi):
    """im2col_i8 for small planes (ResNet's 7x7): ``taps`` (kh * kw, oh * ow) holds each tap's source
    offset within a plane (-1: padding), so each row is one gather over all its pixels instead of
    a loop per output row (whose overhead outweighed its few bytes)."""
    c_n, h_n, w_n = x.shape
    kk, n_pix = taps.shape
    k_n = c_n * kk
    xf = x.reshape(-1)
    for k in range(k_lo, k_hi):
        dst = col[k]
        if k >= k_n:
            dst[:] = 0
            continue
        c = k // kk
        m = taps[k - c * kk]
        base = c * h_n * w_n
        for p in range(n_pix):
            o = m[U(p)]
            dst[U(p)] = xf[U(base + o)] if o >= 0 else pad


def tap_offsets(h_n, w_n, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n) -> np.ndarray:
    """(kh * kw, oh * ow) int64: the offset in an (h, w) plane each tap of each output pixel reads, -1
    where it falls in the padding (im2col_i8_map's map)."""
    oh, ow = np.meshgrid(np.arange(oh_n), np.arange(ow_n), indexing="ij")
    out = np.empty((kh * kw, oh_n * ow_n), np.int64)
    for i in range(kh):
        for j in range(kw):
            ih, iw = oh * sh - ph + i * dh, ow * sw - pw + j * dw
            inside = (ih >= 0) & (ih < h_n) & (iw >= 0) & (iw < w_n)
            out[i * kw + j] = np.where(inside, ih * w_n + iw, -1).reshape(-1)
    return out


@jit
def conv_rows(kind, w, kq, m_n, m_pad, x, ldx, flip, n_pix, block, terms, mult, zp, lo, hi, out, b_lo, b_hi):
    """Pixel blocks [b_lo, b_hi) (``block`` pixels each) of a convolution on the rows micro-kernel
    (qtile._rows_tile, _rowsq_tile, _rowsm_tile): the block's pixel tiles interleaved once
    (qtile.pack_x; the last partial one from a zero-padded copy), then every weight panel over
    them, requantized (qgemm.requantize's steps: + terms[m], the bias and the zero-point
    correction; float32 * multiplier, round half to even, + zero point, clamp) into the (channels,
    pixels) ``out``: in the registers for whole weight panels (avx2, vnni512; a row's partial last
    tile with a masked store), else through an int32 block and a loop along the channel's row."""
    mr = 8 if kind == 2 else 4
    nr = 32 if kind == 2 else 16
    tile_bytes = kq * 4 * nr
    c = np.empty(m_pad * block, np.int32)
    scratch = np.empty(4 * kq * nr, x.dtype)
    xp = np.empty((block // nr + 1) * tile_bytes, np.uint8)
    flat = out.reshape(-1)
    for b in range(b_lo, b_hi):
        p0 = b * block
        n = min(block, n_pix - p0)
        full = n // nr * nr
        tiles = full // nr
        for t in range(tiles):
            qtile.pack_x(kind, x, p0 + t * nr, ldx, kq, flip, xp, t * tile_bytes)
        if full < n:
            for k in range(4 * kq):
                for j in range(nr):
                    scratch[k * nr + j] = x[p0 + k * ldx + full + j] if full + j < n else 0
            qtile.pack_x(kind, scratch, 0, nr, kq, flip, xp, tiles * tile_bytes)
        for r0 in range(0, m_pad, mr):
            w_off = r0 * kq * 4
            fuse = kind != 0 and r0 + mr <= m_n
            for t in range(tiles):
                if fuse:
                    qtile._rowsq_tile(kind, w, w_off, xp, t * tile_bytes, 0, kq, flip, terms, mult, r0, zp, lo, hi,
                                      flat, r0 * n_pix + p0 + t * nr, n_pix)
                else:
                    qtile._rows_tile(kind, w, w_off, xp, t * tile_bytes, 0, kq, flip, c, r0 * block + t * nr, block)
            if full < n and fuse:  # the partial tile, its valid pixels stored
                qtile._rowsm_tile(kind, w, w_off, xp, tiles * tile_bytes, 0, kq, flip, terms, mult, r0, zp, lo, hi,
                                  flat, r0 * n_pix + p0 + full, n_pix, n - full)
            elif full < n:
                qtile._rows_tile(kind, w, w_off, xp, tiles * tile_bytes, 0, kq, flip, c, r0 * block + full, block)
            j0 = n if fuse else 0
            for m in range(r0, min(r0 + mr, m_n)):
                dst = out[m]
                t_m = terms[m]
                mm = mult[m]
                base = m * block
                for j in range(j0, n):
                    q = np.float32(np.rint(np.float32(np.int32(c[base + j] + t_m)) * mm)) + zp
                    dst[p0 + j] = min(max(q, lo), hi)


# Each driver above compiles only the variant it runs (by_kind.py; Python callers still pass ``kind``):
# a branch on kind compiled every variant's drivers and LLVM IR tiles (qtile.gemm_kind 5-6 s cold).
kind_taking(qtile.gemm_kind, qtile.pack_x, qtile._rows_tile, qtile._rowsq_tile, qtile._rowsm_tile)
dq_matmul_rows, dq_matmul_panels, dq_matmul_small, dq_matmul_plain = map(
    by_kind, (dq_matmul_rows, dq_matmul_panels, dq_matmul_small, dq_matmul_plain))
dq_matmul_bound, dq_matmul_bound_small = map(by_kind, (dq_matmul_bound, dq_matmul_bound_small))
int32_blocks, float_blocks, requant_blocks, conv_rows = map(by_kind, (int32_blocks, float_blocks, requant_blocks,
                                                                      conv_rows))


X_BLOCK_BYTES = 384 * 1024  # input rows of a conv_rows block: they stay in L2 while every weight panel passes


def rows_block(m_pad: int, nr: int, n_pix: int, k: int = 0, threads: int = 1) -> int:
    """Pixels per block of conv_rows, a multiple of nr: as many as keep the block's input rows
    (``k`` bytes a pixel) in L2, since each block streams all the weights once (ResNet-18's
    512 x 4608 weight is 2.4 MB: two blocks of 7x7 = 49 pixels read it twice), and at least one
    block per thread. The int32 block (m_pad x block) is touched only by partial tiles."""
    block = max(nr, X_BLOCK_BYTES // max(k, 1) // nr * nr)
    per_thread = -(-n_pix // max(1, threads))
    block = min(block, max(nr, -(-per_thread // nr) * nr))
    return min(block, -(-n_pix // nr) * nr)


# ---------------------------------------------------------------------------------------- driver
def block_rows(m: int, k: int, n: int, mr: int) -> int:
    """Rows of A per block: at most BLOCK_BYTES of packed A and C_BLOCK_BYTES of int32 result, a
    multiple of mr, at least 4 panels (mr = 1, the AMX product's one-row panels: AMX_BLOCK_ROWS)."""
    floor = 4 * mr if mr > 1 else AMX_BLOCK_ROWS
    rows = max(floor, min(BLOCK_BYTES // max(k, 1), C_BLOCK_BYTES // (4 * max(n, 1))) // mr * mr)
    return min(rows, m)


AMX_BLOCK_ROWS = 64  # qamx.py: each B tile serves two A tiles only in blocks of >= 32 rows


def flip_of(dtype) -> tuple[bool, int]:
    """(flip, shift): int8 activations are flipped to uint8 (+ 128, zero point + 128)."""
    return (True, 128) if np.dtype(dtype) == np.int8 else (False, 0)

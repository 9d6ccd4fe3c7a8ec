"""Depthwise QLinearConv (one input channel per group, 3x3 and any other kernel) on vector transposes.

The NCHW planes of a MobileNet's depthwise layers are small (7x7 to 56x56 with 144-960 channels), so a
loop per plane pays its setup once per channel, and a stride-2 plane's phases gather bytes with the
stride. Here the convolution runs channels-last instead, with both layout changes done by 16 x 16
transposes in the registers (``shufflevector``, four butterfly stages; plain LLVM IR, any CPU), in
bands of output rows (``_bands_cl``; a band's rows stay in L2 from one step to the next):

1. the band's int8/uint8 input rows minus the zero point into a float32 (rows, W + 2 pw, C) buffer
   whose border stays 0 (= the zero point, ONNX's padding): ``_tr_in16``;
2. per output pixel the kernel's taps over all channels at once, then qgemm.requantize's steps
   (int32 + bias, float32 * multiplier, round half to even, + zero point, clamp) into a float32
   (pixels, C) tile: ``_taps3_cl`` (3x3, four pixels a step in the registers), ``_taps_cl`` (any
   kernel). Every partial sum is an exact integer (taps * 255 * 255 <= 2**24), so the order of the
   sum does not matter;
3. the tile transposed back into the NCHW int8/uint8 output: ``_tr_out16``.

Bit-exact against the reference (the same integer sum and the same float32 requantize steps).
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import config
from ..config import jit_inline, jit_parallel

U = np.uint64  # unsigned index: no wraparound check in inner loops
LANES = 16


def _data(context, builder, arrty, value):
    return cgutils.create_struct_proxy(arrty)(context, builder, value=value).data


def _transpose16(builder, rows):
    """16 vectors <16 x T> (row i, lane j) -> 16 vectors (row j, lane i): swap bit b of the row and
    lane index for b = 0..3, each step 8 pairs of two-input shuffles."""
    i32 = ir.IntType(32)
    rows = list(rows)
    for b in range(4):
        bit = 1 << b
        lo_mask = ir.Constant(ir.VectorType(i32, LANES),
                              [j if not j & bit else LANES + (j ^ bit) for j in range(LANES)])
        hi_mask = ir.Constant(ir.VectorType(i32, LANES),
                              [(j | bit) if not j & bit else LANES + j for j in range(LANES)])
        out = list(rows)
        for i in range(LANES):
            if i & bit:
                continue
            a, c = rows[i], rows[i | bit]
            out[i] = builder.shuffle_vector(a, c, lo_mask)
            out[i | bit] = builder.shuffle_vector(a, c, hi_mask)
        rows = out
    return rows


@intrinsic
def _tr_in16(typingctx, x, x_off, ldx, zx, pix, p0, out, c0):
    """16 channels x 16 pixels: bytes ``x[x_off + i * ldx + j]`` (channel i, pixel p0 + j) minus ``zx``
    as float32, stored transposed at ``out[pix[p0 + j] + c0 + i]`` (pix: each pixel's offset in
    ``out``)."""

    def codegen(context, builder, sig, args):
        x, x_off, ldx, zx, pix, p0, out, c0 = args
        i8, i32, i64, f32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
        vb, vf = ir.VectorType(i8, LANES), ir.VectorType(f32, LANES)
        px = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], x), i8.as_pointer()), [x_off])
        pp = builder.gep(builder.bitcast(_data(context, builder, sig.args[4], pix), i64.as_pointer()), [p0])
        po = builder.gep(builder.bitcast(_data(context, builder, sig.args[6], out), f32.as_pointer()), [c0])
        zv = builder.insert_element(ir.Constant(vf, ir.Undefined), zx, ir.Constant(i32, 0))
        zv = builder.shuffle_vector(zv, ir.Constant(vf, ir.Undefined), ir.Constant(ir.VectorType(i32, LANES),
                                                                                   [0] * LANES))
        signed = sig.args[0].dtype == types.int8
        rows = []
        for i in range(LANES):
            ptr = builder.gep(px, [builder.mul(ldx, ir.Constant(i64, i))])
            v = builder.load(builder.bitcast(ptr, vb.as_pointer()), align=1)
            v = builder.sitofp(v, vf) if signed else builder.uitofp(v, vf)
            rows.append(builder.fsub(v, zv))
        for j, col in enumerate(_transpose16(builder, rows)):
            at = builder.load(builder.gep(pp, [ir.Constant(i64, j)]))
            builder.store(col, builder.bitcast(builder.gep(po, [at]), vf.as_pointer()), align=4)
        return context.get_dummy_value()

    sig = types.void(x, types.int64, types.int64, types.float32, pix, types.int64, out, types.int64)
    return sig, codegen


@intrinsic
def _tr_out16(typingctx, acc, a_off, lda, out, o_off, ldo):
    """16 pixels x 16 channels of float32 ``acc[a_off + j * lda + i]`` (pixel j, channel i; integers
    already clamped to the output range) stored transposed as bytes at ``out[o_off + i * ldo + j]``."""

    def codegen(context, builder, sig, args):
        acc, a_off, lda, out, o_off, ldo = args
        i8, i32, i64, f32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
        vb, vf, vi = ir.VectorType(i8, LANES), ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
        pa = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], acc), f32.as_pointer()), [a_off])
        po = builder.gep(builder.bitcast(_data(context, builder, sig.args[3], out), i8.as_pointer()), [o_off])
        rows = []
        for j in range(LANES):
            ptr = builder.gep(pa, [builder.mul(lda, ir.Constant(i64, j))])
            rows.append(builder.fptosi(builder.load(builder.bitcast(ptr, vf.as_pointer()), align=4), vi))
        for i, col in enumerate(_transpose16(builder, rows)):
            ptr = builder.gep(po, [builder.mul(ldo, ir.Constant(i64, i))])
            builder.store(builder.trunc(col, vb), builder.bitcast(ptr, vb.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(acc, types.int64, types.int64, out, types.int64, types.int64), codegen


def _taps3_intrinsic(stride: int, npix: int):
    """An intrinsic ``taps(xt, x_off, row, cs, wt, bias, mult, zy, lo, hi, acc, d_off)``: ``npix``
    output pixels (``stride`` apart along a row) of a 3x3 undilated depthwise window over all ``cs``
    channels (a multiple of 16), 16 channels a step: pixel k's sum is ``wt[3 i + j, c] * xt[x_off + i
    * row + (j + stride * k) * cs + c]`` (each weight vector loaded once for the npix pixels, each input
    column once), requantized (the float32 sum is an exact integer: fptosi, + bias[c], float32 *
    mult[c], round half to even, + zy, clamp to [lo, hi]) and stored at ``acc[d_off + k * cs + c]``."""
    ncol = 3 + stride * (npix - 1)

    def codegen(context, builder, sig, args):
        xt, x_off, row, cs, wt, bias, mult, zy, lo_f, hi_f, acc, d_off = args
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        vf, vi = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
        mod = builder.module
        fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf, vf, vf]), f"llvm.fmuladd.v{LANES}f32")
        rint = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf]), f"llvm.rint.v{LANES}f32")

        def ptr(arg, i, ty):
            return builder.bitcast(_data(context, builder, sig.args[i], arg), ty.as_pointer())

        px = builder.gep(ptr(xt, 0, f32), [x_off])
        pw, pb, pm = ptr(wt, 4, f32), ptr(bias, 5, i32), ptr(mult, 6, f32)
        pa = builder.gep(ptr(acc, 10, f32), [d_off])

        def splat(value):
            one = builder.insert_element(ir.Constant(vf, ir.Undefined), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, ir.Constant(vf, ir.Undefined), ir.Constant(vi, [0] * LANES))

        zv, lov, hiv = splat(zy), splat(lo_f), splat(hi_f)

        def load(base, at, ty):
            return builder.load(builder.bitcast(builder.gep(base, [at]), ty.as_pointer()), align=4)

        with cgutils.for_range_slice(builder, ir.Constant(i64, 0), cs, ir.Constant(i64, LANES)) as (c, _):
            w = [load(pw, builder.add(builder.mul(cs, ir.Constant(i64, t)), c), vf) for t in range(9)]
            sums = [None] * npix
            for i in range(3):
                base = builder.add(builder.mul(row, ir.Constant(i64, i)), c)
                cols = [load(px, builder.add(base, builder.mul(cs, ir.Constant(i64, m))), vf) for m in range(ncol)]
                for k in range(npix):
                    for j in range(3):
                        prod = (w[3 * i + j], cols[j + stride * k])
                        sums[k] = builder.fmul(*prod) if sums[k] is None else builder.call(fma, [*prod, sums[k]])
            bv, mv = load(pb, c, vi), load(pm, c, vf)
            for k in range(npix):
                f = builder.sitofp(builder.add(builder.fptosi(sums[k], vi), bv), vf)
                f = builder.fadd(builder.call(rint, [builder.fmul(f, mv)]), zv)
                f = builder.select(builder.fcmp_ordered(">", f, lov), f, lov)
                f = builder.select(builder.fcmp_ordered("<", f, hiv), f, hiv)
                at = builder.add(builder.mul(cs, ir.Constant(i64, k)), c)
                builder.store(f, builder.bitcast(builder.gep(pa, [at]), vf.as_pointer()), align=4)
        return context.get_dummy_value()

    @intrinsic
    def taps(typingctx, xt, x_off, row, cs, wt, bias, mult, zy, lo, hi, acc, d_off):
        i64, f32 = types.int64, types.float32
        return types.void(xt, i64, i64, i64, wt, bias, mult, f32, f32, f32, acc, i64), codegen

    return taps


_taps3_s1x4 = _taps3_intrinsic(1, 4)
_taps3_s2x4 = _taps3_intrinsic(2, 4)
_taps3_x1 = _taps3_intrinsic(1, 1)


@jit_parallel
def _taps3_cl(xt, c_n, wp_n, wt, bias, mult, zy, lo_y, hi_y, sh, sw, ow_n, acc, q0, q1):
    """3x3 undilated taps, stride ``sw`` 1 or 2 along the row, for output rows [q0, q1): four pixels a
    call of the intrinsic, then the row's last ones one at a time."""
    quad = ow_n // 4 * 4
    row = wp_n * c_n
    for oh in range(q0, q1):
        x0 = oh * sh * row
        d0 = oh * ow_n * c_n
        for ow in range(0, quad, 4):
            if sw == 1:
                _taps3_s1x4(xt, x0 + ow * c_n, row, c_n, wt, bias, mult, zy, lo_y, hi_y, acc, d0 + ow * c_n)
            else:
                _taps3_s2x4(xt, x0 + ow * 2 * c_n, row, c_n, wt, bias, mult, zy, lo_y, hi_y, acc, d0 + ow * c_n)
        for ow in range(quad, ow_n):
            _taps3_x1(xt, x0 + ow * sw * c_n, row, c_n, wt, bias, mult, zy, lo_y, hi_y, acc, d0 + ow * c_n)


@jit_inline
def _requant(s, bias, mult, zy, lo_y, hi_y):
    """qgemm.requantize's steps on one exact float32 sum: + bias in int32, float32 * multiplier, round
    half to even, + zero point, clamp."""
    v = np.float32(np.rint(np.float32(np.int32(np.int32(s) + bias)) * mult)) + zy
    return min(max(v, lo_y), hi_y)


@jit_parallel
def _taps_cl(xt, c_n, wp_n, wt, taps, bias, mult, zy, lo_y, hi_y, sh, sw, ow_n, acc, q0, q1):
    """Any kernel: output rows [q0, q1), ``acc[(oh * ow_n + ow) * c_n + c]`` = the requantized sum over
    the taps t of ``wt[t, c] * xt[(oh * sh * wp_n + ow * sw) * c_n + taps[t] + c]`` (``xt``: the padded
    channels-last input, row pitch wp_n pixels; ``taps``: each tap's offset), one pass per tap."""
    for oh in range(q0, q1):
        for ow in range(ow_n):
            s0 = (oh * sh * wp_n + ow * sw) * c_n
            d0 = U((oh * ow_n + ow) * c_n)
            for c in range(c_n):
                acc[d0 + U(c)] = 0
            for t in range(taps.shape[0]):
                q = U(s0 + taps[t])
                for c in range(c_n):
                    acc[d0 + U(c)] += wt[t, c] * xt[q + U(c)]
            for c in range(c_n):
                acc[d0 + U(c)] = _requant(acc[d0 + U(c)], bias[c], mult[c], zy, lo_y, hi_y)


@jit_parallel
def _bands_cl(x, zx, pix, wt, taps, bias, mult, zy, lo_y, hi_y, kh, kw, sh, sw, dh, ph, pw, wp_n, ow_n, band,
              out, q0, q1):
    """Bands [q0, q1) of ``band`` output rows of one image, each through the three steps in a buffer
    of its own rows (so that the channels-last rows stay in L2 from the transpose to the taps and
    the tile from the taps to the transpose back): ``x`` (C, H, W) int8/uint8, ``out`` (C, OH * OW);
    ``pix``: each input pixel's offset in a whole padded image, ``taps``: each tap's offset."""
    c_n, h_n, w_n = x.shape
    oh_n = out.shape[1] // ow_n
    row = wp_n * c_n
    rows_in = (band - 1) * sh + (kh - 1) * dh + 1
    xt = np.empty(rows_in * row, np.float32)
    lead, trail = pw * c_n, (pw + w_n) * c_n
    for r in range(rows_in):  # the border columns: 0 (x - zx of the padding), never written after
        d = U(r * row)
        for k in range(lead):
            xt[d + U(k)] = 0
        for k in range(trail, row):
            xt[d + U(k)] = 0
    acc = np.empty(band * ow_n * c_n, np.float32)
    flat = x.reshape(-1)
    oflat = out.reshape(-1)
    p_n = oh_n * ow_n
    for bi in range(q0, q1):
        o0 = bi * band
        o1 = min(oh_n, o0 + band)
        pr0 = o0 * sh  # the band's first row of the padded input
        pr1 = min(pr0 + rows_in, (o1 - 1) * sh + (kh - 1) * dh + 1)
        i0 = max(0, pr0 - ph)  # its rows inside the input
        i1 = min(h_n, pr1 - ph)
        for r in range(pr0, pr1):  # padding rows: the interior 0 (the slot may hold another band's row)
            if r - ph < 0 or r - ph >= h_n:
                d = U((r - pr0) * row)
                for k in range(row):
                    xt[d + U(k)] = 0
        if i1 > i0:
            base = pr0 * row
            first, last = i0 * w_n, i1 * w_n
            full = first + (last - first) // LANES * LANES
            for c0 in range(0, c_n, LANES):
                for p0 in range(first, full, LANES):
                    _tr_in16(flat, c0 * h_n * w_n + p0, h_n * w_n, zx, pix, p0, xt, c0 - base)
                for c in range(c0, c0 + LANES):
                    src = x[c].reshape(-1)
                    for p in range(full, last):
                        xt[U(pix[p] - base + c)] = np.float32(src[p]) - zx
        if kh == 3 and kw == 3 and dh == 1 and taps[1] == c_n and sw <= 2:
            _taps3_cl(xt, c_n, wp_n, wt, bias, mult, zy, lo_y, hi_y, sh, sw, ow_n, acc, 0, o1 - o0)
        else:
            _taps_cl(xt, c_n, wp_n, wt, taps, bias, mult, zy, lo_y, hi_y, sh, sw, ow_n, acc, 0, o1 - o0)
        first, last = o0 * ow_n, o1 * ow_n
        full = first + (last - first) // LANES * LANES
        for c0 in range(0, c_n, LANES):
            for p0 in range(first, full, LANES):
                _tr_out16(acc, (p0 - first) * c_n + c0, c_n, oflat, c0 * p_n + p0, p_n)
            for c in range(c0, c0 + LANES):
                dst = out[c]
                for p in range(full, last):
                    dst[p] = acc[U((p - first) * c_n + c)]


BAND_BYTES = 512 * 1024  # a band's channels-last input rows: they stay in L2 through the taps (192 KB-4 MB tried)


def band_rows(oh_n: int, kh: int, sh: int, dh: int, row_bytes: int) -> int:
    """Output rows per band: as many as keep the band's input rows within BAND_BYTES, at least 1."""
    fit = BAND_BYTES // max(1, row_bytes)
    return max(1, min(oh_n, (fit - (kh - 1) * dh - 1) // sh + 1))


def pixel_offsets(h_n: int, w_n: int, ph: int, pw: int, wp_n: int, c_n: int) -> np.ndarray:
    """Each input pixel's offset in the padded channels-last buffer (row pitch wp_n pixels)."""
    ih, iw = np.divmod(np.arange(h_n * w_n, dtype=np.int64), w_n)
    return ((ih + ph) * wp_n + iw + pw) * c_n


def tap_offsets(kh: int, kw: int, dh: int, dw: int, wp_n: int, c_n: int) -> np.ndarray:
    """Each tap's offset from its output pixel's window corner in the padded buffer."""
    i, j = np.divmod(np.arange(kh * kw, dtype=np.int64), kw)
    return (i * dh * wp_n + j * dw) * c_n


def supports(c_n: int, m_n: int, group: int, cg: int, taps: int) -> bool:
    """Depthwise with one output channel per input channel, channels a multiple of 16, and few enough
    taps that every float32 partial sum is an exact integer (taps * 255 * 255 <= 2**24); not under
    NUMBA_DISABLE_JIT (its LLVM IR steps exist only in compiled code)."""
    return (cg == 1 and group == c_n == m_n and c_n % LANES == 0 and taps * 255 * 255 <= 2 ** 24
            and not numba.config.DISABLE_JIT)


def plan(kernel, x_shape, w, x_zero_point, w_zero_point, requant, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n):
    """Depthwise QLinearConv of NCHW inputs of ``x_shape`` (N, C, H, W) into outputs (N, C, OH, OW)
    channels-last (see the module's docstring), as a call ``run(x4, out)``. The weights minus their
    zero point (taps, C) float32 and the offset tables are kept on ``kernel`` between plans."""
    n_n, c_n, h_n, w_n = x_shape
    wp_n = max(pw + w_n, (ow_n - 1) * sw + (kw - 1) * dw + 1)
    key = (tuple(x_shape), w.shape, kh, kw, sh, sw, dh, dw, ph, pw)
    state = kernel.__dict__.get("_qdw_state")
    if state is None or state[0] != key:
        state = kernel._qdw_state = (key, pixel_offsets(h_n, w_n, ph, pw, wp_n, c_n),
                                     tap_offsets(kh, kw, dh, dw, wp_n, c_n))
    _, pix, taps = state
    hit = kernel.__dict__.get("_qdw_weights")
    if hit is None or hit[0] is not w or hit[1] is not w_zero_point or w.flags.writeable:
        wf = w.reshape(c_n, kh * kw).astype(np.float32)
        if w_zero_point is not None:
            wf = wf - np.asarray(w_zero_point).astype(np.float32).reshape(-1, 1)
        hit = kernel._qdw_weights = (w, w_zero_point, np.ascontiguousarray(wf.T))
    wt = hit[2]
    bias, mult, zy, lo, hi = requant
    zx = np.float32(0 if x_zero_point is None else np.asarray(x_zero_point).reshape(()))
    band = band_rows(oh_n, kh, sh, dh, wp_n * c_n * 4)
    bands = -(-oh_n // band)
    head = (zx, pix, wt, taps, bias, mult, zy, lo, hi, kh, kw, sh, sw, dh, ph, pw, wp_n, ow_n, band)
    work = 2.0 * c_n * oh_n * ow_n * kh * kw
    parallel_for = config.parallel_for

    def run(x4, out):
        out3 = out.reshape(n_n, c_n, oh_n * ow_n)
        for n in range(n_n):
            parallel_for(_bands_cl, bands, (np.ascontiguousarray(x4[n]), *head, out3[n]), work)

    return run


def run(kernel, x4, w, x_zero_point, w_zero_point, out, requant, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n):
    """``plan(...)(x4, out)``: one call."""
    plan(kernel, x4.shape, w, x_zero_point, w_zero_point, requant, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)(x4, out)

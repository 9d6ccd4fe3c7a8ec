"""ConvInteger and QLinearConv (1-D and 2-D; grouped, depthwise, strided, dilated, padded) as exact
integer convolutions on the float32 conv machinery (see qgemm.py for why float32 is exact here).

The weight minus its zero point is packed once. Depthwise convolutions run the float Conv's
``_conv_depthwise`` on the int8 input itself, subtracting the zero point as it fills its float32
phase buffers (a kernel's few taps are far inside the exact range); the others convert the input
minus its zero point to float32 once (so the padding the im2col leaves at 0 is the zero point, as
ONNX defines) and run im2col + BLAS in exact K-blocks. The
epilogue writes int32 (ConvInteger) or requantizes per output channel, bias and fused Relu/Clip
included (QLinearConv), straight into the NCHW output.
"""
from __future__ import annotations

import numpy as np
from kernelkit.ops.qlinear import multiplier
from kernelkit.registry import register_kernel

from .. import config
from ..by_kind import by_kind
from ..config import jit_parallel
from . import qdepthwise, qpack, qtile
from .conv import Conv, U, _conv_depthwise, _edge, _im2col, supports_1d_2d, tile_grid
from .epilogue import NONE
from .qgemm import (
    NO_ACC,
    PackedWeights,
    _bounds,
    accumulate,
    conv_weight_offsets,
    derived,
    dtype_reach,
    offset,
    requantize,
    requantize_block,
    to_int32,
)

# QLinearConv's operations (2 x output pixels x output channels x K, QLinearConv.work) in
# config.SERIAL_WORK units: 0.5, so that a QLinearConv takes the session's threads from 2**26
# operations. On the Xeon (docs/quantization.md, "MobileNetV2 int8 at two threads (issue 16,
# session 8)", per node 1t against 2t in one process) every QLinearConv of 13-40 M operations ran
# slower on the pool or no faster (MobileNetV2's stem 0.355 -> 0.407 ms, its 320 -> 1280 layer at 7x7
# 0.204 -> 0.242, ResNet-18's 1x1 stride-2 shortcuts 0.11 -> 0.14-0.17; the 16 -> 96 layer 0.445
# -> 0.381, but the depthwise layer after it, reading its output from the other core's cache, 0.618 ->
# 0.672), while ResNet-18's 3x3 layers of 231 M gain in its deep stages (512 channels at 7x7 1.22 ->
# 0.75-0.85). The earlier estimate counted input pixels (4x the operations of a stride-2 layer).
INT8_CONV_WORK = 0.5


@jit_parallel
def _qdepthwise(x, w, bias, mult, zy, lo_y, hi_y, y, sh, sw, dh, dw, ph, pw, zx, q0, q1):
    """QLinearConv with one input channel per group, requantized in its output loop: conv.py's
    ``_conv_depthwise`` scheme (each plane split into its stride phases of the padded input, the
    int8 input minus its zero point stored as float32, so the padding reads the zero point; each
    input row converted once into a zero-bordered row, whose stride phases are then read with a
    constant stride in one loop, which vectorises: a gather per phase with the stride did not; one
    unit-stride multiply-add pass per tap over the flattened output grid; every partial sum an
    exact integer, 9 * 255 * 255 << 2**24), then per output element the requantize steps of
    qgemm.requantize (int32 + bias, float32 * multiplier, round half to even, + zero point, clamp)
    written straight into the int8 plane: no float32 output plane and no second pass over it."""
    n_n, c_n, h_n, w_n = x.shape
    m_n, kh, kw = w.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    chan_mult = m_n // c_n
    qh, qw = ((kh - 1) * dh) // sh, ((kw - 1) * dw) // sw
    hq, wq = oh_n + qh, ow_n + qw
    size = hq * wq + qw
    span = oh_n * wq
    buf = np.empty(sh * sw * size, np.float32)
    acc = np.empty(span, np.float32)
    pwid = max(sw * wq, pw + w_n)
    prow = np.zeros(pwid, np.float32)  # one padded input row, x - zx; the borders stay 0
    o = np.empty(9, np.uint64)
    wv9 = np.empty(9, np.float32)
    for nm in range(q0, q1):
        n = nm // m_n
        m = nm - n * m_n
        src = x[n, m // chan_mult]
        for a in range(sh):
            for r in range(hq):
                ih = r * sh + a - ph
                if ih < 0 or ih >= h_n:
                    for b in range(sw):
                        d0 = (a * sw + b) * size + r * wq
                        for c in range(wq):
                            buf[U(d0 + c)] = 0
                    continue
                row = src[ih]
                if sw == 1:
                    d0 = a * size + r * wq
                    for c in range(min(pw, wq)):
                        buf[U(d0 + c)] = 0
                    hi = min(wq, pw + w_n)
                    for c in range(pw, hi):
                        buf[U(d0 + c)] = np.float32(row[U(c - pw)]) - zx
                    for c in range(max(hi, pw), wq):
                        buf[U(d0 + c)] = 0
                elif sw == 2:
                    for c in range(w_n):
                        prow[U(pw + c)] = np.float32(row[U(c)]) - zx
                    d0 = (a * 2) * size + r * wq
                    d1 = d0 + size
                    for c in range(wq):
                        buf[U(d0 + c)] = prow[U(2 * c)]
                        buf[U(d1 + c)] = prow[U(2 * c + 1)]
                else:
                    for c in range(w_n):
                        prow[U(pw + c)] = np.float32(row[U(c)]) - zx
                    for b in range(sw):
                        d0 = (a * sw + b) * size + r * wq
                        for c in range(wq):
                            buf[U(d0 + c)] = prow[U(c * sw + b)]
            for b in range(sw):
                base = (a * sw + b) * size
                for c in range(base + hq * wq, base + size):
                    buf[U(c)] = 0
        bm = bias[m]
        mm = mult[m]
        if kh == 3 and kw == 3:
            for i in range(3):
                for j in range(3):
                    o[i * 3 + j] = U((((i * dh) % sh) * sw + (j * dw) % sw) * size + ((i * dh) // sh) * wq
                                     + (j * dw) // sw)
                    wv9[i * 3 + j] = w[m, i, j]
            o0, o1, o2, o3, o4, o5, o6, o7, o8 = o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8]
            w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wv9[0], wv9[1], wv9[2], wv9[3], wv9[4], wv9[5], wv9[6], wv9[7],
                                                  wv9[8])
            for p in range(span):
                q = U(p)
                s = (w0 * buf[q + o0] + w1 * buf[q + o1] + w2 * buf[q + o2] + w3 * buf[q + o3]
                     + w4 * buf[q + o4] + w5 * buf[q + o5] + w6 * buf[q + o6] + w7 * buf[q + o7]
                     + w8 * buf[q + o8])
                v = np.float32(np.rint(np.float32(np.int32(np.int32(s) + bm)) * mm)) + zy
                acc[q] = min(max(v, lo_y), hi_y)
        else:
            acc[:] = 0
            strip = 2048
            for s0 in range(0, span, strip):
                s1 = min(span, s0 + strip)
                for i in range(kh):
                    for j in range(kw):
                        wv = w[m, i, j]
                        off = U((((i * dh) % sh) * sw + (j * dw) % sw) * size + ((i * dh) // sh) * wq
                                + (j * dw) // sw)
                        for p in range(s0, s1):
                            acc[U(p)] += wv * buf[U(p) + off]
            for p in range(span):
                v = np.float32(np.rint(np.float32(np.int32(np.int32(acc[U(p)]) + bm)) * mm)) + zy
                acc[U(p)] = min(max(v, lo_y), hi_y)
        plane = y[n, m]
        for oh in range(oh_n):
            r0 = oh * wq
            dst = plane[oh]
            for ow in range(ow_n):
                dst[U(ow)] = acc[U(r0 + ow)]


@jit_parallel
def _im2col_i8_s2(x, col, kh, kw, sh, dh, dw, ph, pw, oh_n, ow_n, pad, q0, q1):
    """qpack.im2col_i8 for a stride of 2 along the rows, channel-and-kernel-row pairs [q0, q1) (q = c * kh
    + i: im2col rows q * kw .. q * kw + kw - 1): per output row the input row is padded with ``pad``
    once and split into its even and odd columns in one loop (which vectorises; a gather with the
    stride per im2col row did not), then each kernel column's row is a contiguous copy of one of
    them. K's padding rows (past C * kh * kw) are the caller's."""
    c_n, h_n, w_n = x.shape
    half = ow_n + ((kw - 1) * dw) // 2 + 1
    prow = np.empty(2 * half, x.dtype)  # the padded row: prow[t] = x[c, ih, t - pw], else pad
    ev = np.empty(half, x.dtype)
    od = np.empty(half, x.dtype)
    t1 = min(2 * half, pw + w_n)
    for q in range(q0, q1):
        c = q // kh
        i = q - c * kh
        for oh in range(oh_n):
            ih = oh * sh - ph + i * dh
            base = oh * ow_n
            if ih < 0 or ih >= h_n:
                for j in range(kw):
                    dst = col[q * kw + j]
                    for ow in range(ow_n):
                        dst[U(base + ow)] = pad
                continue
            src = x[c, ih]
            for t in range(2 * half):
                prow[U(t)] = pad
            for t in range(pw, t1):
                prow[U(t)] = src[U(t - pw)]
            for t in range(half):
                ev[U(t)] = prow[U(2 * t)]
                od[U(t)] = prow[U(2 * t + 1)]
            for j in range(kw):
                off = j * dw  # input column 2 ow + off - pw: padded column 2 ow + off
                s0 = off // 2
                dst = col[q * kw + j]
                if off % 2 == 0:
                    for ow in range(ow_n):
                        dst[U(base + ow)] = ev[U(ow + s0)]
                else:
                    for ow in range(ow_n):
                        dst[U(base + ow)] = od[U(ow + s0)]


@jit_parallel
def _conv_rows_pixel_major(kind, w, kq, m_n, x, ldx, flip, n_pix, block, terms, mult, zp, lo, hi, out, b_lo, b_hi):
    """qpack.conv_rows for weights small enough to stay in L1 (K * M of a 1x1 layer with few input
    channels) and every weight panel whole (kind 1 or 2, ``m_n`` a multiple of its rows): per pixel
    tile, the tile interleaved (qtile.pack_x) and at once every weight panel over it, so that the
    tile, too, is read from L1 (conv_rows runs each weight panel over the whole block's tiles,
    which then come from L2)."""
    mr = 8 if kind == 2 else 4
    nr = 32 if kind == 2 else 16
    tile_bytes = kq * 4 * nr
    xp = np.empty(tile_bytes, np.uint8)
    scratch = np.empty(4 * kq * nr, x.dtype)
    flat = out.reshape(-1)
    for b in range(b_lo, b_hi):
        p0 = b * block
        n = min(block, n_pix - p0)
        full = n // nr * nr
        for t0 in range(p0, p0 + full, nr):
            qtile.pack_x(kind, x, t0, ldx, kq, flip, xp, 0)
            for r0 in range(0, m_n, mr):
                qtile._rowsq_tile(kind, w, r0 * kq * 4, xp, 0, 0, kq, flip, terms, mult, r0, zp, lo, hi, flat,
                                  r0 * n_pix + t0, n_pix)
        if full < n:
            for k in range(4 * kq):
                for j in range(nr):
                    scratch[k * nr + j] = x[p0 + k * ldx + full + j] if full + j < n else 0
            qtile.pack_x(kind, scratch, 0, nr, kq, flip, xp, 0)
            for r0 in range(0, m_n, mr):
                qtile._rowsm_tile(kind, w, r0 * kq * 4, xp, 0, 0, kq, flip, terms, mult, r0, zp, lo, hi, flat,
                                  r0 * n_pix + p0 + full, n_pix, n - full)


_conv_rows_pixel_major = by_kind(_conv_rows_pixel_major)  # compiled for the variant it runs only (by_kind.py)


@jit_parallel
def _to_channels_last(x, zx, xt, r0, r1):
    """Rows [r0, r1) of one image (C, H, W) int8/uint8 as int16 ``x - zx`` in (H, W, C) order."""
    c_n, _, w_n = x.shape
    for ih in range(r0, r1):
        for c in range(c_n):
            src = x[c, ih]
            for iw in range(w_n):
                xt[ih, iw, c] = np.int16(np.int32(src[iw]) - zx)


@jit_parallel
def _qdepthwise_cl(xt, w, bias, mult, zy, lo_y, hi_y, kh, kw, sh, sw, dh, dw, ph, pw, ow_n, out, r0, r1):
    """Output rows [r0, r1) of a depthwise (one channel per group) QLinearConv in channels-last order:
    ``xt`` (H, W, C) int16 input minus its zero point, ``w`` (kh * kw, C) int32 weights minus theirs;
    per output pixel the taps inside the image add ``w[tap] * xt[ih, iw]`` over all channels at once
    (taps outside add (zp - zp) * w = 0, as ONNX's padding with the zero point), in int32 from the
    bias; then qgemm.requantize's steps (float32 * multiplier, round half to even, + zero point,
    clamp) into an (OW, C) tile, copied into the NCHW output row by channel. Exact integers: the same
    int32 sum as the float32 kernel, whose partial sums stay below 2**24."""
    h_n, w_n, c_n = xt.shape
    acc = np.empty((ow_n, c_n), np.int32)
    tile = np.empty((ow_n, c_n), out.dtype)
    for oh in range(r0, r1):
        for ow in range(ow_n):
            a = acc[ow]
            for c in range(c_n):
                a[c] = bias[c]
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if ih < 0 or ih >= h_n:
                continue
            for j in range(kw):
                wt = w[i * kw + j]
                for ow in range(ow_n):
                    iw = ow * sw - pw + j * dw
                    if iw < 0 or iw >= w_n:
                        continue
                    a = acc[ow]
                    src = xt[ih, iw]
                    for c in range(c_n):
                        a[c] += wt[c] * np.int32(src[c])
        for ow in range(ow_n):
            a = acc[ow]
            t = tile[ow]
            for c in range(c_n):
                q = np.float32(np.rint(np.float32(a[c]) * mult[c])) + zy
                t[c] = min(max(q, lo_y), hi_y)
        base = oh * ow_n
        for c in range(c_n):
            dst = out[c]
            for ow in range(ow_n):
                dst[base + ow] = tile[ow, c]


class _IntegerConv(Conv):
    """Shared by ConvInteger and QLinearConv: geometry and im2col scratch from the float Conv,
    ``convolve(x, w, x_zp, w_zp, out, finish)`` calling ``finish(y, acc, has_acc, channels, dst)``
    per image and group with float32 exact block results (channels: a slice of output channels,
    dst: the (channels, pixels) view of the output to write)."""

    # depthwise channels-last below this many output pixels (any stride) or, strided, below CL_STRIDED:
    # measured on MobileNetV2's layers (1 thread, AMD EPYC znver4): 960x7x7 119 us vs 262 NCHW,
    # 576x14x14 s2 131 vs 246, 384x14x14 163 vs 182, 144x56x56 s2 383 vs 446; NCHW wins on the large
    # stride-1 planes (32x112x112 429 vs 880, 192x28x28 206 vs 293)
    CL_PIXELS, CL_STRIDED = 256, 1024
    # qdepthwise's channels-last kernel from this many channels (a multiple of 16): on MobileNetV2's layers
    # (benchmarks/bench_qdepthwise.py, interleaved, 1 thread, AMD EPYC znver4) 1.1-3.8x the NCHW kernel from
    # 96 channels up, in bands of rows that stay in L2; 32x112x112 0.93x alone but 0.82x inside the model
    # (quantized_profile.py, 0.23 vs 0.28 ms, four alternating runs); 16x9x9 0.35x (its setup per call)
    CL16_CHANNELS, CL16_PIXELS = 32, 1 << 30
    S2_SPLIT_COLUMNS = 48  # _im2col_i8_s2 from this many output columns (56: 1.58x im2col_i8; 28: 0.85x)

    def setup(self, input_specs):
        self._geom_key = None
        self._col = None
        self.packed = PackedWeights(conv_weight_offsets, lambda wf: wf)
        self._blocks_of = None  # (packed array, per-group contiguous K-blocks of it)

    def scratch(self, name: str, shape) -> np.ndarray:
        """A float32 buffer kept between calls (execute is serialised per node; a fresh 1-5 MB
        array per call costs more in page faults than the product written into it)."""
        buffers = self.__dict__.setdefault("_scratch", {})
        if name not in buffers or buffers[name].shape != tuple(shape):
            buffers[name] = np.empty(shape, np.float32)
        return buffers[name]

    @staticmethod
    def conv_work(x, w) -> float:
        return 2.0 * x.size * w.size / max(1, x.shape[1])

    def geometry(self, x_shape, w_shape):
        """conv.py's ``_geometry``, kept while the shapes stay."""
        key = (x_shape, w_shape)
        if key != self._geom_key:
            self._geom = self._geometry(x_shape, w_shape)
            self._geom_key = key
        return self._geom

    def reach(self, x, x_zero_point) -> int:
        """dtype_reach of the input, kept while the same zero point array comes in."""
        cached = self.__dict__.get("_reach")
        if cached is None or cached[0] is not x_zero_point or cached[1] != x.dtype:
            cached = (x_zero_point, x.dtype, dtype_reach(x.dtype, x_zero_point))
            self._reach = cached
        return cached[2]

    def convolve(self, x, w, x_zero_point, w_zero_point, out, finish, requant=None):
        """``requant``: (bias, mult, zp, lo, hi) of QLinearConv, which its depthwise kernel applies
        in its output loop (``finish`` is then not called for depthwise convolutions)."""
        if x_zero_point is not None and np.size(x_zero_point) != 1:
            raise ValueError(f"x_zero_point must be a scalar, got shape {np.shape(x_zero_point)}")
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self.geometry(x.shape, w.shape)
        one_d = x.ndim == 3
        x4 = x[:, :, None, :] if one_d else x
        n_n, c_n, h_n, w_n = x4.shape
        m_n, cg = w.shape[:2]
        kh, kw = (1,) + w.shape[2:] if one_d else w.shape[2:]
        group = int(self.attrs.get("group", 1))
        if c_n != cg * group or m_n % group:
            raise ValueError(f"input channels {c_n}, weight {tuple(w.shape)} and group {group} disagree")
        wf, blocks = self.packed.get(w, w_zero_point, self.reach(x, x_zero_point))
        out4 = out.reshape(n_n, m_n, oh_n * ow_n)
        mg, k_n, l_n = m_n // group, cg * kh * kw, oh_n * ow_n
        pixels = oh_n * ow_n
        small = pixels <= self.CL_PIXELS or (max(sh, sw) > 1 and pixels <= self.CL_STRIDED)
        if (requant is not None and qdepthwise.supports(c_n, m_n, group, cg, kh * kw)
                and c_n >= self.CL16_CHANNELS and pixels <= self.CL16_PIXELS):  # channels last, vector transposes
            qdepthwise.plan(self, x4.shape, w, x_zero_point, w_zero_point, requant, kh, kw, sh, sw, dh, dw, ph, pw,
                            oh_n, ow_n)(x4, out)
            return
        if cg == 1 and group == c_n == m_n and c_n > 1 and requant is not None and small:  # channels last
            self._depthwise_cl(x4, w, x_zero_point, w_zero_point, out, requant, kh, kw, sh, sw, dh, dw, ph, pw,
                               oh_n, ow_n)
            return
        if cg == 1 and group > 1 and blocks == [(0, k_n)] and requant is not None:  # depthwise, requantized
            zx = np.float32(0 if x_zero_point is None else np.asarray(x_zero_point).reshape(()))
            args = (np.ascontiguousarray(x4), wf.reshape(m_n, kh, kw), *requant, out.reshape(n_n, m_n, oh_n, ow_n),
                    sh, sw, dh, dw, ph, pw, zx)
            config.parallel_for(_qdepthwise, n_n * m_n, args, 2.0 * out.size * kh * kw)
            return
        if cg == 1 and group > 1 and blocks == [(0, k_n)]:  # depthwise: taps as multiply-adds, one pass
            yf = self.scratch("depthwise", (n_n, m_n, oh_n, ow_n))
            zx = np.float32(0 if x_zero_point is None else np.asarray(x_zero_point).reshape(()))
            args = (np.ascontiguousarray(x4), wf.reshape(m_n, 1, kh, kw), np.zeros(m_n, np.float32), yf,
                    sh, sw, dh, dw, ph, pw, NONE, np.float32(0), np.float32(0), zx)
            config.parallel_for(_conv_depthwise, n_n * m_n, args, 2.0 * yf.size * kh * kw)
            for n in range(n_n):
                finish(yf[n].reshape(m_n, l_n), NO_ACC, False, slice(0, m_n), out4[n])
            return
        if self._blocks_of is None or self._blocks_of[0] is not wf or self._blocks_of[1] is not blocks:
            self._blocks_of = (wf, blocks, [[np.ascontiguousarray(wf[g * mg:(g + 1) * mg, k0:k1]) for k0, k1 in blocks]
                                            for g in range(group)])  # contiguous weight blocks per group
        wblocks = self._blocks_of[2]
        xf = offset(x4, x_zero_point)
        direct = kh == kw == sh == sw == 1 and ph == pw == 0 and (oh_n, ow_n) == (h_n, w_n)
        if not direct and (self._col is None or self._col.shape != (k_n, l_n)):
            self._col = np.empty((k_n, l_n), np.float32)
        tiles = config.shard_count(mg * l_n, 2.0 * mg * k_n * l_n, unit=config.MIN_TILE_WORK)
        m_tiles, p_tiles = tile_grid(mg, l_n, tiles)
        sharded = requant is not None and len(blocks) == 1 and m_tiles * p_tiles > 1
        for n in range(n_n):
            for g in range(group):
                xs = xf[n, g * cg:(g + 1) * cg]
                if direct:
                    col = xs.reshape(k_n, l_n)
                else:
                    col = self._col
                    args = (xs, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)
                    config.parallel_for(_im2col, k_n, args, 2.0 * k_n * l_n)
                if sharded:  # as the float Conv: (channel block, pixel block) tiles, each one BLAS call
                    self._tiles(wblocks[g][0], col, g * mg, out4[n, g * mg:(g + 1) * mg], requant, m_tiles, p_tiles)
                    continue
                acc, has_acc = NO_ACC, False
                for i, (k0, k1) in enumerate(blocks):
                    y = np.dot(wblocks[g][i], col[k0:k1], out=self.scratch("product", (mg, l_n)))
                    if i < len(blocks) - 1:
                        if not has_acc:
                            acc, has_acc = np.zeros(y.shape, np.int32), True
                        accumulate(acc, y)
                    else:
                        channels = slice(g * mg, (g + 1) * mg)
                        finish(y, acc, has_acc, channels, out4[n, channels])


    def _depthwise_cl(self, x4, w, x_zero_point, w_zero_point, out, requant, kh, kw, sh, sw, dh, dw, ph, pw,
                      oh_n, ow_n):
        """Depthwise QLinearConv channels-last (_qdepthwise_cl): the NCHW planes of a MobileNet's deep
        layers are small (7x7 with 960 channels), so a loop per plane pays its setup per channel;
        across the channels the loops are long and vectorise. The weights minus their zero point
        are transposed to (taps, C) int32 once per weight."""
        m_n = w.shape[0]

        def make():
            wi = w.reshape(m_n, kh * kw).astype(np.int32)
            if w_zero_point is not None:
                wi = wi - np.asarray(w_zero_point).astype(np.int32).reshape(-1, 1)
            return np.ascontiguousarray(wi.T)

        hit = self.__dict__.get("_dw_weights")
        if hit is None or hit[0] is not w or hit[1] is not w_zero_point or w.flags.writeable:
            hit = self._dw_weights = (w, w_zero_point, make())
        wt = hit[2]
        bias, mult, z, lo, hi = requant
        zx = np.int32(0 if x_zero_point is None else np.asarray(x_zero_point).reshape(()))
        n_n, c_n, h_n, w_n = x4.shape
        xt = self.__dict__.get("_dw_xt")
        if xt is None or xt.shape != (h_n, w_n, c_n):
            xt = self._dw_xt = np.empty((h_n, w_n, c_n), np.int16)
        out3 = out.reshape(n_n, m_n, oh_n * ow_n)
        xc = np.ascontiguousarray(x4)
        for n in range(n_n):
            config.parallel_for(_to_channels_last, h_n, (xc[n], zx, xt), 2.0 * c_n * h_n * w_n)
            args = (xt, wt, bias, mult, z, lo, hi, kh, kw, sh, sw, dh, dw, ph, pw, ow_n, out3[n])
            config.parallel_for(_qdepthwise_cl, oh_n, args, 2.0 * m_n * oh_n * ow_n * kh * kw)

    def _tiled(self, x, x_zero_point, w, w_zero_point, out, requant) -> bool:
        """QLinearConv on an int8 micro-kernel (see _rows_plan) when one takes it."""
        run = self._rows_plan(x, x_zero_point, w, w_zero_point, requant)
        if run is None:
            return False
        run(x, out)
        return True

    def _rows_plan(self, x, x_zero_point, w, w_zero_point, requant):
        """QLinearConv on an int8 micro-kernel (qtile._rows_tile, _rowsq_tile) when one takes it, as a call
        ``run(x, out)`` for inputs of x's shape and dtype (QLinearConv.compute keeps it while its
        constants and the thread budget stay), else None: one group, weights with zero point 0
        (per-channel symmetric, as the quantizer writes them). The weights are the kernel's broadcast
        operand (packed once), the input rows its vector operand, read straight from the NCHW input
        for a 1x1 stride-1 convolution, else from an int8 im2col; the result is (channels, pixels),
        requantized along the NCHW rows (qpack.conv_rows)."""
        if int(self.attrs.get("group", 1)) != 1 or qtile.requested() == "off":
            return None
        if x_zero_point is not None and np.size(x_zero_point) != 1:
            return None
        m_n = w.shape[0]
        pb = qpack.packed_b(self, lambda: w.reshape(m_n, -1), w, w_zero_point, qpack.NR)
        variant = qtile.select(pb.safe_pairs)
        if variant is None or pb.has_zp:
            return None
        kind = qtile.KIND[variant.name]
        pb = qpack.packed_b(self, lambda: w.reshape(m_n, -1), w, w_zero_point, qtile.ROWS_MR[kind])
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self.geometry(x.shape, w.shape)
        one_d = x.ndim == 3
        x_shape4 = (x.shape[0], x.shape[1], 1, x.shape[2]) if one_d else x.shape
        kh, kw = (1,) + w.shape[2:] if one_d else w.shape[2:]
        bias, mult, z, lo, hi = requant
        flip, shift = qpack.flip_of(x.dtype)
        xzp = 0 if x_zero_point is None else int(np.asarray(x_zero_point).reshape(()))
        terms = qpack.column_terms(self, pb, xzp + shift, bias)
        n_pix, kq, c_n = oh_n * ow_n, pb.kq, x_shape4[1]
        direct = kh == kw == sh == sw == 1 and ph == pw == 0 and (oh_n, ow_n) == x_shape4[2:] and c_n % 4 == 0
        col = None
        if not direct:
            col = self.__dict__.get("_col8")
            if col is None or col.shape != (4 * kq, n_pix) or col.dtype != x.dtype:
                col = self._col8 = np.zeros((4 * kq, n_pix), x.dtype)  # K's padding rows stay 0
        nr = qtile.ROWS_NR[kind]
        m_pad = pb.n_panels * pb.nr
        block = qpack.rows_block(m_pad, nr, n_pix, 4 * kq, config.current_threads())
        blocks = -(-n_pix // block)
        pad = np.asarray(xzp, x.dtype)[()]
        taps = None
        if not direct and ow_n < 16:  # small planes: one gather per row through a map of the taps
            key = (x_shape4[2:], oh_n, ow_n)
            if self.__dict__.get("_tap_key") != key:
                self._taps = qpack.tap_offsets(*x_shape4[2:], kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)
                self._tap_key = key
            taps = self._taps
        # stride 2 along wide rows: each input row split into its even and odd columns once (the
        # MobileNetV2 stem 81 -> 25 us, ResNet-18's 7x7 stem 445 -> 99 us; rows of 28 outputs 0.85x)
        split = taps is None and not direct and sw == 2 and ow_n >= self.S2_SPLIT_COLUMNS
        rows_work, pack_work = 2.0 * m_pad * kq * 4 * n_pix, 4.0 * kq * n_pix
        tail = (n_pix, np.int64(-128 if flip else 0), n_pix, block, terms, mult, z, lo, hi)
        parallel_for = config.parallel_for
        if kind != 0 and m_n % qtile.ROWS_MR[kind] == 0:  # every weight panel whole: pixel tiles outermost
            conv_rows, head = _conv_rows_pixel_major, (kind, pb.data, kq, m_n)
        else:
            conv_rows, head = qpack.conv_rows, (kind, pb.data, kq, m_n, m_pad)

        def run(x, out):
            x4 = np.ascontiguousarray(x.reshape(x_shape4))
            out3 = out.reshape(x_shape4[0], m_n, n_pix)
            for n in range(x_shape4[0]):
                if direct:
                    rows = x4[n].reshape(-1)
                else:
                    if taps is not None:
                        parallel_for(qpack.im2col_i8_map, 4 * kq, (x4[n], col, taps, pad), pack_work)
                    elif split:
                        args = (x4[n], col, kh, kw, sh, dh, dw, ph, pw, oh_n, ow_n, pad)
                        parallel_for(_im2col_i8_s2, x_shape4[1] * kh, args, pack_work)
                    else:
                        args = (x4[n], col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, pad)
                        parallel_for(qpack.im2col_i8, 4 * kq, args, pack_work)
                    rows = col.reshape(-1)
                parallel_for(conv_rows, blocks, (*head, rows, *tail, out3[n]), rows_work)

        return run

    def _depthwise_plan(self, x, x_zero_point, w, w_zero_point, requant):
        """qdepthwise's channels-last kernel as a call ``run(x, out)`` when it takes this convolution
        (see convolve), else None."""
        if x_zero_point is not None and np.size(x_zero_point) != 1:
            return None
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self.geometry(x.shape, w.shape)
        one_d = x.ndim == 3
        x_shape4 = (x.shape[0], x.shape[1], 1, x.shape[2]) if one_d else x.shape
        kh, kw = (1,) + w.shape[2:] if one_d else w.shape[2:]
        c_n, m_n, cg, group = x_shape4[1], w.shape[0], w.shape[1], int(self.attrs.get("group", 1))
        if not (qdepthwise.supports(c_n, m_n, group, cg, kh * kw) and c_n >= self.CL16_CHANNELS
                and oh_n * ow_n <= self.CL16_PIXELS):
            return None
        geometry = (kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)
        run4 = qdepthwise.plan(self, x_shape4, w, x_zero_point, w_zero_point, requant, *geometry)
        return lambda x, out: run4(x.reshape(x_shape4), out)

    def _tiles(self, wg, col, m0, dst, requant, m_tiles, p_tiles):
        """The product of one image and group cut into tiles run on the shard pool, each one BLAS
        call at one thread into its block of the float32 scratch, then requantized into ``dst``."""
        mg, l_n = wg.shape[0], col.shape[1]
        y = self.scratch("product", (mg, l_n))
        bias, mult, z, lo, hi = requant
        bias, mult = bias[m0:m0 + mg], mult[m0:m0 + mg]

        def tile(t):
            mt, pt = divmod(t, p_tiles)
            r0, r1 = mt * mg // m_tiles, (mt + 1) * mg // m_tiles
            c0, c1 = _edge(pt, p_tiles, l_n), _edge(pt + 1, p_tiles, l_n)
            np.matmul(wg[r0:r1], col[:, c0:c1], out=y[r0:r1, c0:c1])
            requantize_block(y, bias, mult, z, lo, hi, dst, r0, r1, c0, c1)

        config.run_shards(tile, m_tiles * p_tiles)


def _supports(specs, attrs) -> bool:
    return supports_1d_2d(specs, attrs)


@register_kernel("ConvInteger", device="cpu", vendor="numba", dtype=("int8", "uint8"), supports=_supports)
class ConvInteger(_IntegerConv):
    """Exact integer convolution, int32 out."""

    def work(self, x, w, *zero_points):
        return self.conv_work(x, w)

    def compute(self, x, w, x_zero_point=None, w_zero_point=None):
        (_, _), (_, _), (_, _), out_hw = self.geometry(x.shape, w.shape)
        out = np.empty((x.shape[0], w.shape[0], *out_hw[2 - (x.ndim - 2):]), np.int32)

        def finish(y, acc, has_acc, channels, dst):
            to_int32(y, acc, has_acc, dst)

        self.convolve(x, w, x_zero_point, w_zero_point, out, finish)
        return out


@register_kernel("QLinearConv", device="cpu", vendor="numba", dtype=("int8", "uint8"), supports=_supports)
class QLinearConv(_IntegerConv):
    """Exact integer convolution + int32 bias, requantized per output channel (+ Relu/Clip)."""

    def work(self, x, x_scale, x_zero_point, w, *rest):
        """The products' operations, 2 x output pixels x output channels x K (``w.size`` is
        output channels x K of a group), INT8_CONV_WORK each."""
        *_, (oh_n, ow_n) = self.geometry(x.shape, w.shape)
        return 2.0 * x.shape[0] * oh_n * ow_n * w.size * INT8_CONV_WORK

    def compute(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b=None, *,
                out=None):
        """``out``: the session's planned output buffer (its arena: reused between runs, so warm in the
        caches), or None to allocate one."""
        consts = (x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b)
        fast = self.__dict__.get("_fast")
        if fast is not None and fast[0] == (x.shape, x.dtype, qtile.requested_raw(), config.current_threads()) \
                and all(p is q for p, q in zip(consts, fast[1])) and not any(a.flags.writeable for a in fast[2]):
            if out is None:
                out = np.empty(fast[3], fast[4])
            fast[5](x, out)
            return out
        (_, _), (_, _), (_, _), out_hw = self.geometry(x.shape, w.shape)
        zp = np.asarray(y_zero_point)
        if out is None:
            out = np.empty((x.shape[0], w.shape[0], *out_hw[2 - (x.ndim - 2):]), zp.dtype)
        m = w.shape[0]

        def make():
            mult = np.ascontiguousarray(np.broadcast_to(multiplier(x_scale, w_scale, y_scale), (m,)))
            bias = np.zeros(m, np.int32) if b is None else np.ascontiguousarray(b, np.int32).reshape(m)
            lo, hi = _bounds(self, y_scale, y_zero_point)
            return mult, bias, np.float32(zp.reshape(())), np.float32(lo), np.float32(hi)

        mult, bias, z, lo, hi = derived(self, (x_scale, w_scale, y_scale, y_zero_point, b), make)
        requant = (bias, mult, z, lo, hi)
        run = self._rows_plan(x, x_zero_point, w, w_zero_point, requant)
        if run is None:
            run = self._depthwise_plan(x, x_zero_point, w, w_zero_point, requant)
        if run is not None:  # kept while the same read-only constants come in (a model's)
            arrays = tuple(p for p in consts if isinstance(p, np.ndarray))
            if not any(a.flags.writeable for a in arrays):
                key = (x.shape, x.dtype, qtile.requested_raw(), config.current_threads())
                self._fast = (key, consts, arrays, out.shape, out.dtype, run)
            run(x, out)
            return out
        has_bias = b is not None

        def finish(y, acc, has_acc, channels, dst):
            requantize(y, acc, has_acc, bias[channels], has_bias, mult[channels], True, z, lo, hi, dst)

        self.convolve(x, w, x_zero_point, w_zero_point, out, finish, (bias, mult, z, lo, hi))
        return out

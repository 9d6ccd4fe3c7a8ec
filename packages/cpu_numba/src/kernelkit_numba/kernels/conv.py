"""Conv (1-D and 2-D; grouped, depthwise, dilated, strided, padded) with a fused epilogue: bias,
the residual Z (pass fuse_residual) and the activation.

3x3 stride-1 convolutions run as Winograd (``winograd.py``): F(4x4, 3x3) where the batch has two
14x14 maps' worth of outputs and the activation leaves the output unbounded (its float32 error is
~4e-6 of the largest pre-activation), else F(2x2, 3x3) on maps of 14x14 and more (from 7x7 where
its GEMMs run on ftile's cols tiles: ``WINO_SMALL``); weights transformed once. float32 dense
convolutions run on ftile.py's micro-kernels (strided ones with wide output rows as an implicit
GEMM over the input's padded column phases: ``_gemm_implicit``; see docs/numba.md, sessions 5
and 6); on avx512, strided ones of deeper K (ResNet's 3x3/2) and 3x3 layers on 7x7 maps as
fdirect.py's direct convolution (``_gemm_direct``, ``direct_wins``; session 10). Other
grouped/dense convolution is im2col + BLAS: the columns of one image and group are packed by a
sharded Numba kernel (a 1x1 stride-1 unpadded conv needs no packing: the
image is already the column matrix; a column matrix over 1 MiB is packed and multiplied in
blocks of output rows of about 2 MiB of columns, strided ones with wide outputs packed from the
input's column phases), and the GEMM is cut into output tiles, each one BLAS call at one thread
writing straight into the NCHW output and followed at once by its epilogue. Convolutions with one
input channel per group (depthwise, any channel multiplier) run, for float32 3x3 undilated stride 1
or 2 on an AVX-512 CPU, as the window tiles of ``dwtile.py`` (masked vector loads instead of padding,
bias, the residual Z and Relu/Relu6 fused, sharded over planes above an estimated 400 us); otherwise
as contiguous multiply-adds straight from x (3x3 pads 1 stride 1), over the stride phases of each
padded plane split once (3x3 pads 1 stride 2) or with one pass per tap over those phases
(``_conv_depthwise``), with bias and Relu/Relu6 fused. The output goes into the session's arena
when it hands one (``out=``).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from kernelkit.errors import KernelkitError
from kernelkit.registry import register_kernel
from kernelkit.shape import auto_pads, conv_out_dim

from .. import config
from .._base import NumbaKernel
from ..config import jit, jit_inline, jit_parallel
from . import conv_serial, dwtile, fdirect, ftile, winograd
from ._range import tap_range
from .epilogue import CLIP, NONE, bias_act_block, bias_act_rows, scale_bias_act_cols
from .gemm_nt import gemm_nt_rows

U = np.uint64  # unsigned index: no wraparound check in inner loops


def _im2col(x, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, r0, r1):
    """Rows [r0, r1) of col[(c*kh + i)*kw + j, oh*ow_n + ow] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]
    (0 outside): ``_im2col_rows`` over every output row (plain Python: one compiled function)."""
    _im2col_rows(x, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, 0, oh_n, r0, r1)


@jit_parallel
def _im2col_rows(x, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, oh0, oh1, r0, r1):
    """Rows [r0, r1) of the column matrix of output rows [oh0, oh1):
    col[(c*kh + i)*kw + j, (oh - oh0)*ow_n + ow] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] (0 outside).
    Inner loops index with unsigned integers (U): signed ones keep NumPy's negative-index
    wraparound, which stops LLVM from vectorising the copy."""
    c_n, h_n, w_n = x.shape
    taps = kh * kw
    cols = (oh1 - oh0) * ow_n
    xf = x.reshape(c_n * h_n * w_n)  # flat operands: a row view per (r, oh) cost ~50 ns each,
    cf = col.reshape(col.shape[0] * col.shape[1])  # 2/3 of the time on 7x7 maps
    for r in range(r0, r1):
        c = r // taps
        i = (r - c * taps) // kw
        j = r - c * taps - i * kw
        off = j * dw - pw
        lo, hi = tap_range(off, sw, w_n, ow_n)
        for oh in range(oh0, oh1):
            d0 = U(r * cols + (oh - oh0) * ow_n)
            h = oh * sh - ph + i * dh
            if h < 0 or h >= h_n:
                for ow in range(ow_n):
                    cf[d0 + U(ow)] = 0
                continue
            s0 = (c * h_n + h) * w_n + off  # signed: s0 + ow * sw >= 0 for ow >= lo
            for ow in range(lo):
                cf[d0 + U(ow)] = 0
            if sw == 1:
                for ow in range(lo, hi):
                    cf[d0 + U(ow)] = xf[U(s0 + ow)]
            else:
                for ow in range(lo, hi):
                    cf[d0 + U(ow)] = xf[U(s0 + ow * sw)]
            for ow in range(hi, ow_n):
                cf[d0 + U(ow)] = 0


@jit
def _im2col_padded(x, xp, col, kh, kw, ph, pw, oh_n, ow_n):
    """``_im2col`` for stride 1 and no dilation through ``xp`` (C, oh_n + kh - 1, ow_n + kw - 1), a
    zero-padded copy of x made here: every window row is then one plain copy of ow_n floats, where
    ``_im2col_rows`` clips each row at the borders (RegNetY's grouped 3x3 layers: 440@7x7 1.7x and
    208@14x14 1.4x faster; the reference's grouped convolution ran ahead of the old one)."""
    c_n, h_n, w_n = x.shape
    hp, wp = xp.shape[1], xp.shape[2]
    rows, cols = min(h_n, hp - ph), min(w_n, wp - pw)
    for c in range(c_n):
        plane = xp[c]
        plane[:, :] = 0
        for h in range(rows):
            src, dst = x[c, h], plane[h + ph]
            for w in range(cols):
                dst[U(w + pw)] = src[U(w)]
    for c in range(c_n):
        plane = xp[c]
        for i in range(kh):
            for j in range(kw):
                row = col[(c * kh + i) * kw + j]
                for oh in range(oh_n):
                    src = plane[oh + i]
                    base = oh * ow_n
                    for ow in range(ow_n):
                        row[U(base + ow)] = src[U(ow + j)]


@jit_parallel
def _im2col_phases(xph, col, kh, kw, sh, sw, dh, dw, ph, pw, w_n, oh_n, ow_n, oh0, oh1, r0, r1):
    """``_im2col_rows`` for a strided convolution from the column phases of the input,
    ``xph[b, c, h, q] = x[c, h, q*sw + b]`` (``column_phases``): tap (i, j) reads phase
    b = (j*dw - pw) mod sw at columns ow + (j*dw - pw) // sw, so every row of the column matrix
    is a unit-stride copy (a vector loop) where the direct version gathers every sw-th element
    (the 7x7/2 stem's columns: 2 cycles an element). Rows [r0, r1) of output rows [oh0, oh1)."""
    c_n, h_n, wq = xph.shape[1], xph.shape[2], xph.shape[3]
    taps = kh * kw
    cols = (oh1 - oh0) * ow_n
    xf = xph.reshape(xph.size)
    cf = col.reshape(col.shape[0] * col.shape[1])
    for r in range(r0, r1):
        c = r // taps
        i = (r - c * taps) // kw
        j = r - c * taps - i * kw
        off = j * dw - pw
        b = off % sw  # Python's modulo: 0 <= b < sw
        shift = (off - b) // sw
        width = (w_n - b + sw - 1) // sw  # columns of phase b
        lo, hi = tap_range(shift, 1, width, ow_n)
        for oh in range(oh0, oh1):
            d0 = U(r * cols + (oh - oh0) * ow_n)
            h = oh * sh - ph + i * dh
            if h < 0 or h >= h_n:
                for ow in range(ow_n):
                    cf[d0 + U(ow)] = 0
                continue
            s0 = ((b * c_n + c) * h_n + h) * wq + shift  # signed: s0 + ow >= 0 for ow >= lo
            for ow in range(lo):
                cf[d0 + U(ow)] = 0
            for ow in range(lo, hi):
                cf[d0 + U(ow)] = xf[U(s0 + ow)]
            for ow in range(hi, ow_n):
                cf[d0 + U(ow)] = 0


def column_phases(xs, sw: int, out=None):
    """(sw, C, H, ceil(W / sw)) array of ``xs[:, :, b::sw]`` for each b (the last column of a phase
    that has one fewer is left as is: ``_im2col_phases`` never reads it)."""
    c_n, h_n, w_n = xs.shape
    wq = -(-w_n // sw)
    xph = np.empty((sw, c_n, h_n, wq), xs.dtype) if out is None else out
    for b in range(sw):
        width = (w_n - b + sw - 1) // sw
        xph[b, :, :, :width] = xs[:, :, b::sw]
    return xph


@jit_parallel
def _conv_depthwise(x, w, bias, y, sh, sw, dh, dw, ph, pw, code, p0, p1, zx, q0, q1):
    """Convolution with one input channel per group (depthwise, any channel multiplier: output m
    reads channel m // mult), any stride and dilation, as contiguous multiply-adds.

    Each plane is split once into its sh*sw stride phases of the zero-padded input,
    ``phase[a, b][r, c] = padded[r*sh + a, c*sw + b]``, each phase flattened with row length wq.
    Tap (i, j) of output (oh, ow) then reads phase ((i*dh) % sh, (j*dw) % sw) at
    (oh + (i*dh)//sh, ow + (j*dw)//sw): for every tap one long unit-stride loop over a block of
    output rows flattened (rows of wq, the last wq - ow_n columns of each computed and dropped),
    which vectorises even for 7x7 maps and for stride 2, where a direct loop gathers every other
    element. The block is at most ``_DW_BLOCK`` values, so its accumulator stays in L1 across the
    taps (a whole 112x112 plane per tap pass streamed from L2). Planes ``[q0, q1)`` of the
    flattened (N, M) are computed (one shard); scratch buffers are allocated once per shard. All
    indexing is flat: a Numba array view (``x[n, c]``, a row) costs tens of nanoseconds, which at
    one per row was most of a 14x14 plane's time. The phases and sums have y's dtype; ``zx`` is
    subtracted from every input element on the way in: 0 for float convolutions, the zero point
    for int8 ones (qconv.py), whose padding then reads the zero point."""
    n_n, c_n, h_n, w_n = x.shape
    m_n, _, kh, kw = w.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    mult = m_n // c_n
    qh, qw = ((kh - 1) * dh) // sh, ((kw - 1) * dw) // sw
    hq, wq = oh_n + qh, ow_n + qw
    size = hq * wq + qw  # one phase, plus the overrun of the last row's dropped columns
    rows = max(1, min(oh_n, _DW_BLOCK // wq))  # output rows per accumulator block
    buf = np.empty(sh * sw * size, y.dtype)
    acc = np.empty(rows * wq, y.dtype)
    xf = x.reshape(x.size)
    yf = y.reshape(y.size)
    wf = w.reshape(w.size)
    plane_in, plane_out, taps = h_n * w_n, oh_n * ow_n, kh * kw
    for nm in range(q0, q1):
        n = nm // m_n
        m = nm - n * m_n
        sbase = (n * c_n + m // mult) * plane_in
        for a in range(sh):
            for b in range(sw):
                base = (a * sw + b) * size
                shift = b - pw
                lo, hi = tap_range(shift, sw, w_n, wq)  # columns that read inside the row
                for r in range(hq):  # explicit loops: a Numba slice assignment costs ~50 ns
                    ih = r * sh + a - ph
                    d0 = base + r * wq
                    if ih < 0 or ih >= h_n:
                        for c in range(wq):
                            buf[U(d0 + c)] = 0
                        continue
                    s0 = sbase + ih * w_n + shift  # signed: s0 + c * sw >= 0 for c >= lo
                    for c in range(lo):
                        buf[U(d0 + c)] = 0
                    if sw == 1:
                        for c in range(lo, hi):
                            buf[U(d0 + c)] = xf[U(s0 + c)] - zx
                    else:
                        for c in range(lo, hi):
                            buf[U(d0 + c)] = xf[U(s0 + c * sw)] - zx
                    for c in range(hi, wq):
                        buf[U(d0 + c)] = 0
                for c in range(base + hq * wq, base + size):
                    buf[U(c)] = 0
        beta = bias[m]
        ybase = nm * plane_out
        for r0 in range(0, oh_n, rows):
            r1 = min(oh_n, r0 + rows)
            span = (r1 - r0) * wq
            for p in range(span):
                acc[U(p)] = beta
            for i in range(kh):
                for j in range(kw):
                    wv = wf[U(m * taps + i * kw + j)]
                    off = U((((i * dh) % sh) * sw + (j * dw) % sw) * size + (r0 + (i * dh) // sh) * wq + (j * dw) // sw)
                    for p in range(span):  # unsigned indices: no wraparound check, so it vectorises
                        acc[U(p)] += wv * buf[U(p) + off]
            for oh in range(r0, r1):
                s = (oh - r0) * wq
                d = ybase + oh * ow_n
                if code == CLIP:
                    for ow in range(ow_n):
                        yf[U(d + ow)] = min(max(acc[U(s + ow)], p0), p1)
                else:  # NONE (other activations run afterwards: see Conv.compute)
                    for ow in range(ow_n):
                        yf[U(d + ow)] = acc[U(s + ow)]


_DW_BLOCK = 2048  # values in the depthwise accumulator (8 KiB of float32: L1 with the phase rows it reads)


@jit_parallel
def _depthwise3x3(x, w, bias, y, code, p0, p1, q0, q1):
    """Depthwise 3x3, stride 1, pads 1 (MobileNet's blocks; any channel multiplier), straight from
    x into y: on the flattened plane every interior output is ``b + sum of w[i, j] * x[p + off]``
    over the nine offsets ``(i-1)*W + j-1`` in one unit-stride pass (nine loads and FMAs per
    vector, one store, no accumulator traffic); the outputs whose window leaves the plane (first
    and last row, first and last column) are then recomputed with bounds checks. Planes
    ``[q0, q1)`` of the flattened (N, M)."""
    n_n, c_n, h_n, w_n = x.shape
    m_n = w.shape[0]
    mult = m_n // c_n
    xf = x.reshape(x.size)
    yf = y.reshape(y.size)
    wf = w.reshape(w.size)
    hw = h_n * w_n
    for nm in range(q0, q1):
        n = nm // m_n
        m = nm - n * m_n
        xb = U((n * c_n + m // mult) * hw)
        yb = U(nm * hw)
        k = U(9 * m)
        w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wf[k], wf[k + U(1)], wf[k + U(2)], wf[k + U(3)], wf[k + U(4)],
                                              wf[k + U(5)], wf[k + U(6)], wf[k + U(7)], wf[k + U(8)])
        beta = bias[m]
        lo, hi = w_n + 1, hw - w_n - 1  # every window in [lo, hi) reads inside the flat plane
        wn = U(w_n)
        for q in range(lo, hi):
            p = U(q)
            a = xb + p - wn
            b = xb + p
            c = xb + p + wn
            v = (beta + w0 * xf[a - U(1)] + w1 * xf[a] + w2 * xf[a + U(1)] + w3 * xf[b - U(1)] + w4 * xf[b]
                 + w5 * xf[b + U(1)] + w6 * xf[c - U(1)] + w7 * xf[c] + w8 * xf[c + U(1)])
            if code == CLIP:
                v = min(max(v, p0), p1)
            yf[yb + p] = v
        if h_n < 2 or w_n < 2:  # degenerate maps: every output is on the border
            for q in range(hw):
                yf[yb + U(q)] = _dw3x3_at(xf, wf, xb, k, q // w_n, q % w_n, 1, h_n, w_n, beta, code, p0, p1)
            continue
        # the border (the interior pass wrote wrong values into the first and last column): the
        # first and last row without the taps above / below, unit-stride; the columns one by one
        r = U(hw - w_n)  # start of the last row
        for q in range(1, w_n - 1):
            p = U(q)
            b = xb + p
            c = xb + p + wn
            v = (beta + w3 * xf[b - U(1)] + w4 * xf[b] + w5 * xf[b + U(1)]
                 + w6 * xf[c - U(1)] + w7 * xf[c] + w8 * xf[c + U(1)])
            yf[yb + p] = min(max(v, p0), p1) if code == CLIP else v
            a = xb + r + p - wn
            b = xb + r + p
            v = (beta + w0 * xf[a - U(1)] + w1 * xf[a] + w2 * xf[a + U(1)]
                 + w3 * xf[b - U(1)] + w4 * xf[b] + w5 * xf[b + U(1)])
            yf[yb + r + p] = min(max(v, p0), p1) if code == CLIP else v
        for oh in range(h_n):
            yf[yb + U(oh * w_n)] = _dw3x3_at(xf, wf, xb, k, oh, 0, 1, h_n, w_n, beta, code, p0, p1)
            yf[yb + U(oh * w_n + w_n - 1)] = _dw3x3_at(xf, wf, xb, k, oh, w_n - 1, 1, h_n, w_n, beta, code, p0, p1)


@jit_inline
def _dw3x3_at(xf, wf, xb, k, oh, ow, st, h_n, w_n, beta, code, p0, p1):
    """One output of a depthwise 3x3 with pads 1 and stride ``st``, its window's bounds checked."""
    v = beta
    for i in range(3):
        ih = oh * st + i - 1
        if 0 <= ih < h_n:
            for j in range(3):
                iw = ow * st + j - 1
                if 0 <= iw < w_n:
                    v += wf[k + U(3 * i + j)] * xf[xb + U(ih * w_n + iw)]
    return min(max(v, p0), p1) if code == CLIP else v


@jit_parallel
def _depthwise3x3s2(x, w, bias, y, code, p0, p1, q0, q1):
    """Depthwise 3x3, stride 2, pads 1 (MobileNet's down-sampling blocks). Each plane is split once
    into the four stride phases of its zero-padded input, ``phase[a, b][r, c] = padded[2r + a,
    2c + b]`` (rows of wq = OW + 1; both column phases of an input row written in one loop, which
    LLVM loads as one interleaved group), so that tap (i, j) of output (oh, ow) reads phase
    (i % 2, j % 2) at (oh + i // 2, ow + j // 2): over a block of output rows flattened (rows of
    wq, the last column of each computed and dropped) every output is nine unit-stride loads at
    fixed offsets and FMAs, one long vector loop. The direct loop with stride-2 loads (gathers,
    rows of OW) took 1.2-2x as long (1x96x112x112: 0.62 vs 0.31 ms; benchmarks/
    bench_depthwise_s2.py). The padding is zeroed once per call: every plane writes the same
    other places. Planes ``[q0, q1)`` of the flattened (N, M)."""
    n_n, c_n, h_n, w_n = x.shape
    m_n, oh_n, ow_n = w.shape[0], y.shape[2], y.shape[3]
    mult = m_n // c_n
    xf = x.reshape(x.size)
    yf = y.reshape(y.size)
    wf = w.reshape(w.size)
    hq, wq = oh_n + 1, ow_n + 1
    size = hq * wq + 1  # one phase, plus the overrun of the last row's dropped column
    rows = max(1, min(oh_n, _DW_BLOCK // wq))
    buf = np.zeros(4 * size, y.dtype)  # the padding: every plane writes the same other places
    acc = np.empty(rows * wq, y.dtype)
    hw, ohw = h_n * w_n, oh_n * ow_n
    half = w_n // 2
    for nm in range(q0, q1):
        n = nm // m_n
        m = nm - n * m_n
        xb = (n * c_n + m // mult) * hw
        for h in range(h_n):
            a = (h + 1) % 2  # padded row h + 1: phase row (h + 1) // 2
            r = (h + 1) // 2
            odd_cols = U((a * 2 + 1) * size + r * wq)  # column 2t -> padded 2t + 1: phase (a, 1) at t
            even_cols = U((a * 2) * size + r * wq + 1)  # column 2t + 1 -> padded 2t + 2: phase (a, 0) at t + 1
            s0 = U(xb + h * w_n)
            for t in range(half):  # a column pair per step: one interleaved group of loads
                buf[odd_cols + U(t)] = xf[s0 + U(2 * t)]
                buf[even_cols + U(t)] = xf[s0 + U(2 * t + 1)]
            if w_n % 2:
                buf[odd_cols + U(half)] = xf[s0 + U(w_n - 1)]
        k = U(9 * m)
        w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wf[k], wf[k + U(1)], wf[k + U(2)], wf[k + U(3)], wf[k + U(4)],
                                              wf[k + U(5)], wf[k + U(6)], wf[k + U(7)], wf[k + U(8)])
        beta = bias[m]
        yb = nm * ohw
        for r0 in range(0, oh_n, rows):
            r1 = min(oh_n, r0 + rows)
            span = (r1 - r0) * wq
            t00 = U(r0 * wq)  # phase (0, 0) at (r0, 0); the taps' offsets from it
            t01, t10, t11 = t00 + U(size), t00 + U(2 * size), t00 + U(3 * size)
            row, one = U(wq), U(1)
            for p in range(span):
                q = U(p)
                acc[q] = (beta + w0 * buf[t00 + q] + w1 * buf[t01 + q] + w2 * buf[t00 + q + one]
                          + w3 * buf[t10 + q] + w4 * buf[t11 + q] + w5 * buf[t10 + q + one]
                          + w6 * buf[t00 + q + row] + w7 * buf[t01 + q + row] + w8 * buf[t00 + q + row + one])
            for oh in range(r0, r1):
                s = U((oh - r0) * wq)
                d = U(yb + oh * ow_n)
                if code == CLIP:
                    for ow in range(ow_n):
                        yf[d + U(ow)] = min(max(acc[s + U(ow)], p0), p1)
                else:
                    for ow in range(ow_n):
                        yf[d + U(ow)] = acc[s + U(ow)]


def supports_1d_2d(specs, attrs) -> bool:
    """Conv/ConvTranspose kernels take NCW and NCHW; 3-D (rank-5) ones stay on the reference."""
    return specs[0] is not None and len(specs[0].shape) in (3, 4)


@register_kernel("Conv", device="cpu", vendor="numba", dtype="float32", supports=supports_1d_2d)
class Conv(NumbaKernel):
    """Conv on NCHW / NCW float32 tensors (see the module docstring)."""

    uses_blas = True

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)
        code, p0, p1 = self.act
        # F(4x4, 3x3)'s float32 error is ~4e-6 of the largest pre-activation; an activation that
        # bounds the output (Relu6, Clip, Sigmoid, ...) shrinks the scale the tolerance judges it
        # by (a Clip(-0.5, 0.5) after sums of ~10 missed it), so those keep F(2x2, 3x3) (~3e-7)
        self._unbounded = code == NONE or (code == CLIP and p1 == np.inf)
        self._geom_key = None
        self._col = None
        self._w_src, self._w_wino, self._w_variant = None, None, 0  # weights and their Winograd transform
        self._fpacked = None  # (weights, kind, packed panels) of the float32 micro-kernel (ftile.py)
        self._wino_scratch: dict = {}

    def _geometry(self, x_shape, w_shape):
        """Pads, strides, dilations and output size as 2-D tuples (1-D convs get a unit height)."""
        a = self.attrs
        rank = len(x_shape) - 2
        kernel = tuple(a.get("kernel_shape") or w_shape[2:])
        strides = tuple(a.get("strides") or (1,) * rank)
        dil = tuple(a.get("dilations") or (1,) * rank)
        pads = auto_pads(a.get("auto_pad", "NOTSET"), x_shape[2:], kernel, strides, dil, a.get("pads") or None)
        if tuple(kernel) != tuple(w_shape[2:]):
            raise self.attr_error(f"kernel_shape {kernel} disagrees with weight shape {tuple(w_shape)}")
        out = tuple(conv_out_dim(x_shape[2 + k], kernel[k], strides[k], dil[k], pads[k], pads[k + rank])
                    for k in range(rank))
        if rank == 1:
            return (1,) + strides, (1,) + dil, (0, pads[0]), (1,) + out
        return strides, dil, (pads[0], pads[1]), out

    def _all_pads(self, x_shape, w_shape) -> tuple:
        """(top, left, bottom, right) pads of a 2-D conv (1-D: no rows), for the depthwise fast paths."""
        a = self.attrs
        rank = len(x_shape) - 2
        kernel = tuple(a.get("kernel_shape") or w_shape[2:])
        pads = auto_pads(a.get("auto_pad", "NOTSET"), x_shape[2:], kernel, tuple(a.get("strides") or (1,) * rank),
                         tuple(a.get("dilations") or (1,) * rank), a.get("pads") or None)
        return tuple(pads) if rank == 2 else (0, pads[0], 0, pads[1])

    def work(self, x, w, b=None, z=None):
        if w.shape[1] == 1 and x.shape[1] > 1 and w.shape[2:] == (3, 3):  # depthwise 3x3: dwtile's estimate
            s = int((self.attrs.get("strides") or (1,))[0])
            planes = x.shape[0] * w.shape[0]
            return dwtile.work("conv", min(s, 2), planes, planes * math.prod(x.shape[2:]) // (s * s))
        flops = 2.0 * x.size * w.size / max(1, x.shape[1])  # ~ 2 * N*C*H*W * (M/C)*Cg*kh*kw (stride 1)
        if PRODUCT_WORK and (w.shape[1] > 1 or x.shape[1] == 1):  # a product (not depthwise)
            strides = self.attrs.get("strides") or (1,)
            flops /= max(1, math.prod(strides))  # per output pixel, not input pixel
            limit = serial_flops(w.shape[2:], strides, w.shape[1] * math.prod(w.shape[2:]),
                                 math.prod(x.shape[2:]) // max(1, math.prod(strides)))
            return flops * config.SERIAL_WORK / limit
        return flops

    def output_over_input(self, input_specs):
        """The memory plan's question (kernelkit.memory's kernel opt-in; ``input_specs`` the plan's, of the
        run's shapes): 3 (the fused residual Z may be the output's own memory) where
        conv_serial.RESIDUAL_IN_PLACE is on and this node's bound call will be the serial rows driver of one
        K chunk (conv_serial.residual_over); else None."""
        try:
            return 3 if conv_serial.residual_over(self, input_specs) or conv_serial.wino_over(self, input_specs) \
                else None
        except KernelkitError:  # an attribute that disagrees with the weight: the call raises it, as before
            return None

    def compute(self, x, w, b=None, z=None, *, out=None):
        """y = act(conv(x, w) + b (+ z)); z: the residual the fuse_residual pass moved into the conv
        (shaped like y), added before the activation. ``out``: the array to write y into (the
        session's arena, C-contiguous; the residual's own memory where output_over_input let the plan
        put it there: then z is copied first but on Winograd, whose output transforms read each residual
        element before they store the output's over it: conv_serial.RESIDUAL_WINO)."""
        over = z is not None and out is not None and conv_serial._same_memory(z, out)
        key = (x.shape, w.shape)
        if key != self._geom_key:
            self._geom = self._geometry(x.shape, w.shape)
            self._geom_pads = self._all_pads(x.shape, w.shape)
            self._geom_key = key
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        one_d = x.ndim == 3
        x4 = np.ascontiguousarray(x[:, :, None, :] if one_d else x)
        w4 = np.ascontiguousarray(w[:, :, None, :] if one_d else w)
        n_n, c_n, h_n, w_n = x4.shape
        m_n, cg, kh, kw = w4.shape
        group = int(self.attrs.get("group", 1))
        if c_n != cg * group or m_n % group:
            raise ValueError(f"input channels {c_n}, weight {tuple(w.shape)} and group {group} disagree")
        bias = np.zeros(m_n, x4.dtype) if b is None else np.ascontiguousarray(b, dtype=x4.dtype).reshape(m_n)
        bias = config.readonly(bias)
        if out is None:
            y = np.empty((n_n, m_n, oh_n, ow_n), x4.dtype)
        else:
            y = out[:, :, None, :] if one_d else out
            if y.shape != (n_n, m_n, oh_n, ow_n) or y.dtype != x4.dtype or not y.flags.c_contiguous:
                raise ValueError(f"out {out.shape} {out.dtype} is not the C-contiguous output {(n_n, m_n, oh_n, ow_n)}")
        code, p0, p1 = self.act
        if z is not None:
            z = config.readonly(np.ascontiguousarray(z[:, :, None, :] if one_d else z, dtype=y.dtype))
            if z.shape != y.shape:
                raise ValueError(f"the fused residual Z {tuple(z.shape)} is not shaped like the output "
                                 f"{tuple(y.shape)}")
        # the direct kernels fuse None and Clip (Relu, Relu6) only; rarer activations take one more
        # pass (inlining every activation into them cost seconds of compile time per kernel)
        inner = code if code in (NONE, CLIP) else NONE
        fused_z = True  # whether the path added z
        depthwise = cg == 1 and group > 1
        wino4 = not depthwise and winograd.usable4(kh, kw, sh, sw, dh, dw, group, oh_n, ow_n, n_n) and self._unbounded
        wino2 = not (depthwise or wino4) and (
            winograd.usable(kh, kw, sh, sw, dh, dw, group, oh_n, ow_n, self._wino_small(x4.dtype, c_n, m_n))
            and not self._direct_small(x4.dtype, group, kh, kw, m_n, oh_n, ow_n))
        if over and not (wino4 or wino2):  # (only Winograd's output transforms, of these paths, read each residual
            # element before they store the output's over it: the others a copy)
            z = config.readonly(conv_serial._copied(z))
        if depthwise:
            pads = self._geom_pads
            if sh == sw and dwtile.depthwise_fits(sh, kh, kw, (dh, dw), pads, x4.dtype) and dwtile.enabled():
                lo, hi = (p0, p1) if inner == CLIP else (-np.inf, np.inf)  # dwtile.py: bias, z, clamp fused
                fn, args = dwtile.depthwise(x4, w4, bias, y, z, sh, ph, pw, lo, hi)
                dwtile.run(fn, n_n * m_n, args, dwtile.cost_us("conv", sh, n_n * m_n, y.size))
            else:
                if z is not None:
                    inner, fused_z = NONE, False
                if kh == kw == 3 and dh == dw == 1 and pads == (1, 1, 1, 1) and sh == sw and sh in (1, 2):
                    fn = _depthwise3x3 if sh == 1 else _depthwise3x3s2
                    args = (x4, w4, bias, y, inner, p0, p1)
                else:
                    fn = _conv_depthwise
                    args = (x4, w4, bias, y, sh, sw, dh, dw, ph, pw, inner, p0, p1, x4.dtype.type(0))
                config.parallel_for(fn, n_n * m_n, args, 2.0 * y.size * kh * kw)
        elif wino4:
            u = self._transformed(w, w4, 4)
            packed = self._wino_packed(u, m_n, n_n * -(-oh_n // 4) * -(-ow_n // 4))
            winograd.conv3x3_f4(x4, u, bias, y, z, ph, pw, inner, p0, p1, self._wino_scratch, packed,
                                self._wino_ahead())
        elif wino2:
            u = self._transformed(w, w4, 2)
            packed = self._wino_packed(u, m_n, -(-oh_n // 2) * -(-ow_n // 2))
            winograd.conv3x3(x4, u, bias, y, ph, pw, inner, p0, p1, self._wino_scratch, z, packed, self._wino_ahead())
        else:
            self._w_in = w  # the constant the packed weights are kept for
            self._gemm(x4, w4, y, group, bias, z)
            inner = code
        if not fused_z or inner != code:
            y2 = y.reshape(n_n * m_n, oh_n * ow_n)
            zeros = self._zeros(n_n * m_n, y.dtype)
            if fused_z:
                bias_act_rows(y2[None], zeros, code, p0, p1)
            else:
                bias_act_block(y2, zeros, 0, n_n * m_n, 0, oh_n * ow_n, code, p0, p1, z.reshape(y2.shape))
        if out is not None:
            return out
        return y[:, :, 0, :] if one_d else y

    def serial_call(self, step):
        """The one-thread fast path of a static float32 1x1 or depthwise 3x3 convolution
        (conv_serial.py): its driver and arguments bound once. None: the general path."""
        return conv_serial.serial_call(self, step)

    def bound_compute(self):
        """``compute`` for the bound call of a convolution on more threads: the same drivers with their
        arguments bound once (conv_serial.bound_compute), sharded at each call's budget."""
        return conv_serial.bound_compute(self)

    def _transformed(self, w, w4, variant: int):
        """The Winograd transform of the weights (``variant`` 2: F(2x2, 3x3), 4: F(4x4, 3x3)), made
        once per constant: the session hands a kernel the same read-only array every run."""
        if w is not self._w_src or self._w_variant != variant:
            fn = winograd.transform_weights4 if variant == 4 else winograd.transform_weights
            self._w_src, self._w_variant, self._w_wino = w, variant, config.readonly(fn(w4))
        return self._w_wino

    def _wino_ahead(self) -> int:
        """winograd.AHEAD_ONE_THREAD as this kernel's first Winograd call found it (kept, as the bound calls keep
        their switches: a session built under a variant keeps its value)."""
        hit = self.__dict__.get("_wino_ahead_kept")
        if hit is None:
            hit = self._wino_ahead_kept = int(winograd.AHEAD_ONE_THREAD)
        return hit

    def _wino_small(self, dtype, c_n, m_n) -> bool:
        """Whether F(2x2, 3x3) also takes maps of 7x7 to 13x13 (``winograd.usable``'s ``small``): where
        its position GEMMs run on ftile's cols tiles (float32, WINO_SMALL_MIN_C+ input channels, output
        channels a multiple of the lanes), unless WINO_SMALL is off. A 512x7x7 layer then runs 16
        products of 512 x 512 x 16 (134 MFLOP) on the 8-pixel cols tile instead of one of 512 x 4608
        x 49 (231 MFLOP), and no im2col: 1.44x faster at one thread on the AMD box."""
        if not WINO_SMALL or dtype != np.float32 or c_n < WINO_SMALL_MIN_C:
            return False
        kind = ftile.choice()[0]
        return kind in ftile.COLS_LANES and m_n % ftile.COLS_LANES[kind] == 0

    def _direct_small(self, dtype, group, kh, kw, m_n, oh_n, ow_n) -> bool:
        """Whether a stride-1 convolution of a small map that F(2x2, 3x3) would take runs as the direct
        convolution instead (``direct_wins``' DIRECT_SMALL: 7x7 maps, where Winograd's transformed
        weights, 16 x M x C, come cold from memory every run)."""
        if dtype != np.float32 or group != 1 or self.act[0] not in (NONE, CLIP):
            return False
        return direct_wins(ftile.choice()[0], kh, kw, 1, 1, 1, 1, m_n, ow_n, oh_n * ow_n, 0)

    def _wino_packed(self, u, m_n, nt):
        """(kind, cols, packed panels, zeros) for Winograd's position GEMMs (M x C by C x nt tiles)
        on ftile's micro-kernels, or None for BLAS (KERNELKIT_F32_GEMM=off, no variant, float64):
        the cols tiles up to FTILE_COLS_MAX tile columns when M is a multiple of the lanes. Unless
        KERNELKIT_F32_GEMM forces a variant, inputs of fewer than WINO_FTILE_MIN_C channels stay on
        BLAS (64 x 64 x 196 at 36 positions: 0.91-0.94x BLAS's time in bench_ftile.py)."""
        kind, forced = ftile.choice() if u.dtype == np.float32 else (None, False)
        if kind is None or (not forced and u.shape[2] < WINO_FTILE_MIN_C):
            return None
        cols = ftile.cols_mode(kind, nt) if ftile_cols(kind, m_n, nt, u.shape[2]) else 0
        width = ftile.COLS_WIDTH[kind] if cols else ftile.MR[kind]
        hit = self.__dict__.get("_wino_pack")
        if hit is None or hit[0] is not u or hit[1] != width:
            hit = self._wino_pack = (u, width, config.readonly(ftile.pack_batched(u, width)))
        return kind, cols, hit[2], self._zeros(m_n, np.float32)

    def _zeros(self, n, dtype):
        """A read-only array of n zeros, kept between calls."""
        hit = self.__dict__.get("_zeros_kept")
        if hit is None or hit.shape != (n,) or hit.dtype != dtype:
            hit = self._zeros_kept = config.readonly(np.zeros(n, dtype))
        return hit

    def _gemm(self, x4, w4, y, group, bias, z=None):
        """Per image and group: im2col (sharded over column-matrix rows), then the GEMM cut into
        (output-channel block, pixel block) tiles, each one BLAS call at one thread writing its
        block of the NCHW output, followed at once by the bias + activation of that block."""
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n, h_n, w_n = x4.shape
        m_n, cg, kh, kw = w4.shape
        mg, k_n, l_n = m_n // group, cg * kh * kw, oh_n * ow_n
        wmat = w4.reshape(group, mg, k_n)
        self._kernel_hw = (kh, kw)
        code, p0, p1 = self.act
        direct = kh == kw == sh == sw == 1 and ph == pw == 0 and (oh_n, ow_n) == (h_n, w_n)
        if direct and l_n == 1 and group == 1 and z is None:
            self._gemm_pixel(x4, wmat[0], y, bias)
            return
        kind = self._ftile_kind(group, code, kh, kw, sh, sw, mg, k_n, l_n, x4.dtype)
        if group > 1 and group * k_n * l_n * x4.itemsize <= _GROUPED_COL_BYTES:
            self._gemm_grouped(x4, wmat, y, bias, z, direct)
            return
        if kind is not None and group == 1 and direct_wins(kind, kh, kw, sh, sw, dh, dw, mg, ow_n, l_n, k_n):
            self._gemm_direct(x4, wmat[0], y, bias, z)
            return
        if kind is not None and group == 1 and gather_wins(kind, kh, kw, sh, sw, dh, dw, ow_n, k_n, mg, l_n):
            self._gemm_gather(x4, wmat[0], y, bias, z, kind)
            return
        blocked = not direct and k_n * l_n * x4.itemsize > _COL_BYTES and l_n >= _BLOCKED_MIN_COLS
        if blocked:
            self._gemm_blocked(x4, wmat, y, group, bias, z, kind)
            return
        if kind is not None:
            cols = ftile_cols(kind, mg, l_n, k_n) or (group == 1 and unfilled_cols(kind, kh, kw, sh, sw, dh, dw, mg,
                                                                                   ow_n, k_n))
            self._gemm_ftile(x4, wmat[0], y, bias, z, direct, kind, cols)
            return
        if not direct and (self._col is None or self._col.shape != (k_n, l_n) or self._col.dtype != x4.dtype):
            self._col = np.empty((k_n, l_n), x4.dtype)
        tiles = min(config.shard_count(mg * l_n, 2.0 * mg * k_n * l_n, unit=config.MIN_TILE_WORK),
                    _GEMM_TILES_PER_THREAD * config.current_threads())
        if l_n <= _NT_MAX_COLS and mg >= _NT_MIN_ROWS:
            self._gemm_nt(x4, wmat, y, group, bias, z, direct, tiles)
            return
        m_tiles, p_tiles = tile_grid(mg, l_n, tiles)
        for n in range(n_n):
            for g in range(group):
                xs = x4[n, g * cg:(g + 1) * cg]
                if direct:
                    col = xs.reshape(k_n, l_n)
                else:
                    col = self._col
                    config.parallel_for(_im2col, k_n, (xs, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n),
                                        _IM2COL_WORK * k_n * l_n)
                ymat = y[n, g * mg:(g + 1) * mg].reshape(mg, l_n)
                zmat = None if z is None else z[n, g * mg:(g + 1) * mg].reshape(mg, l_n)
                wg, bg = wmat[g], bias[g * mg:(g + 1) * mg]

                def tile(t, wg=wg, col=col, ymat=ymat, bg=bg, zmat=zmat):
                    mt, pt = divmod(t, p_tiles)
                    r0, r1 = mt * mg // m_tiles, (mt + 1) * mg // m_tiles
                    c0, c1 = _edge(pt, p_tiles, l_n), _edge(pt + 1, p_tiles, l_n)
                    if p_tiles == 1:
                        np.dot(wg[r0:r1], col, out=ymat[r0:r1])
                    else:
                        np.matmul(wg[r0:r1], col[:, c0:c1], out=ymat[r0:r1, c0:c1])
                    bias_act_block(ymat, bg, r0, r1, c0, c1, code, p0, p1, zmat)

                if m_tiles * p_tiles == 1:  # one tile: on this thread, no pool hand-off
                    tile(0)
                else:
                    config.run_shards(tile, m_tiles * p_tiles)


    def _gemm_pixel(self, x4, w2, y, bias):
        """A 1x1 convolution of 1x1 maps (squeeze-and-excitation's two convolutions after the global
        pool): the images' pixels as the rows of one BLAS product, (N, C) @ w2.T, a matrix-vector
        product at batch 1 as the reference runs it, then bias + activation per column in one Numba
        pass. The micro-kernels' tiles would spend 31 of their 32 pixel lanes on nothing
        (EfficientNet's 48 -> 1152: 62 against the reference's 24 us)."""
        n_n, m_n = y.shape[:2]
        code, p0, p1 = self.act
        y2 = y.reshape(n_n, m_n)
        np.matmul(x4.reshape(n_n, -1), w2.T, out=y2)
        if code == NONE:
            y2 += bias
        else:
            scale_bias_act_cols(y2, y.dtype.type(1), bias, y.dtype.type(1), code, p0, p1)

    def _gemm_grouped(self, x4, wmat, y, bias, z, direct):
        """Grouped (not depthwise) convolution, as RegNet's and ResNeXt's 3x3 layers: one im2col of
        every channel (its rows are the groups' column matrices one after another), then the
        groups' products as batched matmuls over shards of groups, each shard followed by the
        epilogue of its output rows. One group at a time cost three calls a group (55 groups of
        8 channels: 0.55 ms against the reference's 0.25 for a 440 x 7 x 7 layer)."""
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n = x4.shape[:2]
        group, mg, k_n = wmat.shape
        kh, kw = self._kernel_hw
        l_n, m_n = oh_n * ow_n, group * mg
        code, p0, p1 = self.act
        shards = config.shard_count(group, 2.0 * m_n * k_n * l_n, unit=config.MIN_TILE_WORK)
        row_bytes = group * k_n * ow_n * x4.itemsize
        if (_GROUPED_CHUNK_BYTES and not direct and shards <= 1 and sh * sw > 1
                and row_bytes * oh_n > _GROUPED_ROWS_MIN_BYTES):
            self._grouped_rows(x4, wmat, y, bias, z, max(1, _GROUPED_CHUNK_BYTES // row_bytes))
            return
        for n in range(n_n):
            if direct:
                cols = x4[n].reshape(group, k_n, l_n)
            else:
                buf = config.thread_buffer("conv_grouped", group * k_n * l_n, x4.dtype).reshape(group * k_n, l_n)
                if sh == sw == dh == dw == 1 and config.shard_count(group * k_n, 2.0 * group * k_n * l_n) <= 1:
                    hp, wp = oh_n + kh - 1, ow_n + kw - 1
                    xp = config.thread_buffer("conv_padded", c_n * hp * wp, x4.dtype).reshape(c_n, hp, wp)
                    _im2col_padded(x4[n], xp, buf, kh, kw, ph, pw, oh_n, ow_n)
                else:
                    config.parallel_for(_im2col, group * k_n, (x4[n], buf, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n),
                                        2.0 * group * k_n * l_n)
                cols = buf.reshape(group, k_n, l_n)
            yg = y[n].reshape(group, mg, l_n)
            ymat = y[n].reshape(m_n, l_n)
            zmat = None if z is None else z[n].reshape(m_n, l_n)

            def shard(t, cols=cols, yg=yg, ymat=ymat, zmat=zmat):
                g0, g1 = t * group // shards, (t + 1) * group // shards
                np.matmul(wmat[g0:g1], cols[g0:g1], out=yg[g0:g1])
                bias_act_block(ymat, bias, g0 * mg, g1 * mg, 0, l_n, code, p0, p1, zmat)

            if shards <= 1:
                shard(0)
            else:
                config.run_shards(shard, shards)

    def _grouped_rows(self, x4, wmat, y, bias, z, rows):
        """``_gemm_grouped`` at one thread for a column matrix over _GROUPED_CHUNK_BYTES: blocks of
        ``rows`` output rows, each one im2col of its rows (every group) into a buffer that stays in
        L2, the groups' batched product into those rows' columns of y, then their epilogue. The whole
        matrix at once (RegNetY's 3x3/2 with 6 groups from 48x112x112: 5.4 MB) went through memory
        between the copy and the product, and inside the model ran behind the reference's row tiles."""
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n, m_n = y.shape[:2]
        group, mg, k_n = wmat.shape
        kh, kw = self._kernel_hw
        l_n = oh_n * ow_n
        code, p0, p1 = self.act
        size = group * k_n * rows * ow_n
        for n in range(n_n):
            yg = y[n].reshape(group, mg, l_n)
            ymat = y[n].reshape(m_n, l_n)
            zmat = None if z is None else z[n].reshape(m_n, l_n)
            for oh0 in range(0, oh_n, rows):
                oh1 = min(oh_n, oh0 + rows)
                c0, c1 = oh0 * ow_n, oh1 * ow_n
                buf = config.thread_buffer("conv_grouped", size, x4.dtype)[:group * k_n * (c1 - c0)]
                col = buf.reshape(group * k_n, c1 - c0)
                _im2col_rows(x4[n], col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, oh0, oh1, 0, group * k_n)
                np.matmul(wmat, col.reshape(group, k_n, c1 - c0), out=yg[:, :, c0:c1])
                bias_act_block(ymat, bias, 0, m_n, c0, c1, code, p0, p1, zmat)

    def _ftile_kind(self, group, code, kh, kw, sh, sw, mg, k_n, l_n, dtype):
        """The ftile.py micro-kernel kind for this convolution, or None for BLAS: one group, float32,
        an epilogue the tile fuses (none, Relu, Clip), and a shape class where it measured faster
        (``ftile_wins``) unless KERNELKIT_F32_GEMM forces a variant."""
        if group != 1 or dtype != np.float32 or code not in (NONE, CLIP):
            return None
        kind, forced = ftile.choice()
        if kind is None or forced:
            return kind
        return kind if ftile_wins(kh, kw, sh, sw, mg, k_n, l_n) else None

    def _ftile_weights(self, w2, width):
        """w2 (M, K) packed into panels of ``width`` rows, once per constant weight."""
        hit, w = self._fpacked, self._w_in
        if hit is None or hit[0] is not w or hit[1] != width or w.flags.writeable:
            hit = self._fpacked = (w, width, config.readonly(ftile.pack_weights(w2, width)))
        return hit[2]

    def _ftile_args(self, y, bias, z, width, wmat):
        """The arguments every conv_tiles / conv_cols call of this convolution shares."""
        code, p0, p1 = self.act
        lo, hi = (p0, p1) if code == CLIP else (np.float32(-np.inf), np.float32(np.inf))
        m_n = y.shape[1]
        zero = self._zeros(m_n, y.dtype)
        return self._ftile_weights(wmat, width), zero, _no_z() if z is None else z, np.float32(lo), np.float32(hi)

    def _gemm_ftile(self, x4, w2, y, bias, z, direct, kind, cols):
        """One group on the float32 micro-kernels: the pixels read from the NCHW input itself (1x1
        stride 1) or from the im2col matrix, bias + residual + Relu/Clip applied in the registers,
        written straight into y. ``cols``: ftile.conv_cols (few pixels: the channels in the vector
        lanes, each pixel broadcast), sharded over panels of 48 channels; else ftile.conv_tiles
        (the weights broadcast, the pixels in the lanes), sharded over pixel blocks."""
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n = x4.shape[0]
        m_n, k_n = w2.shape
        kh, kw = self._kernel_hw
        if implicit_wins(kind, kh, kw, sh, sw, dh, dw, ow_n, k_n):
            self._gemm_implicit(x4, w2, y, bias, z, kind)
            return
        l_n = oh_n * ow_n
        if not cols:
            kind = ftile.rows_kind(kind, m_n)
        width = ftile.COLS_WIDTH[kind] if cols else ftile.MR[kind]
        wp, zero, zz, lo, hi = self._ftile_args(y, bias, z, width, w2)
        key = (kind, cols, m_n, k_n, l_n, ftile.BALANCED_PLAN, config.current_threads())
        hit = self.__dict__.get("_fplan")
        if hit is None or hit[0] != key:  # kept while the shapes and the thread budget stay
            hit = self._fplan = (key, ftile.plan(kind, m_n, k_n, l_n, key[-1]), -(-m_n // width))
        (block, blocks, groups, kc), panels = hit[1], hit[2]
        threads = key[-1]
        for n in range(n_n):
            im2col = None
            if direct:
                xs = x4[n].reshape(-1)
            else:
                if self._col is None or self._col.shape != (k_n, l_n) or self._col.dtype != x4.dtype:
                    self._col = np.empty((k_n, l_n), x4.dtype)
                im2col = (x4[n], self._col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)
                if not (PHASED and threads > 1):
                    config.parallel_for(_im2col, k_n, im2col, _IM2COL_WORK * k_n * l_n)
                    im2col = None
                xs = config.readonly(self._col.reshape(-1))
            zn = zz.reshape(-1) if z is None else zz[n].reshape(-1)
            work = 2.0 * m_n * k_n * l_n
            if cols:
                args = (kind, wp, k_n, m_n, xs, l_n, l_n, bias, zn, z is not None, lo, hi, y[n].reshape(-1), l_n,
                        ftile.COLS_KC)
                kernel, total, size = ftile.conv_cols, panels, ftile.scratch_size(kind, True, l_n)
            else:
                pack = ftile.pack_rows(m_n, k_n, l_n)
                args = (kind, wp, k_n, m_n, xs, 0, l_n, l_n, bias, zero, zn, z is not None, lo, hi, y[n].reshape(-1),
                        0, l_n, block, groups, kc, pack)
                kernel, total = ftile.conv_tiles, blocks * groups
                size = ftile.scratch_size(kind, False, l_n, block, kc, pack)
            if im2col is None:
                ftile.run_sharded(kernel, total, args, work, size)
                continue
            config.run_phases([config.phase_for(_im2col, k_n, im2col,
                                                config.phase_count(k_n, _IM2COL_WORK * k_n * l_n, threads)),
                               ftile_part(kernel, total, args, work, size)])

    def _gemm_implicit(self, x4, w2, y, bias, z, kind):
        """A strided convolution as an implicit GEMM (ftile.conv_implicit): per image the input's
        column phases, zero-padded (ftile.phases_padded, about the input's size), then the rows
        tiles read every row of the product through a table of per-k offsets into them: no im2col
        and no copy into tile order. Sharded over output rows."""
        (sh, _), _, (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n = x4.shape[:2]
        m_n, k_n = w2.shape
        kh, kw = self._kernel_hw
        wp, _, zz, lo, hi = self._ftile_args(y, bias, z, ftile.MR[kind], w2)
        key = (c_n, kh, kw, sh, ph, pw, oh_n, ow_n)
        hit = self.__dict__.get("_implicit")
        if hit is None or hit[0] != key:
            hp, qp, pl, step, koff = ftile.implicit_geometry(c_n, kh, kw, sh, ph, pw, oh_n, ow_n)
            hit = self._implicit = (key, (hp, qp, pl, step, config.readonly(koff)), np.empty(sh * c_n * hp * qp,
                                                                                            np.float32))
        (hp, qp, pl, step, koff), xpp = hit[1], hit[2]
        work = 2.0 * m_n * k_n * oh_n * ow_n
        for n in range(n_n):
            zn = zz.reshape(-1) if z is None else zz[n].reshape(-1)
            args = (kind, wp, k_n, m_n, config.readonly(xpp), koff, step, ow_n, bias, zn, z is not None, lo, hi,
                    y[n].reshape(-1), oh_n * ow_n)
            implicit_phases(config.readonly(x4[n]), xpp, sh, ph, pl, hp, qp, args, oh_n, work)

    def _gemm_direct(self, x4, w2, y, bias, z):
        """A strided convolution as fdirect.py's direct convolution (the output channels in the lanes,
        each output pixel's input value broadcast from the zero-padded input: no im2col, no copy into
        tile order). Per image the padding, then the tiles sharded over (48-channel panel, block of
        output rows); at 2+ threads both as one job of two phases (PHASED)."""
        (sh, _), _, (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n = x4.shape[:2]
        m_n, k_n = w2.shape
        kh, kw = self._kernel_hw
        threads = config.current_threads()
        shape = self.__dict__.get("_direct_shape")  # (fdirect.TILE_ONE_THREAD read when the layer is first planned)
        if shape is None or shape[0] != (m_n, ow_n, threads):
            shape = self._direct_shape = ((m_n, ow_n, threads), fdirect.tile_shape(m_n, ow_n, threads))
        cv, mp = shape[1]
        wp, _, zz, lo, hi = self._ftile_args(y, bias, z, 16 * cv, w2)
        key = (c_n, kh, kw, sh, ph, pw, oh_n, ow_n, m_n, threads, cv, mp)
        hit = self.__dict__.get("_direct")
        if hit is None or hit[0] != key:
            hp, wpad, step, koff = fdirect.geometry(c_n, kh, kw, sh, oh_n, ow_n)
            hit = self._direct = (key, (hp, wpad, step, config.readonly(koff)), np.empty(c_n * hp * wpad, np.float32),
                                  fdirect.plan(m_n, k_n, oh_n, threads, cv), fdirect.AHEAD if threads == 1 else 0)
        (hp, wpad, step, koff), xp, (total, rb, kc), ahead = hit[1:5]
        size = fdirect.scratch_size(k_n, kc, oh_n, ow_n, rb, cv, mp)
        work = 2.0 * m_n * k_n * oh_n * ow_n
        pad = (fdirect.pad_planes, c_n, _IM2COL_WORK * xp.size)
        for n in range(n_n):
            zn = zz.reshape(-1) if z is None else zz[n].reshape(-1)
            args = (sh, cv, mp, ahead, wp, k_n, m_n, config.readonly(xp), koff, step, ow_n, oh_n, rb, bias, zn,
                    z is not None, lo, hi, y[n].reshape(-1), kc)
            direct_phases(config.readonly(x4[n]), xp, ph, pw, hp, wpad, args, total, work, size, pad)

    def _gemm_gather(self, x4, w2, y, bias, z, kind):
        """A strided convolution of deep K (ResNet's 3x3/2 layers) on the rows tiles, each pixel block's
        rows copied into tile order straight from the input's padded column phases
        (ftile.conv_gather): no im2col matrix. Sharded as conv_tiles (ftile.plan)."""
        (sh, _), _, (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n = x4.shape[:2]
        m_n, k_n = w2.shape
        kh, kw = self._kernel_hw
        l_n = oh_n * ow_n
        kind = ftile.rows_kind(kind, m_n)
        wp, zero, zz, lo, hi = self._ftile_args(y, bias, z, ftile.MR[kind], w2)
        key = (kind, c_n, kh, kw, sh, ph, pw, oh_n, ow_n, m_n, config.current_threads())
        hit = self.__dict__.get("_gather")
        if hit is None or hit[0] != key:
            hp, qp, pl, step, koff = ftile.implicit_geometry(c_n, kh, kw, sh, ph, pw, oh_n, ow_n)
            hit = self._gather = (key, (hp, qp, pl, step, config.readonly(koff)),
                                  np.empty(sh * c_n * hp * qp, np.float32), ftile.plan(kind, m_n, k_n, l_n, key[-1]))
        (hp, qp, pl, step, koff), xpp, (block, blocks, groups, kc) = hit[1], hit[2], hit[3]
        work = 2.0 * m_n * k_n * l_n
        for n in range(n_n):
            config.parallel_for(ftile.phases_padded, c_n, (config.readonly(x4[n]), xpp, sh, ph, pl, hp, qp),
                                _IM2COL_WORK * xpp.size)
            zn = zz.reshape(-1) if z is None else zz[n].reshape(-1)
            args = (kind, wp, k_n, m_n, config.readonly(xpp), koff, step, ow_n, l_n, bias, zero, zn, z is not None,
                    lo, hi, y[n].reshape(-1), l_n, block, groups, kc)
            ftile.run_sharded(ftile.conv_gather, blocks * groups, args, work, block * kc)

    def _gemm_nt(self, x4, wmat, y, group, bias, z, direct, tiles):
        """Few output pixels (7x7 maps), many weight rows: the columns transposed (one row of K
        values per output pixel) and ``gemm_nt_rows``, which reads each weight once, cut into
        shards of output channels, each followed by its epilogue."""
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n = x4.shape[:2]
        mg, k_n = wmat.shape[1:]
        cg, (kh, kw) = c_n // group, self._kernel_hw
        l_n = oh_n * ow_n
        code, p0, p1 = self.act
        groups = -(-mg // 4)
        shards = max(1, min(groups, tiles))
        for n in range(n_n):
            for g in range(group):
                xs = x4[n, g * cg:(g + 1) * cg]
                if direct:
                    colt = np.ascontiguousarray(xs.reshape(k_n, l_n).T)
                else:
                    if self._col is None or self._col.shape != (k_n, l_n) or self._col.dtype != x4.dtype:
                        self._col = np.empty((k_n, l_n), x4.dtype)
                    _im2col(xs, self._col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, 0, k_n)
                    colt = np.ascontiguousarray(self._col.T)
                ymat = y[n, g * mg:(g + 1) * mg].reshape(mg, l_n)
                zmat = None if z is None else z[n, g * mg:(g + 1) * mg].reshape(mg, l_n)
                wg, bg = wmat[g], bias[g * mg:(g + 1) * mg]

                def shard(t, wg=wg, colt=colt, ymat=ymat, bg=bg, zmat=zmat):
                    g0, g1 = t * groups // shards, (t + 1) * groups // shards
                    gemm_nt_rows(wg, colt, ymat, _NT_K_CHUNK, g0, g1)
                    bias_act_block(ymat, bg, 4 * g0, min(mg, 4 * g1), 0, l_n, code, p0, p1, zmat)

                if shards == 1:
                    shard(0)
                else:
                    config.run_shards(shard, shards)

    def _gemm_blocked(self, x4, wmat, y, group, bias, z, kind=None):
        """im2col + GEMM in blocks of output rows whose columns fill about ``_COL_BLOCK_BYTES``,
        each block packed, multiplied and finished by one shard before the next: a large column
        matrix (the 7x7 stem's is 147 x 12544, 7.4 MB) is never written to memory whole. Strided
        convolutions with wide outputs pack from the input's column phases (``_im2col_phases``)."""
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n = x4.shape[:2]
        mg, k_n = wmat.shape[1:]
        cg, kh, kw = c_n // group, *self._kernel_hw
        l_n = oh_n * ow_n
        code, p0, p1 = self.act
        if kind is not None and implicit_wins(kind, kh, kw, sh, sw, dh, dw, ow_n, k_n):  # the stem
            self._gemm_implicit(x4, wmat[0], y, bias, z, kind)
            return
        rows = max(1, min(oh_n, _COL_BLOCK_BYTES // (k_n * x4.itemsize * ow_n)))
        threads = config.current_threads()
        if threads > 1:  # at least two blocks a thread: a block is one shard
            rows = max(1, min(rows, -(-oh_n // (2 * threads))))
        blocks = -(-oh_n // rows)
        phased = sw > 1 and ow_n >= _PHASES_MIN_COLS
        if kind is not None:  # the float32 micro-kernel instead of BLAS + the epilogue pass (one group)
            kind = ftile.rows_kind(kind, mg)
            wp, zero, zz, lo, hi = self._ftile_args(y, bias, z, ftile.MR[kind], wmat[0])
        for n in range(n_n):
            for g in range(group):
                xs = x4[n, g * cg:(g + 1) * cg]
                xph = column_phases(xs, sw) if phased else xs
                ymat = y[n, g * mg:(g + 1) * mg].reshape(mg, l_n)
                zmat = None if z is None else z[n, g * mg:(g + 1) * mg].reshape(mg, l_n)
                wg, bg = wmat[g], bias[g * mg:(g + 1) * mg]

                def block(t, xs=xs, xph=xph, wg=wg, ymat=ymat, bg=bg, zmat=zmat):
                    oh0, oh1 = t * rows, min(oh_n, (t + 1) * rows)
                    c0, c1 = oh0 * ow_n, oh1 * ow_n
                    buf = config.thread_buffer("conv_columns", k_n * (c1 - c0), x4.dtype).reshape(k_n, c1 - c0)
                    if phased:
                        _im2col_phases(xph, buf, kh, kw, sh, sw, dh, dw, ph, pw, xs.shape[2], oh_n, ow_n, oh0, oh1,
                                       0, k_n)
                    else:
                        _im2col_rows(xs, buf, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, oh0, oh1, 0, k_n)
                    if kind is not None:
                        cols = c1 - c0
                        fb, _, fg, kc = ftile.plan(kind, mg, k_n, cols, 1)
                        zn = zz.reshape(-1) if zmat is None else zmat.reshape(-1)
                        pack = ftile.pack_rows(mg, k_n, cols)
                        xp = config.thread_buffer("ftile", ftile.scratch_size(kind, False, cols, fb, kc, pack),
                                                  np.float32)
                        ftile.conv_tiles(kind, wp, k_n, mg, config.readonly(buf.reshape(-1)), 0, cols, cols, bg, zero,
                                         zn, zmat is not None, lo, hi, ymat.reshape(-1), c0, l_n, fb, fg, kc, pack, xp,
                                         0, -(-cols // fb) * fg)
                        return
                    np.matmul(wg, buf, out=ymat[:, c0:c1])
                    bias_act_block(ymat, bg, 0, mg, c0, c1, code, p0, p1, zmat)

                config.run_shards(block, blocks)


_GEMM_TILES_PER_THREAD = 1  # BLAS tiles of one conv GEMM per thread: each call repacks its panels, and on
# the Xeon 4 a thread left ResNet-18 at 2 threads no faster than at 1 (39.2 vs 38.2 ms; 1: 28.4 ms)
# At 2+ threads the copies before a product (im2col, the implicit GEMM's padded phases) and the
# product run as one job of two phases (config.run_phases, issue 11, session 9): the copies below two
# minimum shards (ResNet's 3x3/2 layers on 14x14 and 7x7, the stem's phases: 0.1-0.16 ms on the AMD
# box) ran on the calling thread alone, and each was a job of its own otherwise. False: calls in a row.
PHASED = True


def ftile_part(kernel, total: int, args: tuple, work: float, size: int):
    """ftile.run_sharded's shards of ``kernel`` as ``(fn, count)``, a phase of config.run_phases; the
    shards large first and small last (config.guided)."""
    count = config.shard_count(total, work, unit=ftile.SHARD_UNIT)
    bounds = config.guided(total, count, config.current_threads())

    def shard(i):
        kernel(*args, config.thread_buffer("ftile", size, np.float32), bounds[i], bounds[i + 1])

    return shard, len(bounds) - 1


def implicit_phases(xn, xpp, s, ph, pl, hp, qp, args, oh_n: int, work: float) -> None:
    """One image of the implicit GEMM: the input's padded column phases into ``xpp``
    (ftile.phases_padded), then ftile.conv_implicit over the output rows with ``args`` (its arguments
    before the scratch); at 2+ threads as one job of two phases (PHASED)."""
    c_n = xn.shape[0]
    threads = config.current_threads()
    if PHASED and threads > 1:
        config.run_phases([config.phase_for(ftile.phases_padded, c_n, (xn, xpp, s, ph, pl, hp, qp),
                                             config.phase_count(c_n, _IM2COL_WORK * xpp.size, threads)),
                           ftile_part(ftile.conv_implicit, oh_n, args, work, 1)])
        return
    config.parallel_for(ftile.phases_padded, c_n, (xn, xpp, s, ph, pl, hp, qp), _IM2COL_WORK * xpp.size)
    ftile.run_sharded(ftile.conv_implicit, oh_n, args, work, 1)


def direct_phases(xn, xp, ph, pw, hp, wpad, args, total: int, work: float, size: int, pad) -> None:
    """One image of fdirect.conv: the zero-padded input into ``xp`` (fdirect.pad_planes over the
    channels), then the tiles' shards (``args``: fdirect.conv's arguments before the scratch); at 2+
    threads one job of two phases (PHASED), as implicit_phases."""
    fn, c_n, pad_work = pad
    threads = config.current_threads()
    if PHASED and threads > 1:
        config.run_phases([config.phase_for(fn, c_n, (xn, xp, ph, pw, hp, wpad), config.phase_count(c_n, pad_work,
                                                                                                     threads)),
                           ftile_part(fdirect.conv, total, args, work, size)])
        return
    config.parallel_for(fn, c_n, (xn, xp, ph, pw, hp, wpad), pad_work)
    ftile.run_sharded(fdirect.conv, total, args, work, size)


def direct_wins(kind, kh, kw, sh, sw, dh, dw, mg, ow_n, l_n, k_n) -> bool:
    """Whether a (float32, one group, ftile) convolution runs as ``_gemm_direct`` (fdirect.py): DIRECT
    on and fdirect.fits (avx512, not 1x1, 64+ output channels in multiples of 16, output rows of 7+
    pixels), undilated, strided both ways alike (K of at least DIRECT_MIN_K), or stride 1 on maps of
    at most DIRECT_SMALL_PIXELS output pixels (DIRECT_SMALL): ResNet's 3x3/2 layers and the 7x7/2 stem,
    which ran 1.65-2.26x onnxruntime on the Xeon through the gather, im2col and implicit-GEMM paths,
    and the 512@7 3x3 layers (1.29-1.33x there on F(2x2, 3x3) Winograd) (session 10)."""
    if not (DIRECT and dh == dw == 1 and sh == sw and fdirect.fits(kind, kh, kw, mg, ow_n)):
        return False
    if sh == 1:
        return DIRECT_SMALL and l_n <= DIRECT_SMALL_PIXELS
    return k_n >= DIRECT_MIN_K and not direct_unfilled(kind, mg, ow_n)


def unfilled_cols(kind, kh, kw, sh, sw, dh, dw, mg, ow_n, k_n) -> bool:
    """Whether a strided layer that fdirect leaves for its fill (``direct_unfilled``) runs im2col + the
    cols tiles (UNFILLED_COLS; their 7-pixel tiles run over all the output pixels, not a row: the
    detection head's 10 x 10 as 15 tiles, 105 pixels) rather than the rows tiles, where they take its
    channels (a multiple of the lanes) and K (FTILE_COLS_MIN_K). Maps large enough for
    ``_gemm_blocked`` take that first."""
    return (UNFILLED_COLS and DIRECT and dh == dw == 1 and sh == sw >= 2 and kind in ftile.COLS_LANES
            and mg % ftile.COLS_LANES[kind] == 0 and k_n >= FTILE_COLS_MIN_K
            and fdirect.fits(kind, kh, kw, mg, ow_n) and direct_unfilled(kind, mg, ow_n))


def direct_unfilled(kind, mg, ow_n) -> bool:
    """Whether fdirect's tiles would fill a strided layer's output rows of ``ow_n`` pixels by less than
    DIRECT_MIN_FILL (its tiles are 7 or 8 pixels of one row: rows of 10 pixels run as 14). Such a
    layer takes im2col + ftile's tiles (``_gemm_ftile``, ``unfilled_cols``), not the gather either
    (``gather_wins``)."""
    mp = fdirect.tile_shape(mg, ow_n)[1]
    return kind == fdirect.KIND and ow_n < DIRECT_MIN_FILL * (-(-ow_n // mp) * mp)




_IM2COL_WORK = 24.0  # work units (~25 ps each, see winograd._TRANSFORM_WORK) per column-matrix element:
# the copy ran 0.3-1.0 ns an element on the AMD box (7x7 maps the slowest); at 2.0 every im2col of
# ResNet-18 (0.02-0.23 ms) stayed on one thread at two (issue 11, session 6)
_NT_MAX_COLS = 64  # output pixels (7x7 maps) up to which weights of _NT_MIN_ROWS+ rows run gemm_nt_rows
_NT_MIN_ROWS = 64
_NT_K_CHUNK = 2048
_COL_BYTES = 1 << 20  # column matrices larger than this are packed and multiplied in blocks
_COL_BLOCK_BYTES = 1 << 21  # the column block of one shard (L2 + L3): 512 KiB blocks ran the 7x7/2 stem
# and 3x3/2 64->128 at 56x56 1.0-1.05x slower at one thread (benchmarks/bench_conv_blocks.py)
_PHASES_MIN_COLS = 64  # strided convs with this many output columns pack from column phases (the
# 7x7/2 stem's columns: 0.25 vs 0.54 ms at one thread); at 28 columns (3x3/2 on 56x56) they tie
_GROUPED_COL_BYTES = 1 << 23  # grouped convs with all groups' columns up to this take one batched pass
_GROUPED_CHUNK_BYTES = 1 << 20  # strided grouped convs at one thread: columns of output rows up to this
# a block (_grouped_rows); 0 turns the blocks off. 512 KiB blocks: RegNetY's 3x3/2 g6 from 48@112 0.83
# vs 0.85 ms, but more, smaller batched products for the later stages (g26 from 208@28 0.28 -> 0.37 ms)
_GROUPED_ROWS_MIN_BYTES = 1 << 22  # ... when all groups' columns exceed this (in the model, 2.9 MB for
# g13 from 104@56 ran alike, 1.5 MB for g26 from 208@28 0.86x in blocks of 1 MiB)
_BLOCKED_MIN_COLS = 128  # fewer output pixels (7x7 maps): one GEMM over the whole column matrix


def ftile_wins(kh, kw, sh, sw, mg, k_n, l_n) -> bool:
    """Whether the float32 micro-kernel (ftile.py) measured faster than BLAS + the epilogue pass for
    this shape class (benchmarks/bench_ftile.py; docs/numba.md "fp32 micro-kernels"): all but the
    output pixel counts in _FTILE_BLAS_PIXELS."""
    return not _FTILE_BLAS_PIXELS[0] < l_n <= _FTILE_BLAS_PIXELS[1]


_FTILE_BLAS_PIXELS = (0, 0)  # output pixels (exclusive, inclusive) left to BLAS: none


def implicit_wins(kind, kh, kw, sh, sw, dh, dw, ow_n, k_n) -> bool:
    """Whether a (float32, one group, ftile) convolution runs as conv.py's implicit GEMM
    (``_gemm_implicit``): strided both ways alike, undilated, output rows of at least
    IMPLICIT_MIN_OW pixels (a tile covers 32 pixels of one row), K up to IMPLICIT_MAX_K (few input
    channels: the stems), a variant with the offset-table tiles (avx2, avx512), IMPLICIT on; not 1x1 (its
    im2col is one strided copy of a quarter of the input, the padded phases the whole input twice:
    0.33 vs 0.19 ms for 64 -> 128 on 56x56 on the AMD box)."""
    return (IMPLICIT and kind in (1, 2) and sh == sw >= 2 and dh == dw == 1 and ow_n >= IMPLICIT_MIN_OW
            and k_n <= IMPLICIT_MAX_K and kh * kw > 1)


def gather_wins(kind, kh, kw, sh, sw, dh, dw, ow_n, k_n, mg, l_n) -> bool:
    """Whether a (float32, one group, ftile) convolution runs as ``_gemm_gather`` (rows copied into tile
    order from the input's column phases, no im2col): GATHER on, strided both ways alike, undilated,
    not 1x1 (its im2col is one strided copy of a quarter of the input), K deeper than the implicit
    GEMM takes (IMPLICIT_MAX_K: the stems), a map too large for the cols tiles, a variant with the
    rows tiles in IR (avx2, avx512). On the Xeon ResNet-50's 3x3/2 layers ran 1.7-2.0x onnxruntime
    through im2col + the copy into tile order, ~1 ms a layer above their GEMM alone (session 9)."""
    return (GATHER and kind in (1, 2) and sh == sw >= 2 and dh == dw == 1 and kh * kw > 1
            and not implicit_wins(kind, kh, kw, sh, sw, dh, dw, ow_n, k_n)
            and not ftile_cols(kind, mg, l_n, k_n)
            and not (DIRECT and fdirect.fits(kind, kh, kw, mg, ow_n) and direct_unfilled(kind, mg, ow_n)))


GATHER = True


# A convolution that is a product (not depthwise) goes to the shard pool from PRODUCT_FLOPS flops,
# not from config.SERIAL_WORK: MobileNetV2's 1x1 layers (10-30 MFLOP, 0.1-0.4 ms) ran on one thread
# at every thread count. On the Xeon at two threads (trace_nodes.py, issue 11, session 7) its
# layers of 14-40 MFLOP ran 1.15-1.5x faster, those of 9.6 MFLOP (0.13 ms) at par. Off: the old estimate.
PRODUCT_WORK = True
PRODUCT_FLOPS = 1.2e7
# The fp32 serial limits per layer kind (issue 11, session 8, "MobileNetV2 at two threads" in
# docs/numba.md): the flops (output pixels) below which a product stays on the calling thread at
# any thread count (Conv.work; the bound call then takes Conv.serial_call: no pool job, and no
# heartbeat wake-up in a session without jobs). 1x1 layers, layers on maps of at most
# FTILE_COLS_MAX pixels (7x7) and the implicit-GEMM stems below 2**26 flops: on the Xeon
# MobileNetV2's 20 pooled layers (12-40 MFLOP, 0.1-0.45 ms) summed to ~1.4x their 1-thread time in
# shards (caller 3.67 + worker 3.32 ms a run) and its default (2t) ran 1.34x its 1-thread time;
# ResNet's 1x1/2 shortcuts (12.8 MFLOP) ran at par. int8 has the same rule (qconv.INT8_CONV_WORK).
# ResNet's 3x3 layers (115-236 MFLOP) and ResNet-50's 1x1 layers (103-205 MFLOP) stay on the pool.
# Other products keep PRODUCT_FLOPS.
POINTWISE_FLOPS = float(1 << 26)
SMALL_MAP_FLOPS = float(1 << 26)
STEM_FLOPS = float(1 << 26)


def serial_flops(kernel, strides, k_n: int, out_pixels: int) -> float:
    """The flops from which a float32 product of this kind goes to the shard pool (see POINTWISE_FLOPS)."""
    if math.prod(kernel) == 1:
        return POINTWISE_FLOPS
    if out_pixels <= FTILE_COLS_MAX:
        return SMALL_MAP_FLOPS
    if min(strides) >= 2 and k_n <= IMPLICIT_MAX_K:
        return STEM_FLOPS
    return PRODUCT_FLOPS
IMPLICIT = True
IMPLICIT_MIN_OW = 28  # the 7x7/2 stem's 112-pixel rows and 3x3/2 from 56x56: 28 of a tile's 32 lanes
IMPLICIT_MAX_K = 256  # deeper K read in place fell behind im2col + the copy into tile order on the Xeon
# (bench_conv_threads.py, 1 thread: 3x3/2 64 -> 128 at 56x56, K = 576, 1.51 vs 1.32 ms; 128 -> 128, K = 1152,
# 3.03 vs 2.59), while the 7x7/2 stem (K = 147) ran 1.72 vs 2.86-3.00 ms; on the AMD box K = 27 (MobileNetV2's
# stem) 1.13x, 144 1.17x, 288 0.99x


DIRECT = True
DIRECT_MIN_K = IMPLICIT_MAX_K + 1  # strided convolutions of shallower K (the stems) keep the implicit GEMM:
# on the Xeon the 7x7/2 stem ran alike either way (in ResNet-18 1.87 vs 1.84 ms; alone 2.76 vs 2.77), on the
# AMD box the implicit GEMM 3-8 % faster (session 10)
DIRECT_SMALL = True  # the 512@7 3x3 layers: on the Xeon 0.88-0.94x F(2x2, 3x3)'s time in ResNet-18 (2.42-2.49
# vs 2.63-2.78 ms a layer; Winograd's 16.7 MB of transformed weights come cold from memory every run), on the
# AMD box 1.4x (2.2-2.3 vs 1.6 ms): the Xeon is the protocol's machine (session 10)
DIRECT_SMALL_PIXELS = 64
DIRECT_MIN_FILL = 0.85  # strided layers whose output rows fill fdirect's tiles by less (direct_unfilled)
# run im2col + ftile's tiles: the detection head's Conv_107 (3x3/2, 256 -> 512 at 20 -> 10, rows of 10
# pixels as 14) was 1.22x the reference's im2col + BLAS on the Xeon (issue 11, session 11). One-node
# sessions, one per path (a kernel keeps one packing of its weights: switches alternated on one session
# repacked them every call), AMD box, best of 40, twice: fdirect 1.08-1.09x the reference, the gather
# 0.98, im2col + rows tiles 0.97-0.99, im2col + cols tiles 0.83-0.84 (UNFILLED_COLS), im2col + BLAS
# 1.02-1.04 (benchmarks/bench_pernode11.py). The ResNets' rows of 7, 14, 28 fill 1.0, the head's 20 and
# 40 0.95. 0: the old rule.
UNFILLED_COLS = True  # those layers on the cols tiles (unfilled_cols; False: the rows tiles)


def ftile_cols(kind, mg, l_n, k_n, one_thread: bool = False) -> bool:
    """Whether a product of ``mg`` channels, ``l_n`` output pixels and depth ``k_n`` takes ftile's
    cols tiles (channels in the lanes: maps of at most FTILE_COLS_MAX pixels, or
    FTILE_COLS_MAX_ONE_THREAD for ``one_thread`` (a one-thread session's bound 1x1 calls), channels
    a multiple of the lanes; the rows tile would run 49 pixels as 64), unless K is below
    FTILE_COLS_MIN_K: each tile stores its 21 vectors lane by lane (336 scalar stores), which at
    K = 64 cost as much as the FMAs (64 x 64 x 196: 57 GFLOP/s against 75 on the rows tiles)."""
    most = max(FTILE_COLS_MAX, FTILE_COLS_MAX_ONE_THREAD) if one_thread else FTILE_COLS_MAX
    return (kind in ftile.COLS_LANES and l_n <= most and mg % ftile.COLS_LANES[kind] == 0
            and k_n >= FTILE_COLS_MIN_K)


WINO_FTILE_MIN_C = 128  # input channels from which Winograd's position GEMMs run on ftile
WINO_SMALL = True  # F(2x2, 3x3) on 7x7-13x13 maps where its GEMMs run on the cols tiles (_wino_small)
WINO_SMALL_MIN_C = 128
FTILE_COLS_MAX = 64  # output pixels (7x7 maps) up to which ftile runs the cols tiles: on the Xeon
# the rows tiles (with packed rows) beat them at 14x14 (256 x 1024 x 196: 127 vs 111 GFLOP/s; the AMD
# box had them even)
FTILE_COLS_MIN_K = 128
FTILE_COLS_MAX_ONE_THREAD = 196  # the same limit for a one-thread session's bound 1x1 calls (conv_serial's
# _tiles_call; issue 11, session 11, r50t11b). 196: ResNet-50's 14x14 1x1 layers (and the 1x1/2 shortcut to
# 14x14) on the cols tiles, 28 tiles of 7 pixels with no lane idle (the rows tiles run 196 pixels as 208).
# AMD box in the model (nodes_ab.py resnet50, best of 9 per node, sessions in turn): 1024 -> 256 1.12x,
# 1024 -> 512 1.12x, 256 -> 1024 + Z 1.06x, the shortcut 1.07x, the model 1.01x. Xeon (the lead's call,
# turns.py resnet50 --variant1, 6 rounds): numba 1t / cols196 1.03 (0.98-1.28), faster in 5 of 6 rounds,
# so on (session 5 had there the 8-row rows tiles ahead at 14x14 alone, 127 against 111 GFLOP/s).
# A/B: kernels.conv.FTILE_COLS_MAX_ONE_THREAD=64 (off)
FTILE_COLS_KC_ONE_THREAD = 128  # the cols tiles' K chunk on those maps (0: ftile.COLS_KC, 512). 128: a 48-channel
# panel's chunk is 24 KiB and stays in L1 over the map's 28 tiles, each k then streaming one line of pixels
# from L2 for 21 FMAs (at 512 its 96 KiB chunk streams three weight vectors a k). AMD box: no difference. Xeon
# (issue 11, session 14, r50one14; nodes_ab.py resnet50, five processes in three calls): the 14x14 1x1 layers
# 1.03-1.10x faster per kind (1024 -> 256 1.07-1.10, 256 -> 1024 + Z 1.03-1.09), so on. Off:
# kernels.conv.FTILE_COLS_KC_ONE_THREAD=0
FTILE_COLS_KC_SMALL_ONE_THREAD = 128  # the same for a one-thread bound call's maps of at most FTILE_COLS_MAX pixels
# (ResNet-50's 7x7 1x1 layers and the 1x1/2 shortcut to 7x7; 0: ftile.COLS_KC). At 512 a 48-channel panel's chunk
# (96 KiB) streams from L2 once per tile, 7 times on a 7x7 map; at 128 (24 KiB) it stays in L1 over the 7 tiles.
# Xeon (session 14): 2048 -> 512 1.05-1.08x, the 1024 -> 2048 shortcut 1.05-1.13x, 512 -> 2048 + Z 1.00-1.05x;
# with FTILE_COLS_KC_ONE_THREAD, ResNet-50 numba 1t / both 1.08, 1.08, 1.00 in three turns runs. Off:
# kernels.conv.FTILE_COLS_KC_SMALL_ONE_THREAD=0
COLS_AHEAD_ONE_THREAD = 16  # a one-thread bound 1x1 call's cols tiles (3 x 7, the narrow ones too) prefetch their
# weights' row k + this into L1 at step k (ftile.cols_driver_ahead; 0: off), as fdirect.AHEAD does for its tiles.
# In the model a 1x1 layer's weights (1-4 MiB at 14x14 and 7x7) come from L3 or memory, and the first tile of
# every K chunk waits for them. Issue 11, session 15 (nchwc15; docs/numba.md, "ResNet-50's bottleneck blocks at
# one thread"): Xeon, ResNet-50 per kind (nodes_ab.py, two processes, orders reversed), 16 against 0: the 7x7
# layers and the 1x1/2 shortcut to 7x7 1.13-1.18x, the 14x14 ones 1.01-1.06x (an identical session 0.97-1.05x);
# a second call against off 1.25-1.30x and 1.02-1.09x; 32 and 64 no better; RegNetY's 440@7 layers 1.14x (32);
# ResNet-18 and RegNetY in turns level (1.01, 1.02). Off: kernels.conv.COLS_AHEAD_ONE_THREAD=0
COLS_TILE_ONE_THREAD = ""  # the cols tile of a one-thread bound 1x1 call on maps above FTILE_COLS_MAX pixels (the
# 14x14 ones), as "CVxMP" of ftile.COLS_SHAPES ("": 3 x 7, ftile.cols_driver): "4x6" (64 channels x 6 pixels: 4
# weight vectors and 6 broadcasts per 24 FMAs, against 3 and 7 per 21; 198 pixel slots for 196) or "3x8" (200).
# Channels a multiple of the tile's (cols_shape_one_thread). Issue 11, session 14: on the Xeon in ResNet-50 (two
# processes) 4 x 6 0.95-1.03x per 14x14 kind and 3 x 8 0.95-1.06x, no gain: off. Session 17 (r50one17): "2x14" (32
# channels x 14 pixels, 196 = 14 whole tiles; 2 weight vectors and 14 broadcasts per 28 FMAs, no narrow last panel
# on 256 or 1024 channels; the shapes now take the 3 x 7 driver's weight prefetch and whole tiles): on the Xeon
# (nodes_ab.py, two processes, against the default in a session of its own) 256 -> 1024 + Z 1.030 and 1.028 (ctl 0.995,
# 1.015), 1024 -> 256 1.036 and 1.017 (0.984, 1.003), 1024 -> 512 1.004, 0.995; all nodes 1.011, 1.004 (ctl 0.994,
# 1.012): ahead per kind, not resolved on the whole model. Off until a whole-model A/B (docs/numba.md, "ResNet-50's
# one-thread layers against onnxruntime, again").
COLS_TILE_SMALL_ONE_THREAD = ""  # the same on maps of at most FTILE_COLS_MAX pixels (7x7: 4 x 6 runs 54 slots for
# 49; on the Xeon 0.82-0.97x per 7x7 kind: off; 2 x 14, 56 slots, 0.89-0.96x in session 17: off)


def cols_shape_one_thread(kind: int, m_n: int, l_n: int) -> tuple[int, int] | None:
    """(cv, mp) of the cols tile a one-thread bound 1x1 call of ftile ``kind`` with ``m_n`` channels on ``l_n``
    pixels takes instead of ftile.cols_driver's 3 x 7 (COLS_TILE_ONE_THREAD, COLS_TILE_SMALL_ONE_THREAD), or
    None."""
    spec = COLS_TILE_SMALL_ONE_THREAD if l_n <= FTILE_COLS_MAX else COLS_TILE_ONE_THREAD
    if not spec or kind != ftile.COLS8_KIND:
        return None
    cv, mp = (int(v) for v in str(spec).split("x"))
    if (cv, mp) not in ftile.COLS_SHAPES or (cv, mp) == (3, 7) or m_n % (16 * cv):
        return None
    return cv, mp


@functools.cache
def _no_z():
    """A read-only stand-in for an absent residual (flat float32, the type of a fused one)."""
    return config.readonly(np.zeros(1, np.float32))


def _edge(i: int, parts: int, size: int) -> int:
    """Start of block ``i`` of ``parts`` over ``size`` columns, on a 16-column (64-byte) boundary."""
    return size if i >= parts else min(size, (i * size // parts) // 16 * 16)


def tile_grid(rows: int, cols: int, tiles: int) -> tuple[int, int]:
    """(row blocks, column blocks) of a GEMM output cut into about ``tiles`` tiles: columns first
    (blocks of at least 64 pixels), then rows (blocks of at least 16 channels)."""
    if tiles <= 1:
        return 1, 1
    p = max(1, min(tiles, cols // 64))
    m = max(1, min(tiles // p, rows // 16))
    return m, p

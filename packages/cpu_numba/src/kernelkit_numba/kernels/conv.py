"""Conv (1-D and 2-D; grouped, depthwise, dilated, strided, padded) with a fused bias + activation
epilogue.

Grouped/dense convolution is im2col + BLAS: the columns of one image and group are packed by a
parallel Numba kernel (a 1x1 stride-1 unpadded conv needs no packing: the image is already the
column matrix), ``np.dot`` writes straight into the NCHW output, and one parallel pass adds the
bias and applies the activation. Convolutions with one input channel per group (depthwise, any
channel multiplier) run as contiguous multiply-adds over the stride phases of each padded plane
(``_conv_depthwise``), with the epilogue fused.
"""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel
from kernelkit.shape import auto_pads, conv_out_dim
from numba import prange

from .. import config
from .._base import NumbaKernel
from ..config import jit_parallel
from ._range import tap_range
from .epilogue import CLIP, NONE, act, bias_act_rows

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _im2col(x, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n):
    """col[(c*kh + i)*kw + j, oh*ow_n + ow] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] (0 outside).
    Inner loops index with unsigned integers (U): signed ones keep NumPy's negative-index
    wraparound, which stops LLVM from vectorising the copy."""
    c_n, h_n, w_n = x.shape
    taps = kh * kw
    for r in prange(c_n * taps):
        c = r // taps
        i = (r - c * taps) // kw
        j = r - c * taps - i * kw
        off = j * dw - pw
        lo, hi = tap_range(off, sw, w_n, ow_n)
        for oh in range(oh_n):
            dst = col[r, oh * ow_n:(oh + 1) * ow_n]
            h = oh * sh - ph + i * dh
            if h < 0 or h >= h_n:
                dst[:] = 0
                continue
            src = x[c, h]
            for ow in range(lo):
                dst[U(ow)] = 0
            if sw == 1:
                for ow in range(lo, hi):
                    dst[U(ow)] = src[U(ow + off)]
            else:
                for ow in range(lo, hi):
                    dst[U(ow)] = src[U(ow * sw + off)]
            for ow in range(hi, ow_n):
                dst[U(ow)] = 0


@jit_parallel
def _conv_depthwise(x, w, bias, y, sh, sw, dh, dw, ph, pw, code, p0, p1, chunks, zx):
    """Convolution with one input channel per group (depthwise, any channel multiplier: output m
    reads channel m // mult), any stride and dilation, as contiguous multiply-adds.

    Each plane is split once into its sh*sw stride phases of the zero-padded input,
    ``phase[a, b][r, c] = padded[r*sh + a, c*sw + b]``, each phase flattened with row length wq.
    Tap (i, j) of output (oh, ow) then reads phase ((i*dh) % sh, (j*dw) % sw) at
    (oh + (i*dh)//sh, ow + (j*dw)//sw): for every tap one long unit-stride loop over the flattened
    output grid (oh_n rows of wq, the last wq - ow_n columns of each row computed and dropped),
    which vectorises even for 7x7 maps and for stride 2, where a direct loop gathers every other
    element. Scratch buffers are allocated once per chunk of planes, not per plane. (Keeping a 3x3
    kernel's nine taps in one pass measured no faster than a pass per tap.) The phases and sums
    have y's dtype; ``zx`` is subtracted from every input element on the way in: 0 for float
    convolutions, the zero point for int8 ones (qconv.py), whose padding then reads the zero point."""
    n_n, c_n, h_n, w_n = x.shape
    m_n, _, kh, kw = w.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    mult = m_n // c_n
    qh, qw = ((kh - 1) * dh) // sh, ((kw - 1) * dw) // sw
    hq, wq = oh_n + qh, ow_n + qw
    size = hq * wq + qw  # one phase, plus the overrun of the last row's dropped columns
    span = oh_n * wq
    total = n_n * m_n
    for t in prange(chunks):
        buf = np.empty(sh * sw * size, y.dtype)
        acc = np.empty(span, y.dtype)
        for nm in range(t * total // chunks, (t + 1) * total // chunks):
            n = nm // m_n
            m = nm - n * m_n
            src = x[n, m // mult]
            for a in range(sh):
                for b in range(sw):
                    base = (a * sw + b) * size
                    lo, hi = tap_range(b - pw, sw, w_n, wq)  # columns that read inside the row
                    for r in range(hq):  # explicit loops: a Numba slice assignment costs ~50 ns
                        ih = r * sh + a - ph
                        d0 = base + r * wq
                        if ih < 0 or ih >= h_n:
                            for c in range(wq):
                                buf[U(d0 + c)] = 0
                            continue
                        row = src[ih]
                        for c in range(lo):
                            buf[U(d0 + c)] = 0
                        shift = b - pw
                        for c in range(lo, hi):
                            buf[U(d0 + c)] = row[U(c * sw + shift)] - zx
                        for c in range(hi, wq):
                            buf[U(d0 + c)] = 0
                    for c in range(base + hq * wq, base + size):
                        buf[U(c)] = 0
            acc[:] = bias[m]
            for i in range(kh):
                for j in range(kw):
                    wv = w[m, 0, i, j]
                    off = U((((i * dh) % sh) * sw + (j * dw) % sw) * size + ((i * dh) // sh) * wq + (j * dw) // sw)
                    for p in range(span):  # unsigned indices: no wraparound check, so it vectorises
                        acc[U(p)] += wv * buf[U(p) + off]
            plane = y[n, m]
            for oh in range(oh_n):
                r0 = oh * wq
                if code == NONE:
                    for ow in range(ow_n):
                        plane[oh, U(ow)] = acc[U(r0 + ow)]
                elif code == CLIP:
                    for ow in range(ow_n):
                        plane[oh, U(ow)] = min(max(acc[U(r0 + ow)], p0), p1)
                else:
                    for ow in range(ow_n):
                        plane[oh, U(ow)] = act(acc[U(r0 + ow)], code, p0, p1)


def supports_1d_2d(specs, attrs) -> bool:
    """Conv/ConvTranspose kernels take NCW and NCHW; 3-D (rank-5) ones stay on the reference."""
    return specs[0] is not None and len(specs[0].shape) in (3, 4)


@register_kernel("Conv", device="cpu", vendor="numba", dtype="float32", supports=supports_1d_2d)
class Conv(NumbaKernel):
    """Conv on NCHW / NCW float32 tensors (see the module docstring)."""

    uses_blas = True

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)
        self._geom_key = None
        self._col = None

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

    def work(self, x, w, b=None):
        return 2.0 * x.size * w.size / max(1, x.shape[1])  # ~ 2 * N*C*H*W * (M/C)*Cg*kh*kw (stride 1)

    def compute(self, x, w, b=None):
        key = (x.shape, w.shape)
        if key != self._geom_key:
            self._geom = self._geometry(x.shape, w.shape)
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
        y = np.empty((n_n, m_n, oh_n, ow_n), x4.dtype)
        code, p0, p1 = self.act
        if cg == 1 and group > 1:
            planes = n_n * m_n
            chunks = 1 if config.in_serial() else max(1, min(planes, 4 * config.max_threads()))
            _conv_depthwise(x4, w4, bias, y, sh, sw, dh, dw, ph, pw, code, p0, p1, chunks, x4.dtype.type(0))
        else:
            self._gemm(x4, w4, y, group)
            bias_act_rows(y.reshape(n_n, m_n, oh_n * ow_n), bias, code, p0, p1)
        return y[:, :, 0, :] if one_d else y

    def _gemm(self, x4, w4, y, group):
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n, h_n, w_n = x4.shape
        m_n, cg, kh, kw = w4.shape
        mg, k_n, l_n = m_n // group, cg * kh * kw, oh_n * ow_n
        wmat = w4.reshape(group, mg, k_n)
        direct = kh == kw == sh == sw == 1 and ph == pw == 0 and (oh_n, ow_n) == (h_n, w_n)
        if not direct and (self._col is None or self._col.shape != (k_n, l_n) or self._col.dtype != x4.dtype):
            self._col = np.empty((k_n, l_n), x4.dtype)
        for n in range(n_n):
            for g in range(group):
                xs = x4[n, g * cg:(g + 1) * cg]
                if direct:
                    col = xs.reshape(k_n, l_n)
                else:
                    col = self._col
                    _im2col(xs, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)
                np.dot(wmat[g], col, out=y[n, g * mg:(g + 1) * mg].reshape(mg, l_n))

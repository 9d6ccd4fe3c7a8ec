"""Conv (1-D and 2-D; grouped, depthwise, dilated, strided, padded) with a fused bias + activation
epilogue.

Grouped/dense convolution is im2col + BLAS: the columns of one image and group are packed by a
parallel Numba kernel (a 1x1 stride-1 unpadded conv needs no packing: the image is already the
column matrix), ``np.dot`` writes straight into the NCHW output, and one parallel pass adds the
bias and applies the activation. Convolutions with one input channel per group (depthwise, any
channel multiplier) run as a direct Numba loop with the epilogue fused.
"""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel
from kernelkit.shape import auto_pads, conv_out_dim
from numba import prange

from .._base import NumbaKernel
from ..config import jit_parallel
from ._range import tap_range
from .epilogue import CLIP, NONE, act, activation_code, bias_act_rows

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
def _conv_direct(x, w, bias, y, sh, sw, dh, dw, ph, pw, code, p0, p1):
    """Convolution with one input channel per group (depthwise; output m reads channel m // mult)."""
    n_n, c_n, h_n, w_n = x.shape
    m_n, _, kh, kw = w.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    mult = m_n // c_n
    for nm in prange(n_n * m_n):
        n = nm // m_n
        m = nm - n * m_n
        src = x[n, m // mult]
        ker = w[m, 0]
        for oh in range(oh_n):
            row = y[n, m, oh]
            row[:] = bias[m]
            for i in range(kh):
                h = oh * sh - ph + i * dh
                if h < 0 or h >= h_n:
                    continue
                s = src[h]
                for j in range(kw):
                    off = j * dw - pw
                    lo, hi = tap_range(off, sw, w_n, ow_n)
                    wv = ker[i, j]
                    if sw == 1:
                        for ow in range(lo, hi):
                            row[U(ow)] += wv * s[U(ow + off)]
                    else:
                        for ow in range(lo, hi):
                            row[U(ow)] += wv * s[U(ow * sw + off)]
            if code == CLIP:
                for ow in range(ow_n):
                    row[U(ow)] = min(max(row[U(ow)], p0), p1)
            elif code != NONE:
                for ow in range(ow_n):
                    row[U(ow)] = act(row[U(ow)], code, p0, p1)


@jit_parallel
def _conv_direct_s1(x, w, bias, y, dh, dw, ph, pw, code, p0, p1):
    """Stride-1 convolution with one input channel per group. Each plane is copied once into a
    zero-padded buffer of row length wp; the output is then computed on the padded grid, where
    every tap is one long contiguous multiply-add over the flattened plane (long loops vectorise
    well even for 7x7 maps), and the valid columns are copied out with the epilogue applied."""
    n_n, c_n, h_n, w_n = x.shape
    m_n, _, kh, kw = w.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    mult = m_n // c_n
    hp, wp = oh_n + (kh - 1) * dh, ow_n + (kw - 1) * dw
    rows, cols = min(h_n, hp - ph), min(w_n, wp - pw)
    span = oh_n * wp
    for nm in prange(n_n * m_n):
        n = nm // m_n
        m = nm - n * m_n
        flat = np.zeros(hp * wp + (kw - 1) * dw, x.dtype)
        plane = flat[:hp * wp].reshape(hp, wp)
        plane[ph:ph + rows, pw:pw + cols] = x[n, m // mult, :rows, :cols]
        acc = np.empty(span, x.dtype)
        acc[:] = bias[m]
        if kh == 3 and kw == 3:  # the common case: all nine taps per output in registers
            k = w[m, 0]
            r1, r2, c1, c2 = U(dh * wp), U(2 * dh * wp), U(dw), U(2 * dw)  # unsigned, like q
            for p in range(span):
                q = U(p)
                acc[q] += (k[0, 0] * flat[q] + k[0, 1] * flat[q + c1] + k[0, 2] * flat[q + c2]
                           + k[1, 0] * flat[q + r1] + k[1, 1] * flat[q + r1 + c1] + k[1, 2] * flat[q + r1 + c2]
                           + k[2, 0] * flat[q + r2] + k[2, 1] * flat[q + r2 + c1] + k[2, 2] * flat[q + r2 + c2])
        else:
            for i in range(kh):
                for j in range(kw):
                    wv = w[m, 0, i, j]
                    off = U(i * dh * wp + j * dw)
                    for p in range(span):
                        acc[U(p)] += wv * flat[U(p) + off]
        for oh in range(oh_n):
            row = y[n, m, oh]
            src = acc[oh * wp:oh * wp + ow_n]
            if code == NONE:
                row[:] = src
            elif code == CLIP:
                for ow in range(ow_n):
                    row[U(ow)] = min(max(src[U(ow)], p0), p1)
            else:
                for ow in range(ow_n):
                    row[U(ow)] = act(src[U(ow)], code, p0, p1)


def _supports(specs, attrs) -> bool:
    return specs[0] is not None and len(specs[0].shape) in (3, 4)


@register_kernel("Conv", device="cpu", vendor="numba", dtype="float32", supports=_supports)
class Conv(NumbaKernel):
    """Conv on NCHW / NCW float32 tensors (see the module docstring)."""

    uses_blas = True

    def setup(self, input_specs):
        a = self.attrs
        self.act = activation_code(a.get("activation", ""), a.get("activation_params", ()),
                                   input_specs[0].dtype, self.where)
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
        return 2.0 * x.size * w.size / max(1, w.shape[1])  # ~ 2 * N*C*H*W * Mg*kh*kw (stride 1)

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
        if cg == 1 and group > 1 and sh == sw == 1:
            _conv_direct_s1(x4, w4, bias, y, dh, dw, ph, pw, code, p0, p1)
        elif cg == 1 and group > 1:
            _conv_direct(x4, w4, bias, y, sh, sw, dh, dw, ph, pw, code, p0, p1)
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

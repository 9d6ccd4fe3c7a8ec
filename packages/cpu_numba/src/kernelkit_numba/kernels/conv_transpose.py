"""ConvTranspose (1-D and 2-D; grouped, strided, dilated, padded, output_padding/output_shape,
auto_pad) with the fused bias + activation epilogue.

Per image and group, BLAS forms the column matrix W_g^T @ X_g (Mg*kh*kw, H*W); a parallel Numba
col2im scatters it into the output (one output channel per task, so no two tasks write the same
element); the epilogue adds the bias and applies the activation. Geometry comes from core's
``_resolve``, the rule the shape inference uses.
"""
from __future__ import annotations

import numpy as np
from kernelkit.geometry import conv_transpose_geometry as _resolve
from kernelkit.registry import register_kernel
from numba import prange

from .._base import NumbaKernel
from ..config import jit_parallel
from ._range import tap_range
from .conv import supports_1d_2d
from .epilogue import bias_act_rows

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _col2im(cols, y, kh, kw, sh, sw, dh, dw, ph, pw, h_n, w_n):
    """y[m, ih*sh - ph + i*dh, iw*sw - pw + j*dw] += cols[(m*kh + i)*kw + j, ih*w_n + iw]."""
    m_n, oh_n, ow_n = y.shape
    for m in prange(m_n):
        out = y[m]
        out[:] = 0
        for i in range(kh):
            for j in range(kw):
                src = cols[(m * kh + i) * kw + j]
                off = j * dw - pw
                # input columns iw whose output column iw*sw + off lies in [0, ow_n)
                lo, hi = tap_range(off, sw, ow_n, w_n)
                for ih in range(h_n):
                    oh = ih * sh - ph + i * dh
                    if oh < 0 or oh >= oh_n:
                        continue
                    row = out[oh]
                    base = ih * w_n
                    for iw in range(lo, hi):
                        row[U(iw * sw + off)] += src[U(base + iw)]


@register_kernel("ConvTranspose", device="cpu", vendor="numba", dtype="float32", supports=supports_1d_2d)
class ConvTranspose(NumbaKernel):
    """ConvTranspose on NCHW / NCW float32 tensors (see the module docstring)."""

    uses_blas = True

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)
        self._geom_key = None

    def _geometry(self, x_shape, w_shape):
        a = self.attrs
        strides, dil, begin, _, out = _resolve(
            x_shape[2:], a.get("kernel_shape") or w_shape[2:], strides=a.get("strides", ()),
            dilations=a.get("dilations", ()), pads=a.get("pads", ()), auto_pad=a.get("auto_pad", "NOTSET"),
            output_padding=a.get("output_padding", ()), output_shape=a.get("output_shape", ()),
            fail=self.attr_error)
        if len(x_shape) == 3:
            return (1,) + tuple(strides), (1,) + tuple(dil), (0,) + tuple(begin), (1,) + tuple(out)
        return tuple(strides), tuple(dil), tuple(begin), tuple(out)

    def work(self, x, w, b=None):
        return 2.0 * x.size * w.size / max(1, w.shape[0])

    def compute(self, x, w, b=None):
        key = (x.shape, w.shape)
        if key != self._geom_key:
            self._geom, self._geom_key = self._geometry(x.shape, w.shape), key
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        one_d = x.ndim == 3
        x4 = np.ascontiguousarray(x[:, :, None, :] if one_d else x)
        w4 = np.ascontiguousarray(w[:, :, None, :] if one_d else w)
        n_n, c_n, h_n, w_n = x4.shape
        _, mg, kh, kw = w4.shape
        group = int(self.attrs.get("group", 1))
        if c_n != w4.shape[0] or c_n % group:
            raise ValueError(f"input channels {c_n}, weight {tuple(w.shape)} and group {group} disagree")
        cg, m_n = c_n // group, mg * group
        wmat = w4.reshape(group, cg, mg * kh * kw)
        y = np.empty((n_n, m_n, oh_n, ow_n), x4.dtype)
        for n in range(n_n):
            for g in range(group):
                cols = np.dot(wmat[g].T, x4[n, g * cg:(g + 1) * cg].reshape(cg, h_n * w_n))
                _col2im(cols, y[n, g * mg:(g + 1) * mg], kh, kw, sh, sw, dh, dw, ph, pw, h_n, w_n)
        bias = np.zeros(m_n, x4.dtype) if b is None else np.ascontiguousarray(b, dtype=x4.dtype).reshape(m_n)
        code, p0, p1 = self.act
        bias_act_rows(y.reshape(n_n, m_n, oh_n * ow_n), bias, code, p0, p1)
        return y[:, :, 0, :] if one_d else y

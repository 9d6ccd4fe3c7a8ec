"""MaxPool on int8/uint8 (the integer MaxPool of QDQ models: fuse_qdq runs DQ -> MaxPool -> Q with one
scale and zero point on the integers, as it only selects values).

A Numba loop per output row and kernel tap over the tap's valid output columns; on integers ``max``
has no NaN to propagate, so the loop vectorises (``vpmaxsb``/``vpmaxub``), where the float kernel
(pool.py) keeps NaN. The window geometry is pool.py's (``_Pool``).
"""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel

from ..config import jit_parallel, parallel_for
from ._range import tap_range
from .pool import _output, _Pool, _result, _supports

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _max_pool_int(x, y, kh, kw, sh, sw, dh, dw, ph, pw, lowest, lo, hi):
    """y = the window maxima of integer x (N, C, H, W) for planes [lo, hi) of N * C; taps outside the
    input are skipped (ONNX pads MaxPool with -inf). Stride 1: per output row and tap, a max over
    the tap's valid columns. Strided: the kernel rows' maximum per input column, then the kernel
    columns' maximum at every column (both unit-stride loops, which vectorise), then every sw-th
    of those (a strided byte gather per tap measured 6x slower per element than unit stride)."""
    n_n, c_n, h_n, w_n = x.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    span = (ow_n - 1) * sw + 1  # unit-stride positions; output ow is position ow * sw
    vert = np.empty(w_n, x.dtype)
    hm = np.empty(span, x.dtype)
    for nc in range(lo, hi):
        n = nc // c_n
        c = nc - n * c_n
        src = x[n, c]
        for oh in range(oh_n):
            row = y[n, c, oh]
            if sw == 1:
                for ow in range(ow_n):
                    row[U(ow)] = lowest
                for i in range(kh):
                    h = oh * sh - ph + i * dh
                    if h < 0 or h >= h_n:
                        continue
                    s = src[h]
                    for j in range(kw):
                        off = j * dw - pw
                        a, b = tap_range(off, 1, w_n, ow_n)
                        for ow in range(a, b):
                            row[U(ow)] = max(row[U(ow)], s[U(ow + off)])
                continue
            for col in range(w_n):
                vert[U(col)] = lowest
            for i in range(kh):
                h = oh * sh - ph + i * dh
                if h < 0 or h >= h_n:
                    continue
                s = src[h]
                for col in range(w_n):
                    vert[U(col)] = max(vert[U(col)], s[U(col)])
            for q in range(span):
                hm[U(q)] = lowest
            for j in range(kw):
                off = j * dw - pw
                a, b = tap_range(off, 1, w_n, span)
                for q in range(a, b):
                    hm[U(q)] = max(hm[U(q)], vert[U(q + off)])
            for ow in range(ow_n):
                row[U(ow)] = hm[U(ow * sw)]


@jit_parallel
def _max_pool_int_indices(x, y, idx, kh, kw, sh, sw, dh, dw, ph, pw, col_major, lo, hi):
    """Max pool that also returns the flat index of each maximum (first one on ties), as pool.py's."""
    n_n, c_n, h_n, w_n = x.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    for nc in range(lo, hi):
        n = nc // c_n
        c = nc - n * c_n
        src = x[n, c]
        base = nc * h_n * w_n
        for oh in range(oh_n):
            for ow in range(ow_n):
                best = src[0, 0]
                at = -1
                for i in range(kh):
                    h = oh * sh - ph + i * dh
                    if h < 0 or h >= h_n:
                        continue
                    for j in range(kw):
                        w = ow * sw - pw + j * dw
                        if w < 0 or w >= w_n:
                            continue
                        if at < 0 or src[h, w] > best:
                            best = src[h, w]
                            at = base + (w * h_n + h if col_major else h * w_n + w)
                y[n, c, oh, ow] = best
                idx[n, c, oh, ow] = at


@register_kernel("MaxPool", device="cpu", vendor="numba", dtype=("int8", "uint8"), supports=_supports)
class IntegerMaxPool(_Pool):
    """MaxPool (1-D/2-D, strided, dilated, padded, ceil_mode; Indices too) on int8/uint8."""

    def setup(self, input_specs):
        node = getattr(self.context, "node", None)
        self.want_indices = node is not None and len(node.outputs) > 1 and bool(node.outputs[1])

    def compute(self, x, *, out=None):
        win = self._window(x.shape)
        x4 = self._as_2d(x)
        (kh, kw), (sh, sw), (dh, dw), (ph, pw) = win.kernel, win.strides, win.dilations, win.begin
        y = _output(x, x4.shape[:2] + tuple(win.out), out)
        planes = y.shape[0] * y.shape[1]
        if not self.want_indices:
            lowest = x.dtype.type(np.iinfo(x.dtype).min)
            parallel_for(_max_pool_int, planes, (x4, y, kh, kw, sh, sw, dh, dw, ph, pw, lowest), 1.0 * y.size * kh * kw)
            return _result(x, y, out)
        idx = np.empty(y.shape, np.int64)
        col_major = self.attrs.get("storage_order", 0) == 1
        parallel_for(_max_pool_int_indices, planes, (x4, y, idx, kh, kw, sh, sw, dh, dw, ph, pw, col_major),
                     4.0 * y.size * kh * kw)
        return _result(x, y, out), (idx[:, :, 0, :] if x.ndim == 3 else idx)

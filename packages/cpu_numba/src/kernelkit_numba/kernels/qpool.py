"""MaxPool on int8/uint8 (the integer MaxPool of QDQ models: fuse_qdq runs DQ -> MaxPool -> Q with one
scale and zero point on the integers, as it only selects values).

A Numba loop per output row and kernel tap over the tap's valid output columns; on integers ``max``
has no NaN to propagate, so the loop vectorises (``vpmaxsb``/``vpmaxub``), where the float kernel
(pool.py) goes through NumPy's maximum for NaN's sake. Registered over pool.py's int8/uint8 entries
(``override=True``; pool.py is imported first here, so the order does not depend on module discovery).
"""
from __future__ import annotations

import numpy as np
from kernelkit.geometry import window
from kernelkit.registry import register_kernel

from .._base import NumbaKernel
from ..config import jit_parallel, parallel_for
from . import pool  # noqa: F401 - registers the float MaxPool (and its int8 entries) before this module
from ._range import tap_range

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


def _supports(specs, attrs) -> bool:
    return specs[0] is not None and len(specs[0].shape) in (3, 4)


@register_kernel("MaxPool", device="cpu", vendor="numba", dtype=("int8", "uint8"), supports=_supports,
                 override=True)
class IntegerMaxPool(NumbaKernel):
    """MaxPool (1-D/2-D, strided, dilated, padded, ceil_mode; Indices too) on int8/uint8."""

    def setup(self, input_specs):
        node = getattr(self.context, "node", None)
        self.want_indices = node is not None and len(node.outputs) > 1 and bool(node.outputs[1])
        self._win_key = None

    def _window(self, x_shape):
        if x_shape != self._win_key:
            a = self.attrs
            win = window(x_shape[2:], a["kernel_shape"], strides=a.get("strides", ()),
                         dilations=a.get("dilations", ()), pads=a.get("pads", ()),
                         auto_pad=a.get("auto_pad", "NOTSET"), ceil_mode=a.get("ceil_mode", 0), fail=self.attr_error)
            if win.rank == 1:  # 1-D as 2-D with a unit height
                win = win._replace(kernel=(1,) + win.kernel, strides=(1,) + win.strides,
                                   dilations=(1,) + win.dilations, begin=(0,) + win.begin, end=(0,) + win.end,
                                   out=(1,) + win.out)
            self._win, self._win_key = win, x_shape
        return self._win

    def compute(self, x, *, out=None):
        win = self._window(x.shape)
        one_d = x.ndim == 3
        x4 = np.ascontiguousarray(x[:, :, None, :] if one_d else x)
        (kh, kw), (sh, sw), (dh, dw), (ph, pw) = win.kernel, win.strides, win.dilations, win.begin
        shape4 = x4.shape[:2] + tuple(win.out)
        y = np.empty(shape4, x.dtype) if out is None else (out[:, :, None, :] if one_d else out)
        planes = shape4[0] * shape4[1]
        if not self.want_indices:
            lowest = x.dtype.type(np.iinfo(x.dtype).min)
            parallel_for(_max_pool_int, planes, (x4, y, kh, kw, sh, sw, dh, dw, ph, pw, lowest), 1.0 * y.size * kh * kw)
            return out if out is not None else (y[:, :, 0, :] if one_d else y)
        idx = np.empty(shape4, np.int64)
        col_major = self.attrs.get("storage_order", 0) == 1
        parallel_for(_max_pool_int_indices, planes, (x4, y, idx, kh, kw, sh, sw, dh, dw, ph, pw, col_major),
                     4.0 * y.size * kh * kw)
        result = out if out is not None else (y[:, :, 0, :] if one_d else y)
        return result, (idx[:, :, 0, :] if one_d else idx)

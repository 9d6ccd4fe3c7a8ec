"""Conv in the NHWC and blocked NCHW8c/NCHW16c layouts: layout variants the layout pass may choose
(docs/architecture.md, "Layouts"), each with the fused bias + activation epilogue.

- NHWC (weights HWIO): dense convolution is one GEMM, (N*OH*OW, KH*KW*C) x (KH*KW*C, M), whose
  columns are contiguous channel vectors of the padded input (a 1x1 stride-1 unpadded conv needs
  no columns at all: the image is the matrix); depthwise is a multiply-add over the channel vector
  of each tap, channels innermost.
- NCHWc (c = 8 or 16; weights HWIO dense, OIHWco depthwise): dense is the same GEMM, its columns
  gathered as c-wide channel blocks and its rows re-blocked by the fused epilogue; depthwise is a
  unit-stride loop per tap over a whole output row of a channel block (OW*c values, the input's
  columns split into stride phases, the tap's weights repeated along the row), which vectorises.

Registered at priority -10: below the default-layout numba Conv (0), so a session uses them only
when it asks for the layout (``options={"layout": "NHWC"}``), see benchmarks/bench_layouts.py.
"""
from __future__ import annotations

import numpy as np
from kernelkit.geometry import window
from kernelkit.ir import TensorSpec
from kernelkit.layout import logical_shape, reorder
from kernelkit.registry import register_kernel
from numba import prange

from .. import config
from .._base import NumbaKernel
from ..config import jit_parallel
from .epilogue import NONE, act, bias_act_rows

PRIORITY = -10  # below the default-layout Conv: chosen only when a session asks for the layout
BLOCKS = (8, 16)
U = np.uint64  # unsigned index: no wraparound check in inner loops


# -- NHWC --------------------------------------------------------------------------------------------
@jit_parallel
def _im2col_nhwc(xp, col, kh, kw, sh, sw, dh, dw, oh_n, ow_n):
    """Columns (N*OH*OW, KH*KW*C) of the padded NHWC input: one contiguous channel vector per tap."""
    n_n, c_n = xp.shape[0], xp.shape[3]
    for t in prange(n_n * oh_n):
        n = t // oh_n
        oh = t - n * oh_n
        for ow in range(ow_n):
            dst = col[t * ow_n + ow]
            for i in range(kh):
                for j in range(kw):
                    src = xp[n, oh * sh + i * dh, ow * sw + j * dw]
                    base = (i * kw + j) * c_n
                    for c in range(c_n):
                        dst[base + c] = src[c]


@jit_parallel
def _bias_act_rows(y2, bias, code, p0, p1):
    """y2 (pixels, M) += bias (M), then the activation, in place."""
    for r in prange(y2.shape[0]):
        row = y2[r]
        for m in range(y2.shape[1]):
            row[m] = act(row[m] + bias[m], code, p0, p1)


@jit_parallel
def _depthwise_nhwc(xp, w, bias, y, sh, sw, dh, dw, code, p0, p1):
    """Depthwise conv: xp (N, HP, WP, C) padded, w (KH, KW, 1, C), y (N, OH, OW, C). Scalar
    indexing throughout: a Numba array view in an inner loop costs a reference count."""
    n_n, oh_n, ow_n, c_n = y.shape
    kh, kw = w.shape[0], w.shape[1]
    for t in prange(n_n * oh_n):
        n = t // oh_n
        oh = t - n * oh_n
        acc = np.empty(c_n, y.dtype)
        for ow in range(ow_n):
            for c in range(c_n):
                acc[U(c)] = bias[U(c)]
            for i in range(kh):
                ih = oh * sh + i * dh
                for j in range(kw):
                    iw = ow * sw + j * dw
                    for c in range(c_n):
                        acc[U(c)] += xp[n, ih, iw, U(c)] * w[i, j, 0, U(c)]
            for c in range(c_n):
                y[n, oh, ow, U(c)] = act(acc[U(c)], code, p0, p1)


def _is_depthwise(x_channels: int, w_shape, group: int) -> bool:
    """One input and one output channel per group (channel multiplier 1)."""
    return group == x_channels == w_shape[0] > 1 and w_shape[1] == 1


def _supports(specs, attrs, block: int = 1) -> bool:
    """2-D, static; dense (group 1) or depthwise; channels a multiple of the block."""
    x, w = specs[0], specs[1]
    if x is None or w is None or x.rank != 4 or not w.is_static or not all(isinstance(d, int) for d in x.shape[1:]):
        return False
    group = attrs.get("group", 1)
    ok = group == 1 or _is_depthwise(x.shape[1], w.shape, group)
    return ok and x.shape[1] % block == 0 and w.shape[0] % block == 0


def _padded(x: np.ndarray, begin, end, spatial=(1, 2)) -> np.ndarray:
    """``x`` with zeros around its two spatial axes (``x`` itself when there is no padding)."""
    if not any(begin) and not any(end):
        return x
    shape, inner = list(x.shape), [slice(None)] * x.ndim
    for k, axis in enumerate(spatial):
        shape[axis] += begin[k] + end[k]
        inner[axis] = slice(begin[k], begin[k] + x.shape[axis])
    xp = np.zeros(shape, x.dtype)  # np.pad is several times slower for this
    xp[tuple(inner)] = x
    return xp


class _LayoutConv(NumbaKernel):
    """What the NHWC and NCHWc Convs share: geometry from the attributes, bias and activation."""

    spatial = (1, 2)  # the spatial axes of the physical input

    def prepare(self, input_specs, attrs):
        self.layouts = [s.layout if s is not None else None for s in input_specs]
        super().prepare(input_specs, attrs)

    def resize(self, input_specs):
        """New input shapes arrive as the arrays' (physical) shapes: read them back as logical."""
        super().resize([s if s is None or s.layout == lay or not lay else
                        TensorSpec(logical_shape(s.shape, lay), s.dtype, lay)
                        for s, lay in zip(input_specs, self.layouts)])

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)
        x, w = input_specs[0], input_specs[1]  # logical (NCHW / OIHW) specs
        a = self.attrs
        self.win = window(x.shape[2:], a.get("kernel_shape") or w.shape[2:], strides=a.get("strides", ()),
                          dilations=a.get("dilations", ()), pads=a.get("pads", ()),
                          auto_pad=a.get("auto_pad", "NOTSET"))
        self.depthwise = _is_depthwise(x.shape[1], w.shape, a.get("group", 1))
        self.m = w.shape[0]

    def work(self, x, w, b=None, z=None):
        return 2.0 * x.size * w.size / max(1, self.m if self.depthwise else w.size // self.m)

    def compute(self, x, w, b=None, z=None):
        """y = act(conv(x, w) + b (+ z)); z: the residual the fuse_residual pass moved into the conv,
        laid out like y, added before the activation (a pass over y after the convolution)."""
        if z is None:
            return self.convolve(x, w, b, self.act)
        code, p0, p1 = self.act
        y = self.convolve(x, w, b, (NONE, p0, p1))
        y += z
        if code != NONE:
            bias_act_rows(y.reshape(1, 1, y.size), config.readonly(np.zeros(1, y.dtype)), code, p0, p1)
        return y

    def bias(self, b, dtype) -> np.ndarray:
        return np.zeros(self.m, dtype) if b is None else np.ascontiguousarray(b, dtype=dtype)


@register_kernel("Conv", device="cpu", vendor="numba", dtype="float32", priority=PRIORITY, layout="NHWC",
                 port_layouts={"W": "HWIO"}, supports=_supports)
class ConvNHWC(_LayoutConv):
    """Conv on NHWC float32 images, HWIO weights (see the module docstring)."""

    uses_blas = True

    def setup(self, input_specs):
        super().setup(input_specs)
        self._col = None

    def convolve(self, x, w, b, act):
        win = self.win
        (sh, sw), (dh, dw), (oh_n, ow_n) = win.strides, win.dilations, win.out
        kh, kw, cg, m = w.shape
        n = x.shape[0]
        bias = self.bias(b, x.dtype)
        code, p0, p1 = act
        xp = _padded(x, win.begin, win.end)
        y = np.empty((n, oh_n, ow_n, m), x.dtype)
        if self.depthwise:
            _depthwise_nhwc(xp, w, bias, y, sh, sw, dh, dw, code, p0, p1)
            return y
        y2 = y.reshape(n * oh_n * ow_n, m)
        wmat = w.reshape(kh * kw * cg, m)
        if kh == kw == sh == sw == 1 and xp is x:
            np.dot(np.ascontiguousarray(x).reshape(-1, cg), wmat, out=y2)
        else:
            shape = (n * oh_n * ow_n, kh * kw * cg)
            if self._col is None or self._col.shape != shape:
                self._col = np.empty(shape, x.dtype)
            _im2col_nhwc(xp, self._col, kh, kw, sh, sw, dh, dw, oh_n, ow_n)
            np.dot(self._col, wmat, out=y2)
        _bias_act_rows(y2, bias, code, p0, p1)
        return y


# -- NCHWc -------------------------------------------------------------------------------------------
def _blocked_kernels(c: int):
    """The dense and depthwise NCHWc kernels for block ``c`` (a compile-time constant in both)."""

    @jit_parallel
    def columns(xp, col, kh, kw, sh, sw, dh, dw, oh_n, ow_n):
        """Columns (N*OH*OW, KH*KW*C) of the padded NCHWc input xp (N, C/c, HP, WP, c): per tap,
        the c-wide channel blocks side by side, in HWIO weight order."""
        n_n, cb_n = xp.shape[0], xp.shape[1]
        for t in prange(n_n * oh_n):
            n = t // oh_n
            oh = t - n * oh_n
            for ow in range(ow_n):
                r = t * ow_n + ow
                for i in range(kh):
                    for j in range(kw):
                        base = (i * kw + j) * cb_n * c
                        for cb in range(cb_n):
                            for k in range(c):
                                col[r, base + cb * c + U(k)] = xp[n, cb, oh * sh + i * dh, ow * sw + j * dw, U(k)]

    @jit_parallel
    def blocked_epilogue(y2, bias, y, code, p0, p1):
        """y (N, M/c, OH, OW, c) = act(y2 (N*OH*OW, M) + bias): the GEMM's rows re-blocked."""
        n_n, mb_n, oh_n, ow_n = y.shape[0], y.shape[1], y.shape[2], y.shape[3]
        for t in prange(n_n * mb_n * oh_n):
            n = t // (mb_n * oh_n)
            mb = (t - n * mb_n * oh_n) // oh_n
            oh = t - n * mb_n * oh_n - mb * oh_n
            for ow in range(ow_n):
                r = (n * oh_n + oh) * ow_n + ow
                for k in range(c):
                    y[n, mb, oh, ow, U(k)] = act(y2[r, mb * c + U(k)] + bias[mb * c + U(k)], code, p0, p1)

    @jit_parallel
    def depthwise(xq, wrep, brep, y, sh, dh, dw, sw, code, p0, p1):
        """Depthwise, one output row of one channel block at a time: per tap, one unit-stride loop
        over the row's OW*c values (``acc[k] += src[off + k] * wrep[k]``), which vectorises.
        xq (N, C/c, HP, sw, WQ*c): the padded input's columns split into the sw stride phases;
        wrep (C/c, KH, KW, OW*c): each tap's c weights repeated OW times; brep (C/c, OW*c) the
        bias so; y (N, C/c, OH, OW*c)."""
        n_n, cb_n, oh_n, span = y.shape[0], y.shape[1], y.shape[2], y.shape[3]
        kh, kw = wrep.shape[1], wrep.shape[2]
        rows = cb_n * oh_n
        for t in prange(n_n * rows):
            n = t // rows
            cb = (t - n * rows) // oh_n
            oh = t - n * rows - cb * oh_n
            acc = np.empty(span, y.dtype)
            for k in range(span):
                acc[U(k)] = brep[cb, U(k)]
            for i in range(kh):
                ih = oh * sh + i * dh
                for j in range(kw):
                    src = xq[n, cb, ih, (j * dw) % sw]
                    off = U(((j * dw) // sw) * c)
                    wt = wrep[cb, i, j]
                    for k in range(span):
                        acc[U(k)] += src[U(k) + off] * wt[U(k)]
            dst = y[n, cb, oh]
            for k in range(span):
                dst[U(k)] = act(acc[U(k)], code, p0, p1)

    return columns, blocked_epilogue, depthwise


_BLOCKED = {c: _blocked_kernels(c) for c in BLOCKS}


def _phases(xp: np.ndarray, sw: int) -> np.ndarray:
    """(N, CB, HP, WP, c) -> (N, CB, HP, sw, WQ*c): column ow*sw + b of the padded input at
    [..., b, ow*c:(ow+1)*c], so that a strided tap reads a contiguous run (a view when sw == 1)."""
    n, cb, hp, wp, c = xp.shape
    wq = -(-wp // sw)
    if sw == 1:
        return xp.reshape(n, cb, hp, 1, wp * c)
    if wq * sw != wp:
        xp = np.pad(xp, ((0, 0), (0, 0), (0, 0), (0, wq * sw - wp), (0, 0)))
    return np.ascontiguousarray(xp.reshape(n, cb, hp, wq, sw, c).transpose(0, 1, 2, 4, 3, 5)).reshape(
        n, cb, hp, sw, wq * c)


def _blocked_weights(c: int):
    """The weight layout of the NCHWc Conv: HWIO for the dense GEMM, OIHW{c}o depthwise (I = 1)."""

    def layouts(specs, attrs):
        return {"W": f"OIHW{c}o" if attrs.get("group", 1) > 1 else "HWIO"}

    return layouts


def _register_blocked(c: int) -> None:
    @register_kernel("Conv", device="cpu", vendor="numba", dtype="float32", priority=PRIORITY, layout=f"NCHW{c}c",
                     port_layouts=_blocked_weights(c), supports=lambda specs, attrs: _supports(specs, attrs, c))
    class ConvNCHWc(_LayoutConv):
        __doc__ = f"Conv on NCHW{c}c float32 images (see the module docstring)."
        spatial = (2, 3)

        uses_blas = True

        def setup(self, input_specs):
            super().setup(input_specs)
            self._col = None
            self._rows = None  # (key, weights and bias repeated along an output row) of the depthwise path

        def convolve(self, x, w, b, act):
            win = self.win
            (sh, sw), (dh, dw), (oh_n, ow_n) = win.strides, win.dilations, win.out
            code, p0, p1 = act
            xp = _padded(x, win.begin, win.end, self.spatial)
            n = x.shape[0]
            y = np.empty((n, self.m // c, oh_n, ow_n, c), x.dtype)
            columns, epilogue, depthwise = _BLOCKED[c]
            bias = self.bias(b, x.dtype)
            if self.depthwise:
                key = (w.__array_interface__["data"][0], w.shape, bias.__array_interface__["data"][0], ow_n)
                if self._rows is None or self._rows[0] != key:  # weights are constants: repeated once
                    self._rows = key, np.ascontiguousarray(np.tile(w[:, 0], (1, 1, 1, ow_n))), \
                        np.tile(bias.reshape(-1, c), (1, ow_n))
                _, wrep, brep = self._rows
                depthwise(_phases(xp, sw), wrep, brep, y.reshape(*y.shape[:3], ow_n * c), sh, dh, dw, sw,
                          code, p0, p1)
                return y
            kh, kw, cg, m = w.shape
            shape = (n * oh_n * ow_n, kh * kw * cg)
            if self._col is None or self._col.shape != shape:
                self._col = np.empty(shape, x.dtype)
            columns(xp, self._col, kh, kw, sh, sw, dh, dw, oh_n, ow_n)
            y2 = np.dot(self._col, w.reshape(kh * kw * cg, m))
            epilogue(y2, bias, y, code, p0, p1)
            return y

    ConvNCHWc.__name__ = ConvNCHWc.__qualname__ = f"ConvNCHW{c}c"


for _c in BLOCKS:
    _register_blocked(_c)


@register_kernel("LayoutReorder", device="cpu", vendor="numba", dtype="*", priority=0)
def layout_reorder(x, *, src="NCHW", dst):
    """Re-lay between layouts (NumPy's strided copy), so that a numba-only session can change layout."""
    return reorder(x, src, dst)


__all__ = ["ConvNHWC", "config"]

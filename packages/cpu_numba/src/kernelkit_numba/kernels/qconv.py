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
from .conv import Conv, _conv_depthwise, _im2col, supports_1d_2d
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
    to_int32,
)


class _IntegerConv(Conv):
    """Shared by ConvInteger and QLinearConv: geometry and im2col scratch from the float Conv,
    ``convolve(x, w, x_zp, w_zp, out, finish)`` calling ``finish(y, acc, has_acc, channels, dst)``
    per image and group with float32 exact block results (channels: a slice of output channels,
    dst: the (channels, pixels) view of the output to write)."""

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

    def convolve(self, x, w, x_zero_point, w_zero_point, out, finish):
        if x_zero_point is not None and np.size(x_zero_point) != 1:
            raise ValueError(f"x_zero_point must be a scalar, got shape {np.shape(x_zero_point)}")
        key = (x.shape, w.shape)
        if key != self._geom_key:
            self._geom = self._geometry(x.shape, w.shape)
            self._geom_key = key
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        one_d = x.ndim == 3
        x4 = x[:, :, None, :] if one_d else x
        n_n, c_n, h_n, w_n = x4.shape
        m_n, cg = w.shape[:2]
        kh, kw = (1,) + w.shape[2:] if one_d else w.shape[2:]
        group = int(self.attrs.get("group", 1))
        if c_n != cg * group or m_n % group:
            raise ValueError(f"input channels {c_n}, weight {tuple(w.shape)} and group {group} disagree")
        wf, blocks = self.packed.get(w, w_zero_point, dtype_reach(x.dtype, x_zero_point))
        out4 = out.reshape(n_n, m_n, oh_n * ow_n)
        mg, k_n, l_n = m_n // group, cg * kh * kw, oh_n * ow_n
        if cg == 1 and group > 1 and blocks == [(0, k_n)]:  # depthwise: taps as multiply-adds, one pass
            yf = self.scratch("depthwise", (n_n, m_n, oh_n, ow_n))
            chunks = 1 if config.in_serial() else max(1, min(n_n * m_n, 4 * config.max_threads()))
            zx = np.float32(0 if x_zero_point is None else np.asarray(x_zero_point).reshape(()))
            _conv_depthwise(np.ascontiguousarray(x4), wf.reshape(m_n, 1, kh, kw), np.zeros(m_n, np.float32), yf,
                            sh, sw, dh, dw, ph, pw, NONE, np.float32(0), np.float32(0), chunks, zx)
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
        for n in range(n_n):
            for g in range(group):
                xs = xf[n, g * cg:(g + 1) * cg]
                if direct:
                    col = xs.reshape(k_n, l_n)
                else:
                    col = self._col
                    _im2col(xs, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)
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


def _supports(specs, attrs) -> bool:
    return supports_1d_2d(specs, attrs)


@register_kernel("ConvInteger", device="cpu", vendor="numba", dtype=("int8", "uint8"), supports=_supports)
class ConvInteger(_IntegerConv):
    """Exact integer convolution, int32 out."""

    def work(self, x, w, *zero_points):
        return self.conv_work(x, w)

    def compute(self, x, w, x_zero_point=None, w_zero_point=None):
        (_, _), (_, _), (_, _), out_hw = self._geometry(x.shape, w.shape)
        out = np.empty((x.shape[0], w.shape[0], *out_hw[2 - (x.ndim - 2):]), np.int32)

        def finish(y, acc, has_acc, channels, dst):
            to_int32(y, acc, has_acc, dst)

        self.convolve(x, w, x_zero_point, w_zero_point, out, finish)
        return out


@register_kernel("QLinearConv", device="cpu", vendor="numba", dtype=("int8", "uint8"), supports=_supports)
class QLinearConv(_IntegerConv):
    """Exact integer convolution + int32 bias, requantized per output channel (+ Relu/Clip)."""

    def work(self, x, x_scale, x_zero_point, w, *rest):
        return self.conv_work(x, w)

    def compute(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b=None):
        (_, _), (_, _), (_, _), out_hw = self._geometry(x.shape, w.shape)
        zp = np.asarray(y_zero_point)
        out = np.empty((x.shape[0], w.shape[0], *out_hw[2 - (x.ndim - 2):]), zp.dtype)
        m = w.shape[0]

        def make():
            mult = np.ascontiguousarray(np.broadcast_to(multiplier(x_scale, w_scale, y_scale), (m,)))
            bias = np.zeros(m, np.int32) if b is None else np.ascontiguousarray(b, np.int32).reshape(m)
            lo, hi = _bounds(self, y_scale, y_zero_point)
            return mult, bias, np.float32(zp.reshape(())), np.float32(lo), np.float32(hi)

        mult, bias, z, lo, hi = derived(self, (x_scale, w_scale, y_scale, y_zero_point, b), make)
        has_bias = b is not None

        def finish(y, acc, has_acc, channels, dst):
            requantize(y, acc, has_acc, bias[channels], has_bias, mult[channels], True, z, lo, hi, dst)

        self.convolve(x, w, x_zero_point, w_zero_point, out, finish)
        return out

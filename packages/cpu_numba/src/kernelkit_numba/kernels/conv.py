"""Conv (1-D and 2-D; grouped, depthwise, dilated, strided, padded) with a fused bias + activation
epilogue.

3x3 stride-1 convolutions on maps of 14x14 and more run as Winograd F(2x2, 3x3) (``winograd.py``:
2.25x fewer multiplies, weights transformed once). Other grouped/dense convolution is im2col + BLAS:
the columns of one image and group are packed by a sharded Numba kernel (a 1x1 stride-1 unpadded
conv needs no packing: the image is already the column matrix), and the GEMM is cut into output
tiles, each one BLAS call at one thread writing straight into the NCHW output and followed at once
by its bias + activation. Convolutions with one input channel per group (depthwise, any
channel multiplier) run as contiguous multiply-adds over the stride phases of each padded plane
(``_conv_depthwise``), with the epilogue fused.
"""
from __future__ import annotations

import numpy as np
from kernelkit.registry import register_kernel
from kernelkit.shape import auto_pads, conv_out_dim

from .. import config
from .._base import NumbaKernel
from ..config import jit_parallel
from . import winograd
from ._range import tap_range
from .epilogue import CLIP, NONE, bias_act_block, bias_act_rows

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _im2col(x, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n, r0, r1):
    """Rows [r0, r1) of col[(c*kh + i)*kw + j, oh*ow_n + ow] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]
    (0 outside). Inner loops index with unsigned integers (U): signed ones keep NumPy's
    negative-index wraparound, which stops LLVM from vectorising the copy."""
    c_n, h_n, w_n = x.shape
    taps = kh * kw
    xf = x.reshape(c_n * h_n * w_n)  # flat operands: a row view per (r, oh) cost ~50 ns each,
    cf = col.reshape(col.shape[0] * col.shape[1])  # 2/3 of the time on 7x7 maps
    for r in range(r0, r1):
        c = r // taps
        i = (r - c * taps) // kw
        j = r - c * taps - i * kw
        off = j * dw - pw
        lo, hi = tap_range(off, sw, w_n, ow_n)
        for oh in range(oh_n):
            d0 = U(r * oh_n * ow_n + oh * ow_n)
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


@jit_parallel
def _conv_depthwise(x, w, bias, y, sh, sw, dh, dw, ph, pw, code, p0, p1, zx, q0, q1):
    """Convolution with one input channel per group (depthwise, any channel multiplier: output m
    reads channel m // mult), any stride and dilation, as contiguous multiply-adds.

    Each plane is split once into its sh*sw stride phases of the zero-padded input,
    ``phase[a, b][r, c] = padded[r*sh + a, c*sw + b]``, each phase flattened with row length wq.
    Tap (i, j) of output (oh, ow) then reads phase ((i*dh) % sh, (j*dw) % sw) at
    (oh + (i*dh)//sh, ow + (j*dw)//sw): for every tap one long unit-stride loop over the flattened
    output grid (oh_n rows of wq, the last wq - ow_n columns of each row computed and dropped),
    which vectorises even for 7x7 maps and for stride 2, where a direct loop gathers every other
    element. Planes ``[q0, q1)`` of the flattened (N, M) are computed (one shard); scratch buffers
    are allocated once per shard, not per plane. (Keeping a 3x3 kernel's nine taps in one pass
    measured no faster than a pass per tap.) The phases and sums have y's dtype; ``zx`` is
    subtracted from every input element on the way in: 0 for float convolutions, the zero point
    for int8 ones (qconv.py), whose padding then reads the zero point."""
    n_n, c_n, h_n, w_n = x.shape
    m_n, _, kh, kw = w.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    mult = m_n // c_n
    qh, qw = ((kh - 1) * dh) // sh, ((kw - 1) * dw) // sw
    hq, wq = oh_n + qh, ow_n + qw
    size = hq * wq + qw  # one phase, plus the overrun of the last row's dropped columns
    span = oh_n * wq
    buf = np.empty(sh * sw * size, y.dtype)
    acc = np.empty(span, y.dtype)
    for nm in range(q0, q1):
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
            if code == CLIP:
                for ow in range(ow_n):
                    plane[oh, U(ow)] = min(max(acc[U(r0 + ow)], p0), p1)
            else:  # NONE (other activations run afterwards: see Conv.compute)
                for ow in range(ow_n):
                    plane[oh, U(ow)] = acc[U(r0 + ow)]


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
        self._w_src, self._w_wino, self._w_variant = None, None, 0  # weights and their Winograd transform
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

    def work(self, x, w, b=None, z=None):
        return 2.0 * x.size * w.size / max(1, x.shape[1])  # ~ 2 * N*C*H*W * (M/C)*Cg*kh*kw (stride 1)

    def compute(self, x, w, b=None, z=None):
        """y = act(conv(x, w) + b (+ z)); z: the residual the fuse_residual pass moved into the conv
        (shaped like y), added before the activation."""
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
        bias = config.readonly(bias)
        y = np.empty((n_n, m_n, oh_n, ow_n), x4.dtype)
        code, p0, p1 = self.act
        if z is not None:
            z = config.readonly(np.ascontiguousarray(z[:, :, None, :] if one_d else z, dtype=y.dtype))
            if z.shape != y.shape:
                raise ValueError(f"the fused residual Z {tuple(z.shape)} is not shaped like the output {tuple(y.shape)}")
        # the direct kernels fuse None and Clip (Relu, Relu6) only; rarer activations take one more
        # pass (inlining every activation into them cost seconds of compile time per kernel)
        inner = code if code in (NONE, CLIP) else NONE
        fused_z = True  # whether the path added z
        if cg == 1 and group > 1:
            if z is not None:
                inner, fused_z = NONE, False
            args = (x4, w4, bias, y, sh, sw, dh, dw, ph, pw, inner, p0, p1, x4.dtype.type(0))
            config.parallel_for(_conv_depthwise, n_n * m_n, args, 2.0 * y.size * kh * kw)
        elif winograd.usable4(kh, kw, sh, sw, dh, dw, group, oh_n, ow_n, n_n):
            u = self._transformed(w, w4, 4)
            winograd.conv3x3_f4(x4, u, bias, y, z, ph, pw, inner, p0, p1, self._wino_scratch)
        elif winograd.usable(kh, kw, sh, sw, dh, dw, group, oh_n, ow_n):
            u = self._transformed(w, w4, 2)
            winograd.conv3x3(x4, u, bias, y, ph, pw, inner, p0, p1, self._wino_scratch, z)
        else:
            self._gemm(x4, w4, y, group, bias, z)
            inner = code
        if not fused_z or inner != code:
            y2 = y.reshape(n_n * m_n, oh_n * ow_n)
            zeros = self._zeros(n_n * m_n, y.dtype)
            if fused_z:
                bias_act_rows(y2[None], zeros, code, p0, p1)
            else:
                bias_act_block(y2, zeros, 0, n_n * m_n, 0, oh_n * ow_n, code, p0, p1, z.reshape(y2.shape))
        return y[:, :, 0, :] if one_d else y

    def _transformed(self, w, w4, variant: int):
        """The Winograd transform of the weights (``variant`` 2: F(2x2, 3x3), 4: F(4x4, 3x3)), made
        once per constant: the session hands a kernel the same read-only array every run."""
        if w is not self._w_src or self._w_variant != variant:
            fn = winograd.transform_weights4 if variant == 4 else winograd.transform_weights
            self._w_src, self._w_variant, self._w_wino = w, variant, config.readonly(fn(w4))
        return self._w_wino

    def _zeros(self, n, dtype):
        return config.readonly(np.zeros(n, dtype))

    def _gemm(self, x4, w4, y, group, bias, z=None):
        """Per image and group: im2col (sharded over column-matrix rows), then the GEMM cut into
        (output-channel block, pixel block) tiles, each one BLAS call at one thread writing its
        block of the NCHW output, followed at once by the bias + activation of that block."""
        (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = self._geom
        n_n, c_n, h_n, w_n = x4.shape
        m_n, cg, kh, kw = w4.shape
        mg, k_n, l_n = m_n // group, cg * kh * kw, oh_n * ow_n
        wmat = w4.reshape(group, mg, k_n)
        code, p0, p1 = self.act
        direct = kh == kw == sh == sw == 1 and ph == pw == 0 and (oh_n, ow_n) == (h_n, w_n)
        if not direct and (self._col is None or self._col.shape != (k_n, l_n) or self._col.dtype != x4.dtype):
            self._col = np.empty((k_n, l_n), x4.dtype)
        tiles = config.shard_count(mg * l_n, 2.0 * mg * k_n * l_n, unit=config.MIN_TILE_WORK)
        m_tiles, p_tiles = tile_grid(mg, l_n, tiles)
        for n in range(n_n):
            for g in range(group):
                xs = x4[n, g * cg:(g + 1) * cg]
                if direct:
                    col = xs.reshape(k_n, l_n)
                else:
                    col = self._col
                    config.parallel_for(_im2col, k_n, (xs, col, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n),
                                        2.0 * k_n * l_n)
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

                config.run_shards(tile, m_tiles * p_tiles)


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

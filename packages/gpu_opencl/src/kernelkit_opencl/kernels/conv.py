"""Conv: implicit GEMM (gemm.cl with CONV) for dense and grouped convolutions (optionally a 1x1,
stride-1, unpadded one on large images as a plain GEMM batched over the images), a direct kernel
(conv.cl) for depthwise ones; 1-D convolutions run as 2-D with height 1. Geometry (pads, auto_pad,
strides, dilations) is resolved by the core's window rule, the one definition of it."""
from __future__ import annotations

import os

import numpy as np
from kernelkit import register_kernel
from kernelkit.geometry import window

from ._common import activation as act_source
from ._common import launch_1d, source, storage_defines
from .gemm import GemmCall, run_gemm


def _supports(specs, attrs) -> bool:
    """2-D (and 1-D) convolutions whose dilated kernel fits the k table's 16-bit offsets."""
    x, w = specs[0], specs[1]
    if x is None or x.rank not in (3, 4) or w is None or not all(isinstance(d, int) for d in w.shape):
        return False
    dil = tuple(attrs.get("dilations") or ()) or (1,) * (w.rank - 2)
    return all((k - 1) * d < 1 << 15 for k, d in zip(w.shape[2:], dil))


def _geometry(dev, cv, cg, kh, kw, H, W, dh, dw):
    """16 geometry ints then, per k = (c, kh, kw) of the implicit im2col matrix, the pair
    (c*H*W + kh*dh*W + kw*dw, kh*dh << 16 | kw*dw), as one cached device buffer."""
    def make():
        c, r, s = np.meshgrid(np.arange(cg), np.arange(kh), np.arange(kw), indexing="ij")
        off = (c * H * W + r * dh * W + s * dw).ravel()
        packed = ((r * dh) << 16 | (s * dw)).ravel()
        return dev.meta(np.concatenate([np.asarray(cv), np.stack([off, packed], axis=1).ravel()]))

    return dev.memo(("conv-geometry", tuple(cv), cg, kh, kw, dh, dw), make)


def conv(x, w, b=None, z=None, *, auto_pad: str = "NOTSET", dilations=(), group: int = 1, kernel_shape=(), pads=(),
         strides=(), activation: str = "", activation_params=()):
    dev = x.device
    one_d = x.ndim == 3
    if one_d:  # (N, C, L) -> (N, C, 1, L)
        x = x.view((x.shape[0], x.shape[1], 1, x.shape[2]))
        w = w.view((w.shape[0], w.shape[1], 1, w.shape[2]))
        pads = (0, pads[0], 0, pads[1]) if pads else ()
        strides, dilations = (1, *strides) if strides else (), (1, *dilations) if dilations else ()
        kernel_shape = (1, *kernel_shape) if kernel_shape else ()
        z = z.view((z.shape[0], z.shape[1], 1, z.shape[2])) if z is not None else None
    key = ("conv-window", x.shape, w.shape, tuple(kernel_shape), tuple(strides), tuple(dilations), tuple(pads),
           auto_pad)
    win = dev.memo(key, lambda: window(x.shape[2:], kernel_shape or w.shape[2:], strides=strides,
                                       dilations=dilations, pads=pads, auto_pad=auto_pad))
    n, c, H, W = x.shape
    oc, cg, kh, kw = w.shape
    oh, ow = win.out
    y = dev.empty((n, oc, oh, ow), x.dtype)
    if y.size:
        geom = (win.strides[0], win.strides[1], win.begin[0], win.begin[1], win.dilations[0], win.dilations[1])
        rw = (dw_vec() - 1) * geom[1] + (kw - 1) * geom[5] + 1  # a row's register window (conv.cl RW)
        if cg == 1 and group == c and group > 1 and rw <= 32:
            _depthwise(dev, x, w, b, y, geom, activation, activation_params, z)
        else:
            _implicit_gemm(dev, x, w, b, y, group, geom, activation, activation_params, z)
    return y.view((n, oc, ow)) if one_d else y


# With the device option ``opencl_pointwise_gemm``, a 1x1 convolution with stride 1 and no padding
# is a plain GEMM per image, W (oc x c) @ X[b] (c x HW), batched over the images: no im2col table,
# and the 128-bit global loads of the VEC_GLD tiles apply to B. Only where an image's HW columns
# fill the tiles well (at 14x14, 196 columns would waste a quarter of 128-wide tiles; the implicit
# GEMM runs the images' columns back to back). Measured on the H100 (issue 12, docs/opencl.md):
# ResNet-50 b32 kernels 11.8 vs 12.7 ms, but its GEMMs get their own tiles (programs): a cold start
# builds 8 programs instead of 5 (5.7 vs 4.5 s), hence off by default.
PLAIN_1X1_MIN_HW = 784
DW_VEC = 4  # outputs per work-item of conv.cl's depthwise kernel (KERNELKIT_OPENCL_DW_VEC=8: eight)


def dw_vec() -> int:
    """Outputs per work-item of the depthwise kernel: ``DW_VEC``, or 4/8 from the environment."""
    forced = os.environ.get("KERNELKIT_OPENCL_DW_VEC", "")
    return int(forced) if forced in ("4", "8") else DW_VEC


def _plain_1x1(x, w, y, group, geom) -> bool:
    _, _, H, W = x.shape
    return (x.device.pointwise_gemm and group == 1 and w.shape[2:] == (1, 1) and geom == (1, 1, 0, 0, 1, 1)
            and y.shape[2:] == (H, W) and H * W >= PLAIN_1X1_MIN_HW and (H * W) % 4 == 0)


def _implicit_gemm(dev, x, w, b, y, group, geom, activation, activation_params, z=None):
    n, c, H, W = x.shape
    oc, cg, kh, kw = w.shape
    _, _, oh, ow = y.shape
    sh, sw, pt, pl, dh, dw = geom
    def plan() -> GemmCall:
        if _plain_1x1(x, w, y, group, geom):  # y[b] = w @ x[b], bias per output channel
            return GemmCall(oc, H * W, c, c, H * W, H * W, batch=n, zb=c * H * W, zc=oc * H * W, bias_sm=1,
                            activation=activation, activation_params=tuple(activation_params))
        M, K = oc // group, cg * kh * kw
        cv = (cg, H, W, oh, ow, sh, sw, pt, pl, oc, c * H * W, 0, 0, 0, 0, 0)
        return GemmCall(M, n * oh * ow, K, K, 0, 0, batch=group, za=M * K, zb=cg * H * W, zc=M * oh * ow,
                        bias_sm=1, zbias=M, activation=activation, activation_params=tuple(activation_params),
                        conv=_geometry(dev, cv, cg, kh, kw, H, W, dh, dw))

    call = dev.memo(("conv-plan", x.shape, w.shape, group, geom, activation, tuple(activation_params)), plan)
    run_gemm(dev, call, w, x, b, y, z)


def _depthwise(dev, x, w, b, y, geom, activation, activation_params, z=None):
    n, c, H, W = x.shape
    oc, _, kh, kw = w.shape
    _, _, oh, ow = y.shape
    sh, sw, pt, pl, dh, dw = geom
    vec = dw_vec()
    wdefs = {"KW_": kw, "SW_": sw, "DLW_": dw, "DW_VEC": vec}  # the register window of a row (conv.cl)

    def make():
        act, defines = act_source(activation, activation_params)
        return dev.kernel(act + source("conv.cl"), "depthwise",
                          dict(defines, HAS_BIAS=int(b is not None), HAS_Z=int(z is not None), **wdefs,
                               **storage_defines(x.dtype)))

    kernel = dev.memo(("depthwise", activation, tuple(activation_params), b is not None, z is not None,
                       x.dtype, kw, sw, dw, vec), make)
    groups = -(-ow // vec)  # work-items per output row, vec outputs each
    g = dev.meta((c, H, W, oc, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, oc // c, groups))
    total = n * oc * oh * groups
    args = [x.buffer, w.buffer, (b if b is not None else y).buffer, y.buffer, np.int32(total), g]
    if z is not None:
        args.append(z.buffer)
    launch_1d(dev, kernel, total, args, [x, w, b, z], [y], "depthwise")


def register() -> None:
    for dtype in ("float32", "float16"):  # float16: half storage, float arithmetic (vload_half)
        register_kernel("Conv", device="gpu", vendor="opencl", dtype=dtype, supports=_supports)(conv)

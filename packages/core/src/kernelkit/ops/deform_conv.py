"""DeformConv (2-D): a convolution whose taps are moved by learned ``offset``s (per offset group,
tap and output position; (dy, dx) pairs) and optionally scaled by ``mask``. Each moved tap is a
bilinear sample of X (corners outside the image count as 0; a sample at or beyond one pixel
outside is 0); the sampled columns then meet the weights in one grouped matmul."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..geometry import conv_out_dim
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _bilinear(img, y, x):
    """img (C, H, W) sampled at float arrays y, x (same shape) -> (C, *y.shape)."""
    _, h, w = img.shape
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    out = np.zeros((img.shape[0],) + y.shape)
    inside = (y > -1) & (y < h) & (x > -1) & (x < w)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            wt = (1 - np.abs(y - yy)) * (1 - np.abs(x - xx))
            ok = inside & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            out += img[:, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)] * np.where(ok, wt, 0.0)
    return out


def _geometry(x_shape, w_shape, attrs):
    kh, kw = attrs.get("kernel_shape") or w_shape[2:]
    sh, sw = attrs.get("strides") or (1, 1)
    dh, dw = attrs.get("dilations") or (1, 1)
    pt, pl, pb, pr = attrs.get("pads") or (0, 0, 0, 0)
    oh = conv_out_dim(x_shape[2], kh, sh, dh, pt, pb)
    ow = conv_out_dim(x_shape[3], kw, sw, dw, pl, pr)
    return (kh, kw), (sh, sw), (dh, dw), (pt, pl), (oh, ow)


@register_kernel("DeformConv", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def deform_conv(x, w, offset, b=None, mask=None, *, dilations=(), group=1, kernel_shape=(), offset_group=1,
                pads=(), strides=()):
    attrs = {"kernel_shape": kernel_shape, "strides": strides, "dilations": dilations, "pads": pads}
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"DeformConv takes 4-D X and W (2-D images), got {x.shape} and {w.shape}")
    (kh, kw), (sh, sw), (dh, dw), (pt, pl), (oh, ow) = _geometry(x.shape, w.shape, attrs)
    n, c = x.shape[:2]
    taps = kh * kw
    if c % offset_group or c % group or w.shape[1] * group != c or w.shape[0] % group:
        raise ValueError(f"channels {c}, group {group}, offset_group {offset_group} and W {w.shape} disagree")
    if offset.shape != (n, offset_group * taps * 2, oh, ow) or \
            mask is not None and mask.shape != (n, offset_group * taps, oh, ow):
        raise ValueError(f"offset {offset.shape} / mask must be (N, offset_group * taps * (2 | 1), {oh}, {ow})")
    base_y = (np.arange(oh) * sh - pt)[:, None, None] + (np.arange(kh) * dh)[None, :, None]  # (oh, kh, 1)
    base_x = (np.arange(ow) * sw - pl)[:, None, None] + (np.arange(kw) * dw)[None, :, None]  # (ow, kw, 1)
    cols = np.zeros((n, c, taps, oh, ow))
    per = c // offset_group
    for i in range(n):
        off = offset[i].astype(np.float64).reshape(offset_group, taps, 2, oh, ow)
        for g in range(offset_group):
            for t in range(taps):
                ki, kj = divmod(t, kw)
                y = base_y[:, ki, 0][:, None] + off[g, t, 0]
                xx = base_x[:, kj, 0][None, :] + off[g, t, 1]
                sample = _bilinear(x[i, g * per:(g + 1) * per].astype(np.float64), y, xx)
                if mask is not None:
                    sample = sample * mask[i, g * taps + t].astype(np.float64)
                cols[i, g * per:(g + 1) * per, t] = sample
    m = w.shape[0]
    cols = cols.reshape(n, group, (c // group) * taps, oh * ow)
    wg = w.astype(np.float64).reshape(group, m // group, (c // group) * taps)
    y = np.einsum("gmk,ngkp->ngmp", wg, cols).reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.astype(np.float64)[None, :, None, None]
    return y.astype(x.dtype)


def _rule(ctx: InferContext) -> TensorSpec:
    x, w = ctx.inputs[:2]
    if x.rank != 4 or w.rank != 4:
        raise ctx.error(f"DeformConv takes 4-D X and W (2-D images), got {x} and {w}")
    if not all(isinstance(d, int) for d in x.shape[2:] + w.shape[2:]):
        return TensorSpec((x.shape[0], w.shape[0], ctx.symbol(), ctx.symbol()), x.dtype)
    *_, (oh, ow) = _geometry(x.shape, w.shape, ctx.attrs)
    if oh < 1 or ow < 1:
        raise ctx.error(f"the kernel does not fit X {x}")
    return TensorSpec((x.shape[0], w.shape[0], oh, ow), x.dtype)


def _samples(rng, dtype):
    x, w = random(rng, (1, 2, 4, 4), dtype), random(rng, (2, 2, 2, 2), dtype)
    yield [x, w, random(rng, (1, 8, 3, 3), dtype, -1, 1)], {}
    yield [x, w, random(rng, (1, 16, 4, 4), dtype, -1, 1), random(rng, (2,), dtype),
           random(rng, (1, 8, 4, 4), dtype, 0, 1)], {"offset_group": 2, "pads": [1, 1, 0, 0], "strides": [1, 1]}


register_op("DeformConv", inputs=["X", "W", "offset", "B?", "mask?"], outputs=["Y"],
            attrs={"dilations": ("ints", ()), "group": ("int", 1), "kernel_shape": ("ints", ()),
                   "offset_group": ("int", 1), "pads": ("ints", ()), "strides": ("ints", ())},
            infer=_rule, samples=_samples)

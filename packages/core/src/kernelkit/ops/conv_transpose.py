"""ConvTranspose (ONNX opset 21, N-D, grouped, dilated, strided; pads, output_padding,
output_shape, auto_pad) with a fused activation.

Reference: one batched BLAS matmul per group gives every input pixel's contribution (N*P, Mg*K),
then a col2im scatter-add loops over the kernel offsets only (never over pixels)."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..activation import ACTIVATION_ATTRS, apply_activation
from ..dtypes import FLOAT_TYPES
from ..geometry import conv_transpose_geometry as _resolve
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import random
from ._window import WINDOW_ATTRS, compute_dtype

ATTRS = {**WINDOW_ATTRS, "group": ("int", 1), "output_padding": ("ints", ()), "output_shape": ("ints", ()),
         **ACTIVATION_ATTRS}


def _geometry(ctx):
    x, w, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2] if ctx.has(2) else None
    a = ctx.attrs
    if x.rank < 3 or w.rank != x.rank:
        raise ctx.error(f"X {x} must have rank >= 3 and W {w} the same rank")
    if 0 in x.shape[2:]:
        raise ctx.error(f"X {x} has an empty spatial dim")
    if w.dtype != x.dtype or (b is not None and b.dtype != x.dtype):
        raise ctx.error(f"X, W and B must share a dtype; got {x.dtype}, {w.dtype}, {b.dtype if b else '-'}")
    kernel = a["kernel_shape"] or w.shape[2:]
    if any(isinstance(k, str) for k in kernel) or tuple(kernel) != tuple(w.shape[2:]):
        raise ctx.error(f"kernel_shape {tuple(kernel)} must be static and match W's spatial shape {w.shape[2:]}")
    g, c = a["group"], x.shape[1]
    if g < 1 or (isinstance(c, int) and (c != w.shape[0] or c % g)):
        raise ctx.error(f"X has {c} channels; W {w.shape} with group {g} needs W.shape[0] == C, a multiple of group")
    m = w.shape[1] * g if isinstance(w.shape[1], int) else ctx.symbol("m")
    if b is not None and (b.rank != 1 or b.shape[0] != m):
        raise ctx.error(f"B {b} must have shape ({m},)")
    geo = _resolve(x.shape[2:], kernel, strides=a["strides"], dilations=a["dilations"], pads=a["pads"],
                   auto_pad=a["auto_pad"], output_padding=a["output_padding"],
                   output_shape=a["output_shape"], fail=ctx.error)
    return x, w, m, geo


def _infer(ctx) -> TensorSpec:
    x, _, m, (*_, out) = _geometry(ctx)
    return TensorSpec((x.shape[0], m, *(ctx.symbol("s") if o is None else o for o in out)), x.dtype)


def _flops(ctx) -> int | None:
    x, w, _, _ = _geometry(ctx)
    dims = (*x.shape, *w.shape[1:])
    return 2 * math.prod(dims) if all(isinstance(d, int) for d in dims) else None


def _conv_transpose(x, w, group, strides, dilations, begin, out):
    n, c = x.shape[:2]
    spatial, kernel = x.shape[2:], w.shape[2:]
    nd, cg, mg = len(spatial), c // group, w.shape[1]
    p, k = math.prod(spatial), math.prod(kernel)
    cols = x.reshape(n, group, cg, p).transpose(1, 0, 3, 2).reshape(group, n * p, cg)
    y = np.matmul(cols, w.reshape(group, cg, mg * k))  # (G, N*P, Mg*K)
    y = y.reshape(group, n, *spatial, mg, *kernel)
    y = y.transpose(1, 0, 2 + nd, *range(2, 2 + nd), *range(3 + nd, 3 + 2 * nd))
    y = y.reshape(n, group * mg, *spatial, *kernel)  # (N, M, *in, *K)
    # col2im into a buffer covering every output index (before cropping pads)
    lo = [min(0, b) for b in begin]  # first buffer index, in uncropped output coordinates
    full = [s * (i - 1) + (kk - 1) * d + 1 for s, i, kk, d in zip(strides, spatial, kernel, dilations)]
    hi = [max(f, b + o) for f, b, o in zip(full, begin, out)]
    buf = np.zeros((n, group * mg, *(h - lw for h, lw in zip(hi, lo))), y.dtype)
    for offs in itertools.product(*(range(kk) for kk in kernel)):
        index = tuple(slice(o * d - lw, o * d - lw + s * (i - 1) + 1, s)
                      for o, d, lw, s, i in zip(offs, dilations, lo, strides, spatial))
        buf[(slice(None), slice(None), *index)] += y[(Ellipsis, *offs)]
    crop = tuple(slice(b - lw, b - lw + o) for b, lw, o in zip(begin, lo, out))
    return buf[(slice(None), slice(None), *crop)]


@register_kernel("ConvTranspose", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def conv_transpose(x, w, b=None, *, auto_pad="NOTSET", dilations=(), group=1, kernel_shape=(), pads=(),
                   strides=(), output_padding=(), output_shape=(), activation="", activation_params=()):
    ct = compute_dtype(x.dtype)
    strides, dilations, begin, _, out = _resolve(
        x.shape[2:], kernel_shape if kernel_shape else w.shape[2:], strides=strides, dilations=dilations, pads=pads,
        auto_pad=auto_pad, output_padding=output_padding, output_shape=output_shape)
    y = _conv_transpose(x.astype(ct, copy=False), w.astype(ct, copy=False), group, strides, dilations,
                        begin, out)
    y = np.ascontiguousarray(y)
    if b is not None:
        y += b.astype(ct).reshape(-1, *(1,) * (x.ndim - 2))
    return apply_activation(y, activation, activation_params).astype(x.dtype, copy=False)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -1, 1)

    yield [r(1, 3, 4, 4), r(3, 2, 3, 3), r(2)], {}
    yield [r(2, 4, 3, 5), r(4, 3, 3, 2), None], {"strides": [2, 3], "pads": [1, 0, 0, 1]}
    yield [r(1, 4, 4, 3), r(4, 1, 3, 3), r(4)], {"group": 4, "strides": [2, 2], "output_padding": [1, 0]}
    yield [r(1, 4, 3, 3), r(4, 2, 2, 3), r(4)], {"group": 2, "dilations": [2, 1], "strides": [2, 1]}
    yield [r(1, 2, 3, 4), r(2, 3, 3, 3), None], {"strides": [2, 2], "output_shape": [8, 9]}
    yield [r(1, 2, 3, 4), r(2, 2, 3, 2), r(2)], {"strides": [2, 2], "auto_pad": "SAME_UPPER"}
    yield [r(1, 2, 3, 4), r(2, 2, 3, 2), r(2)], {"strides": [2, 3], "auto_pad": "SAME_LOWER"}
    yield [r(1, 2, 3, 3), r(2, 2, 2, 2), None], {"strides": [2, 2], "auto_pad": "VALID"}
    yield [r(2, 3, 5), r(3, 2, 4), r(2)], {"strides": [3], "pads": [1, 2], "output_padding": [2]}  # 1-D
    yield [r(1, 2, 2, 3, 2), r(2, 2, 2, 2, 2), r(2)], {"strides": [2, 1, 2]}  # 3-D
    yield [r(1, 3, 4, 4), r(3, 2, 3, 3), r(2)], {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                 "activation": "LeakyRelu", "activation_params": [0.1]}


register_op("ConvTranspose", inputs=["X", "W", "B?"], outputs=["Y"], attrs=ATTRS, infer=_infer,
            samples=_samples, flops=_flops)

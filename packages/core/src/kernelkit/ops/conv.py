"""Conv (ONNX opset 21, N-D, grouped/depthwise, dilated, strided, padded) with a fused activation.

Reference: the padded input is viewed as strided windows, gathered once per group into columns
(im2col) and multiplied by the weights with one batched BLAS matmul over the groups."""
from __future__ import annotations

import math

import numpy as np

from ..activation import ACTIVATION_ATTRS, apply_activation
from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import random
from ._window import WINDOW_ATTRS, compute_dtype, symbolic_out, window, windows

ATTRS = {**WINDOW_ATTRS, "group": ("int", 1), **ACTIVATION_ATTRS}


def _geometry(ctx):
    x, w, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2] if ctx.has(2) else None
    a = ctx.attrs
    if x.rank < 3 or w.rank != x.rank:
        raise ctx.error(f"X {x} must have rank >= 3 and W {w} the same rank")
    if w.dtype != x.dtype or (b is not None and b.dtype != x.dtype):
        raise ctx.error(f"X, W and B must share a dtype; got {x.dtype}, {w.dtype}, {b.dtype if b else '-'}")
    kernel = a["kernel_shape"] or w.shape[2:]
    if any(isinstance(k, str) for k in kernel):
        raise ctx.error(f"weight spatial shape {w.shape[2:]} must be static (or give kernel_shape)")
    if isinstance(w.shape[2], int) and tuple(w.shape[2:]) != tuple(kernel):
        raise ctx.error(f"kernel_shape {tuple(kernel)} does not match W's spatial shape {w.shape[2:]}")
    g, m, c = a["group"], w.shape[0], x.shape[1]
    if g < 1 or (isinstance(m, int) and m % g):
        raise ctx.error(f"group {g} must be >= 1 and divide the {m} output channels")
    if isinstance(c, int) and isinstance(w.shape[1], int) and c != w.shape[1] * g:
        raise ctx.error(f"X has {c} channels but W {w.shape} with group {g} expects {w.shape[1] * g}")
    if b is not None and (b.rank != 1 or b.shape[0] != m):
        raise ctx.error(f"B {b} must have shape ({m},)")
    win = window(x.shape[2:], kernel, strides=a["strides"], dilations=a["dilations"], pads=a["pads"],
                 auto_pad=a["auto_pad"], fail=ctx.error)
    return x, w, win


def _infer(ctx) -> TensorSpec:
    x, w, win = _geometry(ctx)
    return TensorSpec((x.shape[0], w.shape[0], *symbolic_out(ctx, win)), x.dtype)


def _flops(ctx) -> int | None:
    x, w, win = _geometry(ctx)
    dims = (x.shape[0], w.shape[0], w.shape[1], *win.out)
    if any(not isinstance(d, int) for d in dims):
        return None
    return 2 * math.prod(dims) * math.prod(win.kernel)


def _conv(x: np.ndarray, w: np.ndarray, win, group: int) -> np.ndarray:
    """Grouped N-D convolution in x's dtype (no bias): windows -> columns -> batched matmul."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    nd = win.rank
    cols = windows(x, win)  # (N, C, *out, *K)
    out = cols.shape[2:2 + nd]
    k = math.prod(win.kernel)
    p = math.prod(out)
    cols = cols.reshape(n, group, cg, *out, *win.kernel)
    # -> (G, N, *out, Cg, *K) -> (G, N*P, Cg*K): the one copy (im2col)
    order = (1, 0, *range(3, 3 + nd), 2, *range(3 + nd, 3 + 2 * nd))
    cols = cols.transpose(order).reshape(group, n * p, cg * k)
    weights = w.reshape(group, m // group, cg * k).transpose(0, 2, 1)  # (G, Cg*K, Mg)
    y = np.matmul(cols, weights)  # (G, N*P, Mg)
    y = y.reshape(group, n, *out, m // group)
    y = y.transpose(1, 0, 2 + nd, *range(2, 2 + nd))  # (N, G, Mg, *out)
    return np.ascontiguousarray(y).reshape(n, m, *out)


@register_kernel("Conv", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def conv(x, w, b=None, *, auto_pad="NOTSET", dilations=(), group=1, kernel_shape=(), pads=(), strides=(),
         activation="", activation_params=()):
    ct = compute_dtype(x.dtype)
    kernel = kernel_shape if kernel_shape else w.shape[2:]  # absent: W's spatial shape
    win = window(x.shape[2:], kernel, strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad)
    y = _conv(x.astype(ct, copy=False), w.astype(ct, copy=False), win, group)
    if b is not None:
        y += b.astype(ct).reshape(-1, *(1,) * win.rank)
    return apply_activation(y, activation, activation_params).astype(x.dtype, copy=False)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -1, 1)

    yield [r(1, 3, 7, 7), r(4, 3, 3, 3), r(4)], {}
    yield [r(2, 4, 9, 8), r(6, 2, 3, 2), None], {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]}
    yield [r(1, 4, 8, 8), r(4, 1, 3, 3), r(4)], {"group": 4, "pads": [1, 1, 1, 1]}  # depthwise
    yield [r(1, 2, 10, 9), r(3, 2, 3, 3), r(3)], {"dilations": [2, 3], "strides": [1, 2]}
    yield [r(1, 3, 7, 6), r(2, 3, 3, 2), r(2)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}
    yield [r(1, 3, 7, 6), r(2, 3, 2, 3), None], {"auto_pad": "SAME_LOWER", "strides": [2, 1]}
    yield [r(1, 2, 6, 5), r(2, 2, 3, 3), None], {"auto_pad": "VALID", "kernel_shape": [3, 3]}
    yield [r(2, 3, 11), r(4, 3, 4), r(4)], {"strides": [3], "pads": [2, 1]}  # 1-D
    yield [r(1, 2, 4, 5, 4), r(3, 2, 2, 3, 2), r(3)], {"pads": [1, 0, 1, 0, 1, 1]}  # 3-D
    yield [r(1, 4, 6, 6), r(4, 2, 1, 1), r(4)], {"group": 2}  # pointwise
    yield [r(1, 3, 6, 6), r(4, 3, 3, 3), r(4)], {"pads": [1, 1, 1, 1], "activation": "Relu"}
    yield [r(1, 3, 5, 5), r(2, 3, 3, 3), r(2)], {"activation": "Clip", "activation_params": [-0.5, 0.5]}


register_op("Conv", inputs=["X", "W", "B?"], outputs=["Y"], attrs=ATTRS, infer=_infer, samples=_samples,
            flops=_flops)

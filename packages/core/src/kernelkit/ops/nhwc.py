"""Reference kernels of image ops in the NHWC layout (channels last; docs/architecture.md, "Layouts").

These are layout variants: the layout pass gives them NHWC inputs (Conv weights as HWIO:
kh, kw, in/group, out) when a session asks for NHWC (``options={"layout": "NHWC"}``) or a chain
arrives in it. Each computes in NHWC directly: a Conv is one (N*OH*OW, Cg) x (Cg, Mg) product per
kernel offset and group over strided views of the padded input; depthwise is a multiply-add per
offset. Their priority (-100) is the reference's, so nothing picks them unasked.
"""
from __future__ import annotations

import numpy as np

from ..activation import apply_activation
from ..dtypes import FLOAT_TYPES
from ..geometry import window
from ..registry import register_kernel
from ._window import compute_dtype


def _image(specs, attrs) -> bool:
    return specs[0] is not None and specs[0].rank == 4


def _padded(x: np.ndarray, win, fill) -> np.ndarray:
    (pt, pl), (pb, pr) = win.begin, win.end
    if not (pt or pl or pb or pr):
        return x
    return np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)


def _offsets(xp: np.ndarray, win):
    """(kh, kw, strided NHWC view of the padded input that offset reads)."""
    (sh, sw), (dh, dw), (oh, ow) = win.strides, win.dilations, win.out
    for i in range(win.kernel[0]):
        for j in range(win.kernel[1]):
            yield i, j, xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw, :]


@register_kernel("Conv", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100, layout="NHWC",
                 port_layouts={"W": "HWIO"}, supports=_image)
def conv_nhwc(x, w, b=None, z=None, *, auto_pad="NOTSET", dilations=(), group=1, kernel_shape=(), pads=(), strides=(),
              activation="", activation_params=()):
    ct = compute_dtype(x.dtype)
    kh, kw, cg, m = w.shape
    win = window(x.shape[1:3], kernel_shape or (kh, kw), strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad)
    xp = _padded(x.astype(ct, copy=False), win, 0)
    w = w.astype(ct, copy=False)
    y = np.zeros((x.shape[0], *win.out, m), ct)
    mg = m // group
    for i, j, view in _offsets(xp, win):
        if cg == 1 and mg == 1:  # depthwise: a multiply-add per offset
            y += view * w[i, j, 0]
            continue
        for g in range(group):
            y[..., g * mg:(g + 1) * mg] += view[..., g * cg:(g + 1) * cg] @ w[i, j, :, g * mg:(g + 1) * mg]
    if b is not None:
        y += b.astype(ct)
    if z is not None:  # a fused residual (pass fuse_residual), laid out like Y
        y += z.astype(ct, copy=False)
    return apply_activation(y, activation, activation_params).astype(x.dtype, copy=False)


@register_kernel("BatchNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100,
                 layout="NHWC", supports=_image)
def batch_normalization_nhwc(x, scale, b, mean, var, *, epsilon=1e-5):
    ct = compute_dtype(x.dtype)
    inv = scale.astype(ct) / np.sqrt(var.astype(ct) + ct.type(epsilon))
    y = np.subtract(x, mean.astype(ct), dtype=ct)  # channels last: the per-channel vectors broadcast
    y *= inv
    y += b.astype(ct)
    return y.astype(x.dtype, copy=False)


@register_kernel("GlobalAveragePool", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100,
                 layout="NHWC", supports=_image)
def global_average_pool_nhwc(x):
    return x.mean(axis=(1, 2), keepdims=True, dtype=compute_dtype(x.dtype)).astype(x.dtype, copy=False)


def _pool_2d(specs, attrs) -> bool:
    return _image(specs, attrs) and not attrs.get("ceil_mode") and len(attrs.get("kernel_shape", ())) == 2


@register_kernel("MaxPool", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100, layout="NHWC",
                 supports=lambda specs, attrs: _pool_2d(specs, attrs) and not attrs.get("storage_order"))
def max_pool_nhwc(x, *, auto_pad="NOTSET", ceil_mode=0, dilations=(), kernel_shape, pads=(), storage_order=0,
                  strides=(), output_count=1):
    if output_count > 1:
        raise ValueError("the NHWC MaxPool gives no Indices output")
    win = window(x.shape[1:3], kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad)
    xp = _padded(x, win, -np.inf)
    y = None
    for _, _, view in _offsets(xp, win):
        y = view.copy() if y is None else np.maximum(y, view, out=y)
    return y

"""Resize (ONNX opset 19+), modes nearest, linear (n-linear) and cubic, separable one axis at a time.

Supported: coordinate_transformation_mode half_pixel, half_pixel_symmetric, asymmetric,
align_corners, pytorch_half_pixel, tf_crop_and_resize (``roi``, ``extrapolation_value``);
nearest_mode round_prefer_floor, round_prefer_ceil, floor, ceil; scales or sizes (with axes and
keep_aspect_ratio_policy); ``antialias`` (linear and cubic: the filter widened by 1/scale when
downsampling), ``cubic_coeff_a``, ``exclude_outside``. Source taps outside the input are clamped
to its edge, as ONNX's edge padding does (or dropped and the weights renormalized with
``exclude_outside``)."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..geometry import NEAREST_MODES, POLICIES, TRANSFORMS, source_coordinates
from ..geometry import nearest_index as _nearest
from ..geometry import resize_plan as _plan
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ._util import random

CROP = "tf_crop_and_resize"  # the reference only: accelerated kernels decline it (and cubic, antialias)
ATTRS = {"antialias": ("int", 0), "axes": ("ints", ()), "coordinate_transformation_mode": ("string", "half_pixel"),
         "cubic_coeff_a": ("float", -0.75), "exclude_outside": ("int", 0), "extrapolation_value": ("float", 0.0),
         "keep_aspect_ratio_policy": ("string", "stretch"), "mode": ("string", "nearest"),
         "nearest_mode": ("string", "round_prefer_floor")}


def _given(v):
    return v is not None and np.asarray(v).size > 0


def _infer(ctx) -> TensorSpec:
    x, a = ctx.inputs[0], ctx.attrs
    if a["mode"] not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"mode {a['mode']!r} is not supported (nearest, linear or cubic)")
    if a["coordinate_transformation_mode"] not in TRANSFORMS + (CROP,):
        raise ctx.error(f"coordinate_transformation_mode {a['coordinate_transformation_mode']!r} is not "
                        f"supported; supported: {TRANSFORMS + (CROP,)}")
    if a["nearest_mode"] not in NEAREST_MODES or a["keep_aspect_ratio_policy"] not in POLICIES:
        raise ctx.error(f"nearest_mode must be one of {NEAREST_MODES} and keep_aspect_ratio_policy one of {POLICIES}")
    if any(not -x.rank <= ax < x.rank for ax in a["axes"]):
        raise ctx.error(f"axes {a['axes']} out of range for rank {x.rank}")
    given = [ctx.has(i) and ctx.inputs[i].size != 0 for i in (2, 3)]
    if given[0] and given[1]:
        raise ctx.error("exactly one of scales and sizes must be given")
    if given[0] and ctx.inputs[2].dtype != "float32" or given[1] and ctx.inputs[3].dtype != "int64":
        raise ctx.error("scales must be float32 and sizes int64")
    data = ctx.value(2) if given[0] else ctx.value(3) if given[1] else None
    if data is None:
        axes = [ax % x.rank for ax in a["axes"]] if a["axes"] else range(x.rank)
        return TensorSpec(tuple(ctx.symbol("r") if i in axes else d for i, d in enumerate(x.shape)), x.dtype)
    _, out = _plan(x.shape, ctx.value(2) if given[0] else None, ctx.value(3) if given[1] else None,
                   a["axes"], a["keep_aspect_ratio_policy"], fail=ctx.error)
    return TensorSpec(tuple(ctx.symbol("r") if d is None else d for d in out), x.dtype)


def _source(o, size, scale, transform, roi=None):
    """Source coordinates along one axis; tf_crop_and_resize maps into ``roi`` = (start, end)."""
    if transform != CROP:
        return source_coordinates(o, size, scale, transform)
    length = scale * size
    start, end = roi
    if length == 1:
        return np.full_like(o, (end - start) * (size - 1) / 2 + start * (size - 1))
    return o * (end - start) * (size - 1) / (length - 1) + start * (size - 1)


def _cubic_kernel(d, a):
    d = np.abs(d)
    return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                    np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))


def _taps(src, size, scale, mode, antialias, a, exclude_outside):
    """(indices, weights), each (n_out, n_taps), of the linear/cubic filter at coordinates ``src``.
    An exact integer coordinate takes its pixel as the window's right tap (as ONNX's reference)."""
    base = np.floor(src)
    exact = src == base
    base = np.where(exact, base - 1, base)
    reach = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    start = int(np.floor(-reach / s) + 1)
    offsets = np.arange(start, 2 - start)
    k = base[:, None] + offsets[None, :]
    d = (k - src[:, None]) * s
    w = np.clip(1 - np.abs(d), 0, 1) if mode == "linear" else _cubic_kernel(d, a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    if exclude_outside:
        w = np.where((k < 0) | (k >= size), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1, total)
    return np.clip(k, 0, size - 1).astype(np.int64), w


@register_kernel("Resize", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def resize(x, roi=None, scales=None, sizes=None, *, antialias=0, axes=(), coordinate_transformation_mode="half_pixel",
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
           mode="nearest", nearest_mode="round_prefer_floor"):
    scale, out = _plan(x.shape, scales, sizes, axes, keep_aspect_ratio_policy)
    # each axis is resized in turn (in float64 unless nearest): no step is larger than this
    check_tensor_bytes([max(size, n) for size, n in zip(x.shape, out)], x.dtype if mode == "nearest" else np.float64)
    crop = coordinate_transformation_mode == "tf_crop_and_resize"
    if crop:
        if not _given(roi):
            raise ValueError("tf_crop_and_resize needs roi")
        picked = [a % x.ndim for a in axes] if axes else list(range(x.ndim))
        roi = np.asarray(roi, np.float64).ravel()
        if len(roi) != 2 * len(picked):
            raise ValueError(f"roi {roi.tolist()} needs a start and an end per axis {picked}")
        rois = {a: (roi[i], roi[i + len(picked)]) for i, a in enumerate(picked)}
    y = x if mode == "nearest" else x.astype(np.float64)
    for axis, (size, s, n) in enumerate(zip(x.shape, scale, out)):
        if n == size and s == 1.0 and not crop:
            continue
        src = _source(np.arange(n, dtype=np.float64), size, s, coordinate_transformation_mode,
                      rois.get(axis, (0.0, 1.0)) if crop else None)
        shape = (-1,) + (1,) * (x.ndim - axis - 1)
        if mode == "nearest":
            y = np.take(y, np.clip(_nearest(src, nearest_mode), 0, size - 1), axis=axis)
        else:
            idx, w = _taps(src, size, s, mode, antialias, cubic_coeff_a, exclude_outside)
            y = sum(np.take(y, idx[:, j], axis=axis) * w[:, j].reshape(shape) for j in range(idx.shape[1]))
        if crop:
            outside = ((src < 0) | (src > size - 1)).reshape(shape)
            y = np.where(outside, np.asarray(extrapolation_value, y.dtype), y)
    return np.array(y, dtype=x.dtype, copy=True)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -3, 3)

    def f32(*v):
        return np.array(v, np.float32)

    def i64(*v):
        return np.array(v, np.int64)

    yield [r(1, 2, 3, 4), None, f32(1, 1, 2, 2)], {}
    yield [r(1, 2, 3, 4), None, f32(1, 1, 2, 2)], {}, {"constants": (2,)}
    yield [r(1, 1, 4, 5), None, f32(1, 1, 2, 1.5)], {"mode": "linear"}, {"constants": (2,)}
    yield [r(1, 2, 6, 6), None, f32(1, 1, 0.5, 0.75)], {"mode": "linear",
                                                        "coordinate_transformation_mode": "asymmetric"}
    yield [r(1, 1, 3, 4), None, None, i64(1, 1, 7, 5)], {"mode": "linear",
                                                         "coordinate_transformation_mode": "align_corners"}, \
        {"constants": (3,)}
    yield [r(2, 1, 4, 3), None, None, i64(2, 1, 6, 1)], {"mode": "linear",
                                                         "coordinate_transformation_mode": "pytorch_half_pixel"}
    yield [r(1, 1, 5, 3), None, None, i64(1, 1, 8, 7)], {"coordinate_transformation_mode": "half_pixel_symmetric",
                                                         "mode": "linear"}
    for rule in NEAREST_MODES:
        yield [r(1, 1, 4, 5), None, None, i64(1, 1, 7, 9)], {"nearest_mode": rule}
    yield [r(1, 1, 3, 4), None, f32(3, 2.5)], {"axes": [2, 3], "coordinate_transformation_mode": "asymmetric",
                                               "nearest_mode": "floor"}
    yield [r(1, 1, 4, 6), None, None, i64(3, 3)], {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger",
                                                   "mode": "linear"}
    yield [r(2, 3, 4, 4, 2), None, f32(1, 1, 1.5, 0.5, 2)], {"mode": "linear"}  # 5-D trilinear
    yield [r(1, 2, 8), None, f32(1, 1, 0.375)], {"mode": "nearest", "coordinate_transformation_mode": "align_corners"}
    yield [r(1, 1, 4, 5), None, f32(1, 1, 1.5, 2)], {"mode": "cubic"}
    yield [r(1, 1, 8, 7), None, f32(1, 1, 0.5, 0.6)], {"mode": "cubic", "antialias": 1, "exclude_outside": 1}
    yield [r(1, 1, 8, 7), None, None, i64(1, 1, 3, 4)], {"mode": "linear", "antialias": 1}
    yield [r(1, 1, 4, 5), f32(0.25, 0.125, 0.875, 1.25), None, i64(3, 3)], {  # exact in float32
        "axes": [2, 3], "mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
        "extrapolation_value": 7.0}


register_op("Resize", inputs=["X", "roi?", "scales?", "sizes?"], outputs=["Y"], attrs=ATTRS, infer=_infer,
            samples=_samples)

"""Resize (ONNX opset 19+), modes nearest and linear (n-linear), separable one axis at a time.

Supported: coordinate_transformation_mode half_pixel, half_pixel_symmetric, asymmetric,
align_corners, pytorch_half_pixel; nearest_mode round_prefer_floor, round_prefer_ceil, floor, ceil;
scales or sizes (with axes and keep_aspect_ratio_policy). Not supported (refused with a ShapeError
naming the node): mode cubic, antialias=1, tf_crop_and_resize. Source coordinates outside the
input are clamped to its edge, as ONNX's edge padding does."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..geometry import NEAREST_MODES, POLICIES, TRANSFORMS
from ..geometry import nearest_index as _nearest
from ..geometry import resize_plan as _plan
from ..geometry import source_coordinates as _source
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import random

ATTRS = {"antialias": ("int", 0), "axes": ("ints", ()), "coordinate_transformation_mode": ("string", "half_pixel"),
         "cubic_coeff_a": ("float", -0.75), "exclude_outside": ("int", 0), "extrapolation_value": ("float", 0.0),
         "keep_aspect_ratio_policy": ("string", "stretch"), "mode": ("string", "nearest"),
         "nearest_mode": ("string", "round_prefer_floor")}


def _infer(ctx) -> TensorSpec:
    x, a = ctx.inputs[0], ctx.attrs
    if a["mode"] not in ("nearest", "linear") or a["antialias"]:
        raise ctx.error(f"mode {a['mode']!r} with antialias={a['antialias']} is not supported "
                        f"(nearest or linear, antialias=0)")
    if a["coordinate_transformation_mode"] not in TRANSFORMS:
        raise ctx.error(f"coordinate_transformation_mode {a['coordinate_transformation_mode']!r} is not "
                        f"supported; supported: {TRANSFORMS}")
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


@register_kernel("Resize", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def resize(x, roi=None, scales=None, sizes=None, *, axes=(), coordinate_transformation_mode="half_pixel",
           keep_aspect_ratio_policy="stretch", mode="nearest", nearest_mode="round_prefer_floor"):
    scale, out = _plan(x.shape, scales, sizes, axes, keep_aspect_ratio_policy)
    y = x if mode == "nearest" else x.astype(np.float64)
    for axis, (size, s, n) in enumerate(zip(x.shape, scale, out)):
        if n == size and s == 1.0:
            continue
        src = _source(np.arange(n, dtype=np.float64), size, s, coordinate_transformation_mode)
        if mode == "nearest":
            y = np.take(y, np.clip(_nearest(src, nearest_mode), 0, size - 1), axis=axis)
            continue
        low = np.floor(src)
        w = (src - low).reshape((-1,) + (1,) * (x.ndim - axis - 1))
        i0 = np.clip(low.astype(np.int64), 0, size - 1)
        i1 = np.clip(low.astype(np.int64) + 1, 0, size - 1)
        y = np.take(y, i0, axis=axis) * (1 - w) + np.take(y, i1, axis=axis) * w
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


register_op("Resize", inputs=["X", "roi?", "scales?", "sizes?"], outputs=["Y"], attrs=ATTRS, infer=_infer,
            samples=_samples)

"""Resize (float32), nearest and linear, one axis at a time (``resize_axis`` in nn.cl). The source
index and weight tables come from the core's own helpers (the one definition of the coordinate
transforms and rounding rules); cubic, antialias and tf_crop_and_resize are declined (``_supports``):
the reference runs them."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import ShapeError, register_kernel
from kernelkit.geometry import nearest_index as _nearest
from kernelkit.geometry import resize_plan as _plan
from kernelkit.geometry import source_coordinates as _source
from kernelkit.limits import check_tensor_bytes

from ._common import launch_1d, launch_vec, source
from .elementwise import ew_kernel


def _tables(shape, scales, sizes, axes, policy, transform, mode, nearest_mode):
    """Per resized axis: (axis, out length, int32 [i0.., i1..], float32 weights)."""
    try:
        scale, out = _plan(shape, scales, sizes, axes, policy)
    except ValueError as exc:
        raise ShapeError(f"Resize: {exc}") from None
    check_tensor_bytes([max(size, n) for size, n in zip(shape, out)], np.float32)  # before any table
    steps = []
    for axis, (size, s, n) in enumerate(zip(shape, scale, out)):
        if n == size and s == 1.0:
            continue
        src = _source(np.arange(n, dtype=np.float64), size, s, transform)
        if mode == "nearest":
            i0 = np.clip(_nearest(src, nearest_mode), 0, size - 1)
            i1, w = i0, np.zeros(n)
        else:
            low = np.floor(src)
            w = src - low
            i0 = np.clip(low.astype(np.int64), 0, size - 1)
            i1 = np.clip(low.astype(np.int64) + 1, 0, size - 1)
        steps.append((axis, n, np.concatenate([i0, i1]).astype(np.int32), w.astype(np.float32)))
    return out, steps


def _supports(specs, attrs) -> bool:
    """Cubic, antialias and tf_crop_and_resize run on the reference."""
    return (attrs.get("mode", "nearest") in ("nearest", "linear") and not attrs.get("antialias", 0)
            and attrs.get("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize")


def resize(x, roi=None, scales=None, sizes=None, *, axes=(), coordinate_transformation_mode: str = "half_pixel",
           keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor"):
    dev = x.device
    sc = None if scales is None else scales.values()
    sz = None if sizes is None else sizes.values()
    out, steps = _tables(x.shape, sc, sz, axes, keep_aspect_ratio_policy, coordinate_transformation_mode, mode,
                         nearest_mode)
    if not steps or 0 in out or x.size == 0:  # nothing resized (a fresh copy) or an empty result
        y = dev.empty(tuple(out), x.dtype)
        if y.size:
            launch_vec(dev, ew_kernel(dev, "unary_Identity", x.dtype), y.size,
                      (x.buffer, y.buffer, np.int32(y.size), np.float32(0), np.float32(0)), [x], [y], "copy")
        return y
    cur = x
    shape = list(x.shape)
    for axis, n, idx, w in steps:
        size = shape[axis]
        shape[axis] = n
        nxt = dev.empty(tuple(shape), x.dtype)
        weights = dev.upload(w)
        launch_1d(dev, dev.kernel(source("nn.cl"), "resize_axis"), nxt.size,
                  (cur.buffer, nxt.buffer, dev.meta(idx), weights.buffer, np.int32(nxt.size), np.int32(size),
                   np.int32(n), np.int32(math.prod(shape[axis + 1:])), np.int32(mode == "linear")),
                  [cur, weights], [nxt], "resize")
        cur = nxt
    return cur


def register() -> None:
    register_kernel("Resize", device="gpu", vendor="opencl", dtype="float32", supports=_supports)(resize)

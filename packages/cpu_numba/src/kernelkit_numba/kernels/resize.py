"""Resize, modes nearest and linear (n-linear), with the coordinate transformations, nearest
rules and size policies the reference supports (its helpers resolve them, so both agree).

Nearest is one parallel gather (``_copy.take``) with the chosen source index per output position
of every axis. Linear is separable: one parallel pass per resized axis over an (outer, L, inner)
view, blending two source rows with float64 weights; intermediate passes stay in float64 like the
reference, and the result is rounded once. Modes the reference does not support (cubic,
antialias, tf_crop_and_resize) are declined through ``supports``.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from kernelkit.geometry import NEAREST_MODES, TRANSFORMS
from kernelkit.geometry import nearest_index as _nearest
from kernelkit.geometry import resize_plan as _plan
from kernelkit.geometry import source_coordinates as _source
from kernelkit.limits import check_tensor_bytes
from kernelkit.registry import register_kernel
from numba import prange

from .._base import threaded
from ..config import jit_parallel
from ._copy import axis_tables, take

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _lerp_axis(x, i0, i1, w, y):
    """y[o, j, :] = x[o, i0[j], :] * (1 - w[j]) + x[o, i1[j], :] * w[j]."""
    o_n, m_n, in_n = y.shape
    for o in prange(o_n):
        for j in range(m_n):
            a, b, wj = i0[j], i1[j], w[j]
            for i in range(in_n):
                y[o, j, U(i)] = x[o, a, U(i)] * (1.0 - wj) + x[o, b, U(i)] * wj


def _supports(specs, attrs) -> bool:
    return (attrs.get("mode", "nearest") in ("nearest", "linear") and not attrs.get("antialias", 0)
            and attrs.get("coordinate_transformation_mode", "half_pixel") in TRANSFORMS
            and attrs.get("nearest_mode", "round_prefer_floor") in NEAREST_MODES)


REPEAT_INTO = True  # _repeat writes its last step into the output (False: repeats, then a copy)
_REPEAT_MIN_RUN = 16  # ... where the copy's contiguous runs are this long (2-element runs: 5x slower)


def _repeat_factors(index, shape) -> list[int] | None:
    """Each axis's integer upsampling factor when nearest's source index along every axis is
    ``arange(n) // k`` (FPN's and YOLO's Resize x2), else None."""
    factors = []
    for idx, size in zip(index, shape):
        k = idx.shape[0] // size
        if k < 1 or k * size != idx.shape[0] or not np.array_equal(idx, np.arange(idx.shape[0]) // k):
            return None
        factors.append(k)
    return factors


def _repeat(x, factors, shape, into):
    """Integer-factor nearest upsampling as NumPy's repeat along each scaled axis: its copy loops
    are made for this (a 1x512x10x10 x2 upsampling, thread CPU time on the dev box: 112 us for the
    two repeats against 706 us for the offset-table gather, and 587 us for one broadcast copy,
    whose innermost runs are 2 elements long)."""
    y = x
    first = next((a for a, k in enumerate(factors) if k > 1), None)
    if into is not None and REPEAT_INTO and first is not None and math.prod(shape[first + 1:]) >= _REPEAT_MIN_RUN:
        for axis in range(first + 1, len(factors)):
            if factors[axis] > 1:
                y = np.repeat(y, factors[axis], axis=axis)
        # the outermost scaled axis as a broadcast copy straight into the output: runs of the later
        # axes' length, one temporary and one full-size copy fewer (YOLO's x2 of 512@10x10: 165 -> 123 us)
        k = factors[first]
        view = into.reshape(shape[:first] + (x.shape[first], k) + shape[first + 1:])
        np.copyto(view, np.expand_dims(y, first + 1))
        return into
    for axis, k in enumerate(factors):
        if k > 1:
            y = np.repeat(y, k, axis=axis)
    if into is not None:
        np.copyto(into, y)
        return into
    return y if y is not x else x.copy()


def _values(v):
    """A hashable (dtype, values) of a scales or sizes input, None when absent or empty."""
    if v is None or np.size(v) == 0:
        return None
    a = np.asarray(v)
    return a.dtype.str, tuple(a.ravel().tolist())


@functools.lru_cache(maxsize=256)
def _repeat_plan(shape, scales, sizes, axes, transform, policy, nearest_mode):
    """(integer factors per axis, output shape) of a nearest Resize that is a repeat, else None."""
    scales, sizes = (None if v is None else np.array(v[1], np.dtype(v[0])) for v in (scales, sizes))
    scale, out = _plan(shape, scales, sizes, axes, policy)
    if math.prod(out) == 0:
        return None
    factors = _repeat_factors(_nearest_index(shape, scale, out, transform, nearest_mode), shape)
    return None if factors is None else (tuple(factors), tuple(out))


def _sources(shape, scale, out, transform) -> list:
    """Per axis the source coordinate of each output position (float64)."""
    return [np.arange(size, dtype=np.float64) if n == size and s == 1.0
            else _source(np.arange(n, dtype=np.float64), size, s, transform)
            for size, s, n in zip(shape, scale, out)]


def _nearest_index(shape, scale, out, transform, nearest_mode) -> list:
    """Per axis the source index nearest's rounding picks for each output position."""
    return [np.clip(_nearest(c, nearest_mode), 0, size - 1)
            for c, size in zip(_sources(shape, scale, out, transform), shape)]


REPEAT_PLANS = True  # nearest Resizes into an output look their repeat up by shape and scales (False: derive it)


def resize(x, roi=None, scales=None, sizes=None, *, axes=(), coordinate_transformation_mode="half_pixel",
           keep_aspect_ratio_policy="stretch", mode="nearest", nearest_mode="round_prefer_floor", out=None):
    into = out
    if REPEAT_PLANS and mode == "nearest" and into is not None and x.size:
        # the plan, the source coordinates and the repeat check cost ~70 us a call (the detection
        # head's x2 of 512@10x10: 237 us against the copies' 165)
        hit = _repeat_plan(x.shape, _values(scales), _values(sizes), tuple(axes), coordinate_transformation_mode,
                           keep_aspect_ratio_policy, nearest_mode)
        if hit is not None:
            return _repeat(x, hit[0], hit[1], into)
    scale, out = _plan(x.shape, scales, sizes, axes, keep_aspect_ratio_policy)
    if into is None:  # in float64 axis by axis unless nearest: no step is larger than this
        check_tensor_bytes([max(size, n) for size, n in zip(x.shape, out)],
                           x.dtype if mode == "nearest" else np.float64)
    if math.prod(out) == 0 or x.size == 0:
        if math.prod(out):
            raise ValueError(f"Resize cannot grow the empty input {x.shape} to {tuple(out)}")
        return np.empty(tuple(out), x.dtype) if into is None else into
    if mode == "nearest":
        index = _nearest_index(x.shape, scale, out, coordinate_transformation_mode, nearest_mode)
        factors = _repeat_factors(index, x.shape)
        if factors is not None:
            return _repeat(x, factors, tuple(out), into)
        return take(x, axis_tables(x, index), out=into)
    src = _sources(x.shape, scale, out, coordinate_transformation_mode)
    y = x
    for axis, (size, s, n, c) in enumerate(zip(x.shape, scale, out, src)):
        if n == size and s == 1.0:
            continue
        low = np.floor(c)
        i0 = np.clip(low.astype(np.int64), 0, size - 1)
        i1 = np.clip(low.astype(np.int64) + 1, 0, size - 1)
        outer, inner = math.prod(y.shape[:axis]), math.prod(y.shape[axis + 1:])
        nxt = np.empty(y.shape[:axis] + (n,) + y.shape[axis + 1:], np.float64)
        _lerp_axis(np.ascontiguousarray(y).reshape(outer, size, inner), i0, i1, c - low, nxt.reshape(outer, n, inner))
        y = nxt
    if into is not None:
        np.copyto(into, y)
        return into
    return y.astype(x.dtype)  # a fresh array even when no axis changed


register_kernel("Resize", device="cpu", vendor="numba", dtype="float32", supports=_supports)(threaded(resize))

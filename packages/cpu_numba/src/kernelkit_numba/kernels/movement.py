"""Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth: one parallel gather each.

Each op only builds per-axis source-offset tables (``_copy.take``); the copy itself is the shared
parallel row loop. Transpose, Expand and the depth/space ops read the tables off a NumPy view of
the input (a permuted or zero-stride view: no data moves until the kernel runs).
"""
from __future__ import annotations

import numpy as np
from kernelkit.ops.slice import slices
from kernelkit.registry import register_kernel

from .._base import NumbaKernel, threaded
from ._copy import TakePlan, strides, take


def _view_tables(view, itemsize):
    """Offset tables of a view (zero offset) of a C-contiguous array."""
    return [np.arange(d, dtype=np.int64) * (s // itemsize) for d, s in zip(view.shape, view.strides)]


def _through_view(x, make_view, out_shape):
    xc = np.ascontiguousarray(x)
    return take(xc, _view_tables(make_view(xc), xc.itemsize)).reshape(out_shape)


def _transpose_tables(x, perm):
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(p % max(x.ndim, 1) for p in perm) != list(range(x.ndim)):
        raise ValueError(f"perm {perm} is not a permutation of the {x.ndim} axes")
    return [np.arange(x.shape[p], dtype=np.int64) * strides(x)[p] for p in perm]


def transpose(x, *, perm=None):
    return take(x, _transpose_tables(x, perm))


@register_kernel("Transpose", device="cpu", vendor="numba", dtype=("float32", "int8", "uint8"))  # int8: QDQ models
class Transpose(NumbaKernel):
    """Transpose as a class kernel: the offset tables depend only on the input shape and ``perm``,
    so they are built once per shape (per-head transposes in attention are small and frequent)."""

    def setup(self, input_specs):
        self.plan, self.planned_for = None, None

    def compute(self, x):
        if self.planned_for != x.shape:
            self.plan, self.planned_for = TakePlan(_transpose_tables(x, self.attrs.get("perm"))), x.shape
        return self.plan(x)


def slice_(data, starts, ends, axes=None, steps=None):
    cuts = slices(data.shape, list(starts), list(ends), None if axes is None else list(axes),
                  None if steps is None else list(steps))
    return take(data, [np.arange(*cut.indices(d), dtype=np.int64) * s
                       for cut, d, s in zip(cuts, data.shape, strides(data))])


def expand(x, shape):
    shape = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if any(d < 0 for d in shape):
        raise ValueError(f"shape {list(shape)} has a negative dim")
    out = np.broadcast_shapes(x.shape, shape)  # ValueError names both shapes
    return _through_view(x, lambda xc: np.broadcast_to(xc, out), out)


def tile(x, repeats):
    repeats = [int(r) for r in np.asarray(repeats).reshape(-1)]
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise ValueError(f"repeats {repeats} must be {x.ndim} non-negative ints for shape {x.shape}")
    return take(x, [(np.arange(d * r, dtype=np.int64) % max(d, 1)) * s
                    for d, r, s in zip(x.shape, repeats, strides(x))])


def depth_to_space(x, *, blocksize=1, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        def view(xc):
            return xc.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        def view(xc):
            return xc.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return _through_view(x, view, (n, c // (b * b), h * b, w * b))


def space_to_depth(x, *, blocksize=1):
    n, c, h, w = x.shape
    b = blocksize
    return _through_view(x, lambda xc: xc.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4),
                         (n, c * b * b, h // b, w // b))


for _name, _fn in {"Slice": slice_, "Expand": expand, "Tile": tile,
                   "DepthToSpace": depth_to_space, "SpaceToDepth": space_to_depth}.items():
    register_kernel(_name, device="cpu", vendor="numba", dtype="float32")(threaded(_fn))

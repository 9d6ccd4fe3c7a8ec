"""Geometry shared by the shape rules, the reference kernels and every backend: how ONNX attributes
and index inputs resolve into concrete sizes, offsets and indices. Backends import from here (a
public module), never from ``kernelkit.ops``' private helpers, so that a kernel computes exactly
the sizes the shape rule promised.

- sliding windows (Conv, pools): ``window`` -> ``Window``; ``conv_out_dim``, ``auto_pads``
- ConvTranspose: ``conv_transpose_geometry``
- Pad: ``pad_widths``
- Resize: ``resize_plan`` (scale and length per axis), ``source_coordinates`` (the coordinate
  transforms), ``nearest_index`` (the nearest modes)
- axes and indices: ``normalize_axes``, ``checked_indices`` (Gather), ``topk_count`` (TopK's K),
  ``clamped_range`` (Shape's start/end)

Every function raises ``fail(message)`` (ValueError unless given; shape rules pass ``ctx.error``).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from .ir import Dim

# -- sliding windows ----------------------------------------------------------------------------------
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


class Window(NamedTuple):
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]   # pads before each spatial axis
    end: tuple[int, ...]     # pads after each spatial axis
    out: tuple[Dim | None, ...]  # output length per spatial axis (None: symbolic input)

    @property
    def rank(self) -> int:
        return len(self.kernel)

    @property
    def effective(self) -> tuple[int, ...]:
        """Extent of each dilated kernel axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))


def conv_out_dim(size: Dim, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int,
                 ceil_mode: bool = False) -> Dim | None:
    """Output length of a strided, dilated window; None if ``size`` is symbolic."""
    if isinstance(size, str):
        return None
    eff = (kernel - 1) * dilation + 1
    span = size + pad_begin + pad_end - eff
    out = -(-span // stride) + 1 if ceil_mode else span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def auto_pads(auto_pad: str, sizes: Sequence[Dim], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int], pads: Sequence[int] | None) -> list[int]:
    """Resolve ONNX ``auto_pad`` into explicit pads [b1, b2, ..., e1, e2, ...]."""
    n = len(kernel)
    if auto_pad in ("", "NOTSET"):
        return list(pads) if pads else [0] * (2 * n)
    if auto_pad == "VALID":
        return [0] * (2 * n)
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        if isinstance(size, str):
            begin.append(0)
            end.append(0)
            continue
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        if auto_pad == "SAME_UPPER":
            begin.append(small)
            end.append(big)
        else:
            begin.append(big)
            end.append(small)
    return begin + end


def check_geometry(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                   pads: Sequence[int], auto_pad: str, fail=ValueError):
    """Fill defaults and validate lengths/values; returns (strides, dilations, pads)."""
    n = len(kernel)
    strides = tuple(strides) or (1,) * n
    dilations = tuple(dilations) or (1,) * n
    pads = tuple(pads)
    if auto_pad not in AUTO_PADS:
        raise fail(f"auto_pad {auto_pad!r} is not one of {AUTO_PADS}")
    if len(strides) != n or len(dilations) != n or pads and len(pads) != 2 * n:
        raise fail(f"kernel_shape {tuple(kernel)} needs {n} strides, {n} dilations and {2 * n} pads; "
                   f"got strides {strides}, dilations {dilations}, pads {pads}")
    if min(kernel, default=1) < 1 or min(strides, default=1) < 1 or min(dilations, default=1) < 1:
        raise fail(f"kernel_shape {tuple(kernel)}, strides {strides} and dilations {dilations} must be >= 1")
    if min(pads, default=0) < 0:
        raise fail(f"pads {pads} must be >= 0")
    return strides, dilations, pads


def window(spatial: Sequence[Dim], kernel: Sequence[int], *, strides=(), dilations=(), pads=(),
           auto_pad="NOTSET", ceil_mode=False, fail=ValueError) -> Window:
    """Resolve window attributes against the spatial input sizes ``spatial``."""
    kernel = tuple(int(k) for k in kernel)
    if len(spatial) != len(kernel):
        raise fail(f"kernel_shape {kernel} has {len(kernel)} axes but the input has {len(spatial)} "
                   f"spatial axes")
    strides, dilations, pads = check_geometry(kernel, strides, dilations, pads, auto_pad, fail)
    n = len(kernel)
    full = auto_pads(auto_pad, spatial, kernel, strides, dilations, pads)
    begin, end = tuple(full[:n]), tuple(full[n:])
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(None if isinstance(s, str) else -(-s // st) for s, st in zip(spatial, strides))
    else:
        out = tuple(conv_out_dim(s, k, st, d, b, e, bool(ceil_mode))
                    for s, k, st, d, b, e in zip(spatial, kernel, strides, dilations, begin, end))
    if any(o is not None and o < 1 for o in out):
        raise fail(f"input spatial shape {tuple(spatial)} is smaller than the dilated kernel "
                   f"{tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))} with pads {full}")
    return Window(kernel, strides, dilations, begin, end, out)


# -- ConvTranspose ------------------------------------------------------------------------------------
def conv_transpose_geometry(spatial, kernel, *, strides, dilations, pads, auto_pad, output_padding, output_shape,
             fail=ValueError):
    """(strides, dilations, begin pads, end pads, output lengths) as the ONNX spec defines them;
    output lengths are None for symbolic inputs."""
    n = len(kernel)
    strides, dilations, pads = check_geometry(kernel, strides, dilations, pads, auto_pad, fail)
    opad = tuple(output_padding) or (0,) * n
    if len(opad) != n or (output_shape and len(output_shape) != n):
        raise fail(f"output_padding {opad} and output_shape {tuple(output_shape)} need {n} values")
    if any(p < 0 or p >= max(s, d) for p, s, d in zip(opad, strides, dilations)):
        raise fail(f"output_padding {opad} must be >= 0 and smaller than strides {strides} or dilations")
    full = [None if isinstance(s, str) else st * (s - 1) + op + (k - 1) * d + 1
            for s, st, op, k, d in zip(spatial, strides, opad, kernel, dilations)]
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        want = list(output_shape) or [None if isinstance(s, str) else s * st for s, st in zip(spatial, strides)]
        total = [None if f is None else f - o for f, o in zip(full, want)]
        small = [None if t is None else t // 2 for t in total]
        big = [None if t is None else t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return strides, dilations, begin, end, want
    if auto_pad == "VALID" or not pads:
        pads = (0,) * (2 * n)
    begin, end = list(pads[:n]), list(pads[n:])
    out = [None if f is None else f - b - e for f, b, e in zip(full, begin, end)]
    if any(o is not None and o < 1 for o in out):
        raise fail(f"pads {pads} leave no output for input spatial shape {tuple(spatial)}")
    return strides, dilations, begin, end, out


# -- Pad ---------------------------------------------------------------------------------------------
def pad_widths(shape, pads, axes, fail=ValueError):
    """Per-axis (begin, end) pads over all ``len(shape)`` axes."""
    rank = len(shape)
    pads = [int(p) for p in np.asarray(pads).ravel()]
    axes = list(range(rank)) if axes is None else [int(a) for a in np.asarray(axes).ravel()]
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise fail(f"axes {axes} must be distinct and in [-{rank}, {rank})")
    if len(pads) != 2 * len(axes):
        raise fail(f"pads {pads} must hold 2 * {len(axes)} values (begins then ends)")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a % rank] = (pads[i], pads[i + len(axes)])
    for size, (b, e) in zip(shape, widths):
        if isinstance(size, int) and size + b + e < 0:
            raise fail(f"pads {pads} crop more than the input shape {tuple(shape)} holds")
    return widths


# -- Resize ------------------------------------------------------------------------------------------
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "asymmetric", "align_corners", "pytorch_half_pixel")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")


def _given(v):
    return v is not None and np.asarray(v).size > 0


def resize_plan(shape, scales, sizes, axes, policy, fail=ValueError):
    """Per-axis (scale, output length) for every axis of ``shape``; both are None for a resized
    axis whose length is symbolic."""
    rank = len(shape)
    axes = [a % rank for a in axes] if axes else list(range(rank))
    if _given(scales) == _given(sizes):
        raise fail("exactly one of scales and sizes must be given")
    values = np.asarray(scales if _given(scales) else sizes).ravel()
    if len(values) != len(axes):
        raise fail(f"{'scales' if _given(scales) else 'sizes'} {values.tolist()} need one value per axis {axes}")
    scale: list = [1.0] * rank
    out = list(shape)
    if _given(scales):
        if (values <= 0).any():
            raise fail(f"scales {values.tolist()} must be > 0")
        for a, s in zip(axes, values.astype(np.float64)):
            known = isinstance(shape[a], int)
            scale[a] = float(s)
            out[a] = int(np.floor(s * shape[a])) if known else (shape[a] if s == 1.0 else None)
        return scale, out
    if (values < 0).any():
        raise fail(f"sizes {values.tolist()} must be >= 0")
    values = [int(v) for v in values]
    if any(shape[a] == 0 and v for a, v in zip(axes, values)):
        raise fail(f"sizes {values} grow an empty dim of {tuple(shape)}")
    if policy == "stretch":
        ratios = [(v / shape[a] if shape[a] else 1.0) if isinstance(shape[a], int) else None
                  for a, v in zip(axes, values)]
    elif any(isinstance(shape[a], str) for a in axes):
        return scale, [None if i in axes else d for i, d in enumerate(shape)]
    else:
        common = min if policy == "not_larger" else max
        ratios = [common((v / shape[a] for a, v in zip(axes, values) if shape[a]), default=1.0)] * len(axes)
        values = [int(r * shape[a] + 0.5) for a, r in zip(axes, ratios)]
    for a, r, v in zip(axes, ratios, values):
        scale[a], out[a] = r, v
    return scale, out


def source_coordinates(o, size, scale, transform):
    """Source coordinate (float64) of each output index ``o`` along one axis."""
    length = scale * size  # the (fractional) resized length the ONNX formulas use
    if transform == "asymmetric":
        return o / scale
    if transform == "align_corners":
        return np.zeros_like(o) if length == 1 else o * (size - 1) / (length - 1)
    if transform == "pytorch_half_pixel" and length == 1:
        return np.full_like(o, -0.5)
    x = (o + 0.5) / scale - 0.5
    if transform == "half_pixel_symmetric":
        x += size / 2 * (1 - len(o) / length)
    return x


def nearest_index(x, rule):
    low = np.floor(x)
    frac = x - low
    up = {"round_prefer_floor": frac > 0.5, "round_prefer_ceil": frac >= 0.5, "floor": np.zeros_like(frac, bool),
          "ceil": frac > 0}[rule]
    return (low + up).astype(np.int64)


# -- axes and indices --------------------------------------------------------------------------------
def normalize_axes(axes, rank: int, where: str = "") -> list[int]:
    """Axes made non-negative; out-of-range or repeated axes raise ValueError (kernels use this,
    the session reports it against the node)."""
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise ValueError(f"{where}axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"{where}axes {list(axes)} repeat an axis")
    return out


def checked_indices(indices: np.ndarray, dim: int) -> np.ndarray:
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got {indices.dtype}")
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise IndexError(f"an index in [{indices.min()}, {indices.max()}] is out of range for a dim of {dim}")
    return np.where(indices < 0, indices + dim, indices).astype(np.int64, copy=False)


def topk_count(k, dim) -> int:
    k = np.asarray(k).reshape(-1)
    if k.size != 1 or k.dtype.kind not in "iu":
        raise ValueError(f"K must be one integer, got {k!r}")
    k = int(k[0])
    if not 0 <= k <= dim:
        raise ValueError(f"K = {k} is out of range for a dim of {dim}")
    return k


def clamped_range(rank: int, start: int, end) -> slice:
    """ONNX clamps start/end into [0, rank] after adding rank to negatives."""
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    return slice(start, max(start, end))


def _axis_range(size: int, out: int, offset: int, stride: int, begin: int) -> tuple[slice, slice] | None:
    """For one spatial axis and one (dilated) kernel offset: the outputs o whose input index
    o * stride + offset - begin lies in [0, size), and the input slice they read."""
    lo = max(0, -(-(begin - offset) // stride))
    hi = min(out, (size - 1 + begin - offset) // stride + 1)
    if hi <= lo:
        return None
    first = lo * stride + offset - begin
    return slice(lo, hi), slice(first, first + (hi - lo - 1) * stride + 1, stride)


def kernel_offsets(spatial: Sequence[int], win: Window) -> Iterator[tuple[int, tuple, tuple]]:
    """Yield ``(k, out_region, in_region)`` for every kernel offset (k: its flat C-order index)
    that reaches the input: ``x[..., *in_region]`` holds the input values that offset multiplies
    into ``y[..., *out_region]``. Positions outside every yielded region read padding only."""
    axes = [[_axis_range(size, o, i * d, s, b) for i in range(k)]
            for size, o, k, d, s, b in zip(spatial, win.out, win.kernel, win.dilations, win.strides, win.begin)]
    for k, ranges in enumerate(itertools.product(*axes)):
        if all(r is not None for r in ranges):
            yield k, tuple(r[0] for r in ranges), tuple(r[1] for r in ranges)

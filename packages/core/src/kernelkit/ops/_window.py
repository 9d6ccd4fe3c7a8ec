"""Sliding-window geometry shared by Conv, ConvTranspose and the pools.

``window(...)`` resolves the ONNX attributes (kernel_shape, strides, dilations, pads, auto_pad,
ceil_mode) against an input shape once, for both the shape rule and the kernel; ``windows(...)``
returns the padded input as a strided view of shape (N, C, *out, *kernel) without copying;
``kernel_offsets(...)`` pairs each kernel offset with the output region it reaches and the strided
input region it reads, so padding never has to be materialized.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir import Dim
from ..shape import InferContext, auto_pads, conv_out_dim

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# attributes common to Conv, ConvTranspose and the pools
WINDOW_ATTRS = {
    "auto_pad": ("string", "NOTSET"),
    "dilations": ("ints", ()),
    "kernel_shape": ("ints", ()),
    "pads": ("ints", ()),
    "strides": ("ints", ()),
}


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


def symbolic_out(ctx: InferContext, win: Window) -> tuple[Dim, ...]:
    """Output spatial dims for a shape rule: unknown lengths become fresh symbols."""
    return tuple(ctx.symbol("s") if o is None else o for o in win.out)


def windows(x: np.ndarray, win: Window, fill=0) -> np.ndarray:
    """A read-only strided view of ``x`` (N, C, *spatial) padded with ``fill``: shape
    (N, C, *out, *kernel). Extra end padding for ceil_mode is added as needed."""
    n = win.rank
    eff = win.effective
    widths = [(0, 0), (0, 0)]
    for size, b, e, o, s, k in zip(x.shape[2:], win.begin, win.end, win.out, win.strides, eff):
        need = (o - 1) * s + k  # padded length the last window reaches
        widths.append((b, max(e, need - size - b)))
    xp = np.pad(x, widths, constant_values=fill) if any(w != (0, 0) for w in widths) else x
    view = sliding_window_view(xp, eff, axis=tuple(range(2, 2 + n)))
    index = (slice(None), slice(None))
    index += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(win.out, win.strides))
    index += tuple(slice(None, None, d) for d in win.dilations)
    return view[index]


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


def covers_all(spatial: Sequence[int], win: Window) -> bool:
    """True when every kernel offset reads real input for every output position (no padding is
    ever read), so the offset regions tile the whole output."""
    return all(b == 0 for b in win.begin) and all(
        (o - 1) * s + e <= size for size, o, s, e in zip(spatial, win.out, win.strides, win.effective))


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """Float16 is computed in float32 (accumulation), other floats in themselves."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)

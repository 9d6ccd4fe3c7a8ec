"""Sliding-window geometry shared by Conv, ConvTranspose and the pools.

``window(...)`` resolves the ONNX attributes (kernel_shape, strides, dilations, pads, auto_pad,
ceil_mode) against an input shape once, for both the shape rule and the kernel; ``windows(...)``
returns the padded input as a strided view of shape (N, C, *out, *kernel) without copying;
``kernel_offsets(...)`` pairs each kernel offset with the output region it reaches and the strided
input region it reads, so padding never has to be materialized.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..geometry import AUTO_PADS, Window, check_geometry, kernel_offsets, window  # noqa: F401  (op files)
from ..ir import Dim
from ..shape import InferContext

# attributes common to Conv, ConvTranspose and the pools
WINDOW_ATTRS = {
    "auto_pad": ("string", "NOTSET"),
    "dilations": ("ints", ()),
    "kernel_shape": ("ints", ()),
    "pads": ("ints", ()),
    "strides": ("ints", ()),
}


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


def covers_all(spatial: Sequence[int], win: Window) -> bool:
    """True when every kernel offset reads real input for every output position (no padding is
    ever read), so the offset regions tile the whole output."""
    return all(b == 0 for b in win.begin) and all(
        (o - 1) * s + e <= size for size, o, s, e in zip(spatial, win.out, win.strides, win.effective))


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """Float16 is computed in float32 (accumulation), other floats in themselves."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)

"""Pad (opset 19+: pads, constant_value, axes as inputs), modes constant, reflect, edge and wrap;
negative pads crop. Each output axis maps to a source index (or -1: the constant), and the shared
parallel gather (``_copy.take``) fills the output in one pass."""
from __future__ import annotations

import numpy as np
from kernelkit.geometry import pad_widths as _resolve
from kernelkit.limits import check_tensor_bytes
from kernelkit.registry import register_kernel

from .._base import threaded
from ._copy import axis_tables, take


def _source(size, begin, end, mode):
    """Source index of each output position along one axis (-1: the constant)."""
    i = np.arange(size + begin + end, dtype=np.int64)
    if mode == "constant":  # pad, then crop
        s = i - begin
        return np.where((s >= 0) & (s < size), s, -1)
    lo = max(-begin, 0)  # crop, then pad: the kept source range is [lo, lo + length)
    length = size - lo - max(-end, 0)
    t = i - max(begin, 0)
    if mode == "edge":
        t = np.clip(t, 0, length - 1)
    elif mode == "wrap":
        t = t % length
    elif length == 1:  # reflect
        t = np.zeros_like(t)
    else:
        period = 2 * (length - 1)
        t = np.abs(t) % period
        t = np.where(t >= length, period - t, t)
    return t + lo


def pad(x, pads, constant_value=None, axes=None, *, mode="constant", out=None):
    widths = _resolve(x.shape, pads, axes)
    if mode != "constant":
        kept = [size + min(b, 0) + min(e, 0) for size, (b, e) in zip(x.shape, widths)]
        if any(k < 0 for k in kept):
            raise ValueError(f"mode {mode!r} cannot crop {widths} from shape {x.shape}")
        if any(k == 0 and (b > 0 or e > 0) for k, (b, e) in zip(kept, widths)):
            raise ValueError(f"mode {mode!r} cannot pad an empty axis of shape {tuple(kept)}")
    if out is None:
        check_tensor_bytes([size + b + e for size, (b, e) in zip(x.shape, widths)], x.dtype)
    fill = 0.0 if constant_value is None else constant_value.reshape(())
    return take(x, axis_tables(x, [_source(size, b, e, mode) for size, (b, e) in zip(x.shape, widths)]), fill, out)


register_kernel("Pad", device="cpu", vendor="numba", dtype="float32")(threaded(pad))

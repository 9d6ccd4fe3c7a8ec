"""Conv (ONNX opset 21, N-D, grouped/depthwise, dilated, strided, padded) with a fused activation.

Reference: the input is gathered into columns (N, G, Cg*K, P) with one strided copy per kernel
offset (the padding is never copied), a tile of output rows at a time (about an activation's
bytes), and the weights (G, Mg, Cg*K) multiply them in one batched BLAS matmul per tile that
writes the NCHW output directly. Fast paths: a 1x1 kernel without padding uses
the (strided) input as its columns; depthwise convolution (group == C_in) is a multiply-add per
kernel offset on contiguous shifted slices of the padded input's stride phases."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..activation import ACTIVATION_ATTRS, apply_activation
from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ._util import into, random
from ._window import WINDOW_ATTRS, compute_dtype, covers_all, kernel_offsets, symbolic_out, window

ATTRS = {**WINDOW_ATTRS, "group": ("int", 1), **ACTIVATION_ATTRS}


def _geometry(ctx):
    x, w, b = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2] if ctx.has(2) else None
    if w.dtype != x.dtype or (b is not None and b.dtype != x.dtype):
        raise ctx.error(f"X, W and B must share a dtype; got {x.dtype}, {w.dtype}, {b.dtype if b else '-'}")
    return conv_geometry(ctx, x, w, b)


def conv_geometry(ctx, x, w, b):
    """(x, w, Window) of a convolution of X by W (bias B or None), checked against the attributes;
    shared with the integer and quantized convolutions, which check their own dtypes."""
    a = ctx.attrs
    if x.rank < 3 or w.rank != x.rank:
        raise ctx.error(f"X {x} must have rank >= 3 and W {w} the same rank")
    kernel = a["kernel_shape"] or w.shape[2:]
    if any(isinstance(k, str) for k in kernel):
        raise ctx.error(f"weight spatial shape {w.shape[2:]} must be static (or give kernel_shape)")
    if isinstance(w.shape[2], int) and tuple(w.shape[2:]) != tuple(kernel):
        raise ctx.error(f"kernel_shape {tuple(kernel)} does not match W's spatial shape {w.shape[2:]}")
    g, m, c = a["group"], w.shape[0], x.shape[1]
    if g < 1 or (isinstance(m, int) and m % g):
        raise ctx.error(f"group {g} must be >= 1 and divide the {m} output channels")
    if isinstance(c, int) and isinstance(w.shape[1], int) and c != w.shape[1] * g:
        raise ctx.error(f"X has {c} channels but W {w.shape} with group {g} expects {w.shape[1] * g}")
    if b is not None and (b.rank != 1 or b.shape[0] != m):
        raise ctx.error(f"B {b} must have shape ({m},)")
    win = window(x.shape[2:], kernel, strides=a["strides"], dilations=a["dilations"], pads=a["pads"],
                 auto_pad=a["auto_pad"], fail=ctx.error)
    return x, w, win


def _infer(ctx) -> TensorSpec:
    x, w, win = _geometry(ctx)
    y = TensorSpec((x.shape[0], w.shape[0], *symbolic_out(ctx, win)), x.dtype)
    z = ctx.inputs[3] if ctx.has(3) else None
    if z is not None and (z.dtype != y.dtype or tuple(z.shape) != tuple(y.shape)):
        raise ctx.error(f"Z {z} (the fused residual) must have Y's shape and dtype {y}")
    return y


def _flops(ctx) -> int | None:
    x, w, win = _geometry(ctx)
    dims = (x.shape[0], w.shape[0], w.shape[1], *win.out)
    if any(not isinstance(d, int) for d in dims):
        return None
    return 2 * math.prod(dims) * math.prod(win.kernel)


def _pointwise_columns(x: np.ndarray, win) -> np.ndarray:
    """1x1 kernel without padding: the columns are the (strided) input itself, no im2col."""
    if all(st == 1 for st in win.strides):
        return x
    return x[(slice(None), slice(None), *(slice(None, None, st) for st in win.strides))]


class _Scratch:
    """Arrays carved in turn from a kernel's scratch bytes when it was given some (64-byte
    aligned pieces), else freshly allocated; ``nbytes`` sizes the same pieces for the plan."""

    def __init__(self, buffer: np.ndarray | None = None):
        self.buffer, self.used = buffer, 0

    @staticmethod
    def nbytes(shape, itemsize: int) -> int:
        return -(-math.prod(shape) * itemsize // 64) * 64

    def empty(self, shape, dtype) -> np.ndarray:
        size = self.nbytes(shape, dtype.itemsize)
        if self.buffer is None or self.used + size > self.buffer.nbytes:
            return np.empty(shape, dtype)
        piece = self.buffer[self.used:self.used + math.prod(shape) * dtype.itemsize]
        self.used += size
        return piece.view(dtype).reshape(shape)

    def copy_of(self, array: np.ndarray) -> np.ndarray:
        copy = self.empty(array.shape, array.dtype)
        copy[...] = array
        return copy

    def zeros(self, shape, dtype) -> np.ndarray:
        array = self.empty(shape, dtype)
        array.fill(0)
        return array


COLUMN_BUDGET = 1 << 20  # bytes: columns are built for as many output rows as fit max(this, X, Y)


def _tile_rows(x_shape, m: int, win, itemsize: int) -> int:
    """Output rows (first spatial axis) whose columns are built at once: the columns of a whole
    image can be 9x the activations (3x3); tiles keep them about an activation's size."""
    n, c = x_shape[:2]
    row = n * c * math.prod(win.kernel) * math.prod(win.out[1:]) * itemsize
    budget = max(COLUMN_BUDGET, math.prod(x_shape) * itemsize, n * m * math.prod(win.out) * itemsize)
    return max(1, min(win.out[0], budget // max(row, 1)))


def _im2col_rows(x: np.ndarray, win, offsets, r0: int, r1: int, pieces: _Scratch) -> np.ndarray:
    """Columns (N, C, K, r1 - r0, *out[1:]) of output rows [r0, r1), with one strided copy per
    kernel offset; the padding is never materialized (positions that read it stay zero)."""
    n, c = x.shape[:2]
    shape = (n, c, math.prod(win.kernel), r1 - r0, *win.out[1:])
    cols = pieces.empty(shape, x.dtype) if covers_all(x.shape[2:], win) else pieces.zeros(shape, x.dtype)
    for k, out, src in offsets:
        lo, hi = max(out[0].start, r0), min(out[0].stop, r1)
        if hi <= lo:
            continue
        first, step = src[0].start + (lo - out[0].start) * src[0].step, src[0].step
        rows = slice(first, first + (hi - lo - 1) * step + 1, step)
        cols[(slice(None), slice(None), k, slice(lo - r0, hi - r0), *out[1:])] = \
            x[(slice(None), slice(None), rows, *src[1:])]
    return cols


def _phase_layout(n: int, c: int, win):
    """(per-axis [(q, r) per offset], grid G, padded shape, phase keys) of ``_phase_grids``."""
    shifts = [[divmod(j * d, s) for j in range(k)] for k, d, s in zip(win.kernel, win.dilations, win.strides)]
    grid = [o + sh[-1][0] + (i == 0) for i, (o, sh) in enumerate(zip(win.out, shifts))]
    padded = (n, c, *(s * g for s, g in zip(win.strides, grid)))
    keys = [] if all(s == 1 for s in win.strides) else list(itertools.product(*({r for _, r in sh} for sh in shifts)))
    return shifts, grid, padded, keys


def _depthwise_bytes(x_shape, w_shape, win, itemsize: int) -> int:
    """Scratch of ``_depthwise``: the padded input (stride 1) or its stride phases, the wide
    output and a product."""
    n, c = x_shape[:2]
    shifts, grid, padded, keys = _phase_layout(n, c, win)
    wide = (n, c, w_shape[0] // c, win.out[0] * math.prod(grid[1:]))
    inputs = len(keys) * _Scratch.nbytes((n, c, *grid), itemsize) if keys else _Scratch.nbytes(padded, itemsize)
    return inputs + 2 * _Scratch.nbytes(wide, itemsize)


def _phase_grids(x: np.ndarray, win, pieces: _Scratch):
    """The zero-padded input split into stride phases, for multiply-adds on flat shifted slices.

    Kernel offset j on an axis reads padded position (o + q) * s + r, (q, r) = divmod(j * d, s):
    output o meets element o + q of phase r (= padded[r::s]). Each phase is a grid (N, C, *G)
    with G = out + max q (+1 on the first axis, slack for the flat slices below). Returns
    ({r: phase grid}, per-axis [(q, r) per offset], G)."""
    n, c = x.shape[:2]
    shifts, grid, padded_shape, keys = _phase_layout(n, c, win)
    if not keys:  # stride 1: the padded input is the one phase
        padded = pieces.zeros(padded_shape, x.dtype)
        dst, src = [], []
        for size, b, g, s in zip(x.shape[2:], win.begin, grid, win.strides):
            m = max(0, min(size, s * g - b))  # input beyond every window's reach is left out
            dst.append(slice(b, b + m))
            src.append(slice(0, m))
        padded[(slice(None), slice(None), *dst)] = x[(slice(None), slice(None), *src)]
        return {(0,) * win.rank: padded}, shifts, grid
    phases = {}
    for r in keys:  # phase r = padded[r::s], filled straight from x (the padded input is never made)
        phase = phases[r] = pieces.zeros((n, c, *grid), x.dtype)
        dst, src = [], []
        for size, b, g, s, a in zip(x.shape[2:], win.begin, grid, win.strides, r):
            m = max(0, min(size, s * g - b))  # padded position a + j*s holds x[a + j*s - b] when in [0, m)
            lo, hi = max(0, -(-(b - a) // s)), min(g, (m - 1 + b - a) // s + 1) if m else 0
            first = a + lo * s - b
            dst.append(slice(lo, hi))
            src.append(slice(first, first + (hi - lo - 1) * s + 1, s) if hi > lo else slice(0, 0))
        if all(d.stop > d.start for d in dst):
            phase[(slice(None), slice(None), *dst)] = x[(slice(None), slice(None), *src)]
    return phases, shifts, grid


def _depthwise(x: np.ndarray, w: np.ndarray, win, out: np.ndarray | None = None,
               scratch: np.ndarray | None = None) -> np.ndarray:
    """group == C_in (one input channel per group, any channel multiplier): one multiply-add per
    kernel offset, each on a contiguous flat slice of a stride phase of the padded input.

    Outputs are computed on the phase grid's full width (the extra columns are dropped at the
    end), which makes every offset's input a plain shifted 1-D slice: no GEMM, no columns."""
    n, c = x.shape[:2]
    mult = w.shape[0] // c
    pieces = _Scratch(scratch)
    phases, shifts, grid = _phase_grids(x, win, pieces)
    steps = [math.prod(grid[i + 1:]) for i in range(win.rank)]  # flat strides of the grid
    length = win.out[0] * steps[0]
    flat = {r: p.reshape(n, c, 1, math.prod(grid)) for r, p in phases.items()}  # (no -1: N may be 0)
    taps = w.reshape(c, mult, math.prod(win.kernel), 1)
    y = pieces.empty((n, c, mult, length), x.dtype)
    product = pieces.empty(y.shape, x.dtype)
    for k, offset in enumerate(itertools.product(*shifts)):  # C order, as W's (kh, kw, ...) axes
        start = sum(q * st for (q, _), st in zip(offset, steps))
        view = flat[tuple(r for _, r in offset)][..., start:start + length]
        if k == 0:
            np.multiply(view, taps[:, :, k], out=y)
        else:
            y += np.multiply(view, taps[:, :, k], out=product)
    y = y.reshape(n, c * mult, win.out[0], *grid[1:])[(..., *(slice(0, o) for o in win.out[1:]))]
    if out is not None:
        np.copyto(out, y)
        return out
    return np.ascontiguousarray(y)


def _is_depthwise(x_shape, w_shape, group: int) -> bool:
    return w_shape[1] == 1 and group == x_shape[1] > 1  # C == 1: the im2col GEMM (K = kernel size) is faster


def _scratch_bytes(x_shape, w_shape, win, group: int, itemsize: int) -> int:
    """Bytes of scratch ``_conv`` uses: depthwise buffers, or the columns (none for 1x1 unpadded)."""
    if _is_depthwise(x_shape, w_shape, group):
        return _depthwise_bytes(x_shape, w_shape, win, itemsize)
    if math.prod(win.kernel) == 1 and covers_all(x_shape[2:], win):  # strided 1x1: the sampled input
        return 0 if all(st == 1 for st in win.strides) else _Scratch.nbytes((*x_shape[:2], *win.out), itemsize)
    rows = _tile_rows(x_shape, w_shape[0], win, itemsize)
    return _Scratch.nbytes((*x_shape[:2], math.prod(win.kernel), rows, *win.out[1:]), itemsize)


def _conv(x: np.ndarray, w: np.ndarray, win, group: int, out: np.ndarray | None = None,
          scratch: np.ndarray | None = None) -> np.ndarray:
    """Grouped N-D convolution in x's dtype (no bias), output (N, M, *out) C-contiguous (``out``
    when given; the columns go into ``scratch`` when given).

    Depthwise: per-offset multiply-adds. Otherwise W (G, Mg, Cg*K) times columns (N, G, Cg*K, P)
    in one batched BLAS matmul that writes the NCHW output directly."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    if _is_depthwise(x.shape, w.shape, group):
        return _depthwise(x, w, win, out, scratch)
    k = math.prod(win.kernel)
    wmat = w.reshape(group, m // group, cg * k)
    if k == 1 and covers_all(x.shape[2:], win):
        cols = _pointwise_columns(x, win)
        if not cols.flags.c_contiguous:  # strided: gathered once (into scratch when given)
            cols = _Scratch(scratch).copy_of(cols)
        cols = cols.reshape(n, group, cg, math.prod(win.out))
        target = out.reshape(n, group, m // group, math.prod(win.out)) if out is not None else None
        y = np.matmul(wmat, cols, out=target)  # (N, G, Mg, P)
        return out if out is not None else y.reshape(n, m, *win.out)
    y = out if out is not None else np.empty((n, m, *win.out), x.dtype)
    flat = y.reshape(n, group, m // group, math.prod(win.out))
    per_row = math.prod(win.out[1:])
    tile = _tile_rows(x.shape, m, win, x.dtype.itemsize)
    offsets = list(kernel_offsets(x.shape[2:], win))
    for r0 in range(0, win.out[0], tile):  # row tiles: columns of a few rows, GEMM'd into out
        r1 = min(win.out[0], r0 + tile)
        cols = _im2col_rows(x, win, offsets, r0, r1, _Scratch(scratch))
        np.matmul(wmat, cols.reshape(n, group, cg * k, (r1 - r0) * per_row),
                  out=flat[..., r0 * per_row:r1 * per_row])
    return y


def _scratch(input_specs, attrs) -> int:
    """The im2col columns or depthwise buffers, planned as scratch for static shapes (none for float16,
    which computes in float32)."""
    x, w = input_specs[0], input_specs[1]
    if not (x.is_static and w.is_static) or compute_dtype(np.dtype(x.dtype)) != np.dtype(x.dtype):
        return 0
    win = window(x.shape[2:], attrs["kernel_shape"] or w.shape[2:], strides=attrs["strides"],
                 dilations=attrs["dilations"], pads=attrs["pads"], auto_pad=attrs["auto_pad"])
    return _scratch_bytes(x.shape, w.shape, win, attrs["group"], np.dtype(x.dtype).itemsize)


@register_kernel("Conv", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100, scratch=_scratch)
def conv(x, w, b=None, z=None, *, auto_pad="NOTSET", dilations=(), group=1, kernel_shape=(), pads=(),
         strides=(), activation="", activation_params=(), out=None, scratch=None):
    ct = compute_dtype(x.dtype)
    kernel = kernel_shape if kernel_shape else w.shape[2:]  # absent: W's spatial shape
    win = window(x.shape[2:], kernel, strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad)
    direct = out if ct == x.dtype else None
    y = _conv(x.astype(ct, copy=False), w.astype(ct, copy=False), win, group, direct, scratch)
    if b is not None:
        y += b.astype(ct).reshape(-1, *(1,) * win.rank)
    if z is not None:  # the fused residual (pass fuse_residual): added before the activation
        y += z.astype(ct, copy=False)
    y = apply_activation(y, activation, activation_params).astype(x.dtype, copy=False)
    return y if y is out else into(out, y)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -1, 1)

    yield [r(1, 3, 7, 7), r(4, 3, 3, 3), r(4)], {}
    yield [r(2, 4, 9, 8), r(6, 2, 3, 2), None], {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]}
    yield [r(1, 4, 8, 8), r(4, 1, 3, 3), r(4)], {"group": 4, "pads": [1, 1, 1, 1]}  # depthwise
    yield [r(1, 2, 10, 9), r(3, 2, 3, 3), r(3)], {"dilations": [2, 3], "strides": [1, 2]}
    yield [r(1, 3, 7, 6), r(2, 3, 3, 2), r(2)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}
    yield [r(1, 3, 7, 6), r(2, 3, 2, 3), None], {"auto_pad": "SAME_LOWER", "strides": [2, 1]}
    yield [r(1, 2, 6, 5), r(2, 2, 3, 3), None], {"auto_pad": "VALID", "kernel_shape": [3, 3]}
    yield [r(2, 3, 11), r(4, 3, 4), r(4)], {"strides": [3], "pads": [2, 1]}  # 1-D
    yield [r(1, 2, 4, 5, 4), r(3, 2, 2, 3, 2), r(3)], {"pads": [1, 0, 1, 0, 1, 1]}  # 3-D
    yield [r(1, 4, 6, 6), r(4, 2, 1, 1), r(4)], {"group": 2}  # pointwise
    yield [r(1, 3, 6, 6), r(4, 3, 3, 3), r(4)], {"pads": [1, 1, 1, 1], "activation": "Relu"}
    yield [r(1, 3, 5, 5), r(2, 3, 3, 3), r(2)], {"activation": "Clip", "activation_params": [-0.5, 0.5]}
    # channels in multiples of 16, for the blocked (NCHW8c/NCHW16c) layout variants
    yield [r(2, 16, 7, 6), r(32, 16, 3, 3), r(32)], {"pads": [1, 0, 2, 1], "strides": [2, 1], "activation": "Relu"}
    yield [r(1, 16, 9, 9), r(16, 1, 3, 3), r(16)], {"group": 16, "pads": [1, 1, 1, 1], "strides": [2, 2]}
    yield [r(1, 32, 5, 7), r(16, 32, 1, 1), None], {"dilations": [1, 1]}
    yield [r(1, 16, 8, 8), r(16, 1, 5, 5), None], {"group": 16, "dilations": [2, 1], "pads": [4, 2, 4, 2]}


# Z (not in ONNX): a residual added before the activation, Y = act(conv(X, W) + B + Z), as cuDNN's
# fused convolution takes it; only the fuse_residual pass adds it, for kernels that accept ``z``.
register_op("Conv", inputs=["X", "W", "B?", "Z?"], outputs=["Y"], attrs=ATTRS, infer=_infer, samples=_samples,
            flops=_flops)

"""MaxPool, AveragePool (1-D/2-D, strided, dilated, padded, ceil_mode) and the global pools.

Window geometry comes from core (``kernelkit.geometry.window``), the same resolution the shape
rule uses. The windowed kernels walk one output row at a time and, per kernel tap, sweep the valid
output columns, so the inner loop is a (strided) vector max/add rather than a scalar window scan.
"""
from __future__ import annotations

import math

import numpy as np
from kernelkit.geometry import window
from kernelkit.registry import register_kernel

from .. import config
from .._base import NumbaKernel, threaded
from ..config import jit_parallel, parallel_for
from . import dwtile
from ._range import tap_range

U = np.uint64  # unsigned index: no wraparound check in inner loops


@jit_parallel
def _max_pool_indices(x, y, idx, kh, kw, sh, sw, dh, dw, ph, pw, col_major, lo, hi):
    """Max pool that also returns the flat index of each maximum (first one on ties)."""
    n_n, c_n, h_n, w_n = x.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    for nc in range(lo, hi):
        n = nc // c_n
        c = nc - n * c_n
        src = x[n, c]
        base = nc * h_n * w_n
        for oh in range(oh_n):
            for ow in range(ow_n):
                best = -np.inf
                at = -1
                for i in range(kh):
                    h = oh * sh - ph + i * dh
                    if h < 0 or h >= h_n:
                        continue
                    for j in range(kw):
                        w = ow * sw - pw + j * dw
                        if w < 0 or w >= w_n:
                            continue
                        if src[h, w] > best or at < 0:
                            best = src[h, w]
                            at = base + (w * h_n + h if col_major else h * w_n + w)
                y[n, c, oh, ow] = best
                idx[n, c, oh, ow] = at


@jit_parallel
def _max_pool_separable(x, y, kh, kw, sh, sw, dh, dw, ph, pw, lo, hi):
    """Float max pool without indices as two 1-D passes per output row: the maximum over the kh
    input rows of its windows (``cmax``: the first valid row copied, the others merged in, full-
    width contiguous sweeps), then per column tap one strided sweep over ``cmax`` (the first tap
    assigns). ``cmax`` carries the column padding as -inf (pw slots on the left, as many as the
    last window needs on the right), so every tap sweeps every output column. A window of kh*kw
    taps costs about kh + kw compares per output and every inner loop is a vector loop (the
    column pass first: it runs over the wider input rows, and it is the contiguous one). NaN
    propagates as in NumPy's maximum (``v > m or v != v``). Planes ``[lo, hi)`` of the flattened
    (N, C)."""
    n_n, c_n, h_n, w_n = x.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    width = max(pw + w_n, (ow_n - 1) * sw + (kw - 1) * dw + 1)  # padded columns read
    cmax = np.empty(width, y.dtype)
    xf = x.reshape(x.size)
    yf = y.reshape(y.size)
    neg = -np.inf
    for c in range(width):
        cmax[U(c)] = neg  # the padding; columns [pw, pw + w_n) are rewritten per row
    cb = U(pw)
    for nc in range(lo, hi):
        xb = nc * h_n * w_n
        yb = nc * oh_n * ow_n
        for oh in range(oh_n):
            first = True
            for i in range(kh):
                h = oh * sh - ph + i * dh
                if h < 0 or h >= h_n:
                    continue
                s0 = U(xb + h * w_n)
                if first:
                    for w in range(w_n):
                        cmax[cb + U(w)] = xf[s0 + U(w)]
                    first = False
                else:
                    for w in range(w_n):
                        v = xf[s0 + U(w)]
                        m = cmax[cb + U(w)]
                        cmax[cb + U(w)] = v if v > m or v != v else m
            if first:  # no input row in the window (padding only): -inf, as the reference
                for w in range(w_n):
                    cmax[cb + U(w)] = neg
            d0 = U(yb + oh * ow_n)
            if sw == 1:
                for ow in range(ow_n):
                    yf[d0 + U(ow)] = cmax[U(ow)]
                for j in range(1, kw):
                    t = U(j * dw)
                    for ow in range(ow_n):
                        v = cmax[U(ow) + t]
                        m = yf[d0 + U(ow)]
                        yf[d0 + U(ow)] = v if v > m or v != v else m
            else:
                for ow in range(ow_n):
                    yf[d0 + U(ow)] = cmax[U(ow * sw)]
                for j in range(1, kw):
                    t = U(j * dw)
                    for ow in range(ow_n):
                        v = cmax[U(ow * sw) + t]
                        m = yf[d0 + U(ow)]
                        yf[d0 + U(ow)] = v if v > m or v != v else m


@jit_parallel
def _avg_pool(x, y, cnt_h, cnt_w, kh, kw, sh, sw, dh, dw, ph, pw, lo, hi):
    """Window sums divided by cnt_h[oh] * cnt_w[ow] (taps counted per the pad mode)."""
    n_n, c_n, h_n, w_n = x.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    for nc in range(lo, hi):
        n = nc // c_n
        c = nc - n * c_n
        src = x[n, c]
        for oh in range(oh_n):
            row = y[n, c, oh]
            row[:] = 0
            for i in range(kh):
                h = oh * sh - ph + i * dh
                if h < 0 or h >= h_n:
                    continue
                s = src[h]
                for j in range(kw):
                    off = j * dw - pw
                    lo, hi = tap_range(off, sw, w_n, ow_n)
                    for ow in range(lo, hi):
                        row[U(ow)] += s[U(ow * sw + off)]
            for ow in range(ow_n):
                row[U(ow)] /= cnt_h[oh] * cnt_w[U(ow)]


@jit_parallel
def _global_pool(x, y, is_max, lo, hi):
    """y[r] = mean (or max) of x[r, :] for rows [lo, hi) of a (rows, L) view."""
    l_n = x.shape[1]
    for r in range(lo, hi):
        src = x[r]
        if is_max:
            acc = src[0]
            for i in range(1, l_n):
                if src[U(i)] > acc or src[U(i)] != src[U(i)]:
                    acc = src[U(i)]
            y[r] = acc
        else:
            total = 0.0
            for i in range(l_n):
                total += src[U(i)]
            y[r] = total / l_n


def _supports(specs, attrs) -> bool:
    return specs[0] is not None and len(specs[0].shape) in (3, 4)


def _taps(out_n, size, k, s, d, pad_begin, low, high):
    """Per output position along one axis: how many of its k taps fall in [low, high)."""
    pos = np.arange(out_n)[:, None] * s - pad_begin + np.arange(k)[None, :] * d
    return ((pos >= low) & (pos < high)).sum(axis=1)


class _Pool(NumbaKernel):
    """Shared geometry: 1-D pools run as 2-D with a unit height."""

    def _window(self, x_shape):
        a = self.attrs
        if x_shape == getattr(self, "_win_key", None):
            return self._win
        win = window(x_shape[2:], a["kernel_shape"], strides=a.get("strides", ()),
                     dilations=a.get("dilations", ()), pads=a.get("pads", ()),
                     auto_pad=a.get("auto_pad", "NOTSET"), ceil_mode=a.get("ceil_mode", 0),
                     fail=self.attr_error)
        if win.rank == 1:
            win = win._replace(kernel=(1,) + win.kernel, strides=(1,) + win.strides,
                               dilations=(1,) + win.dilations, begin=(0,) + win.begin,
                               end=(0,) + win.end, out=(1,) + win.out)
        self._win_key, self._win = x_shape, win
        return win

    @staticmethod
    def _as_2d(x):
        return np.ascontiguousarray(x[:, :, None, :] if x.ndim == 3 else x)


@register_kernel("MaxPool", device="cpu", vendor="numba", dtype="float32", supports=_supports)
class MaxPool(_Pool):
    """Without Indices: float32 3x3 stride 1 or 2 on dwtile's AVX-512 tiles (the row maxima in the
    registers; sharded over planes above an estimated 400 us: ``work`` reports dwtile's estimate),
    else ``_max_pool_separable`` on shards of planes (ResNet's 3x3/2 on 1x64x112x112: 0.34 ms at
    one thread, 1.30 ms as the running maximum of NumPy regions it replaced; issue 11, session 4).
    With Indices: a Numba window scan. int8/uint8: qpool.py."""
    def setup(self, input_specs):
        node = getattr(self.context, "node", None)
        self.want_indices = node is not None and len(node.outputs) > 1 and bool(node.outputs[1])

    def work(self, x):
        win = self._window(x.shape)
        if not self.want_indices and dwtile.maxpool_fits(win.kernel, win.strides, win.dilations, x.dtype):
            planes = x.shape[0] * x.shape[1]
            return dwtile.work("max", win.strides[0], planes, planes * math.prod(win.out))
        return super().work(x)

    def _paired(self, x4, y, stride: int, ph: int, pw: int) -> bool:
        """One image in a session of two threads: the planes in two halves on fpair's helper (cpair.maxpool_pair;
        issue 11, session 12); False where it did not run (no pair, the helper asleep or backed off)."""
        if (self.threads or config.default_threads()) != 2 or not y.flags.c_contiguous or not y.flags.writeable:
            return False
        from . import cpair, rnpair  # (the conv pairs' modules, imported once a two-thread pool runs)

        key = (x4.shape, y.shape, stride, ph, pw)
        hit = self.__dict__.get("_pair")
        if hit is None or hit[0] != key:
            pair = cpair.maxpool_pair(self, y.shape, x4.shape, stride, ph, pw)
            if pair is not None:
                pair.rule = rnpair.rule()  # (rnpair's rule for the parallel one-image layers)
            hit = self._pair = (key, pair)
        pair = hit[1]
        if pair is None:
            return False
        srv = cpair.server()
        before = srv.stats["backoffs"]
        done = pair(None, None, config.readonly(x4), y, None)
        rnpair.follow(srv, before)
        return done

    def compute(self, x, *, out=None):
        win = self._window(x.shape)
        x4 = self._as_2d(x)
        (kh, kw), (sh, sw), (dh, dw), (ph, pw) = win.kernel, win.strides, win.dilations, win.begin
        y = _output(x, x4.shape[:2] + tuple(win.out), out)
        if not self.want_indices and dwtile.maxpool_fits(win.kernel, win.strides, win.dilations, x4.dtype) \
                and dwtile.enabled():
            if x4.shape[0] == 1 and self._paired(x4, y, sh, ph, pw):
                return _result(x, y, out)
            fn, args = dwtile.maxpool(x4, y, sh, ph, pw)
            dwtile.run(fn, y.shape[0] * y.shape[1], args, dwtile.cost_us("max", sh, y.shape[0] * y.shape[1], y.size))
            return _result(x, y, out)
        if not self.want_indices:
            parallel_for(_max_pool_separable, y.shape[0] * y.shape[1], (x4, y, kh, kw, sh, sw, dh, dw, ph, pw),
                         2.0 * y.size * (kh + kw))
            return _result(x, y, out)
        idx = np.empty(y.shape, np.int64)
        parallel_for(_max_pool_indices, y.shape[0] * y.shape[1],
                     (x4, y, idx, kh, kw, sh, sw, dh, dw, ph, pw, self.attrs.get("storage_order", 0) == 1),
                     4.0 * y.size * kh * kw)
        return _result(x, y, out), (idx[:, :, 0, :] if x.ndim == 3 else idx)


@register_kernel("AveragePool", device="cpu", vendor="numba", dtype="float32", supports=_supports)
class AveragePool(_Pool):
    def compute(self, x, *, out=None):
        win = self._window(x.shape)
        x4 = self._as_2d(x)
        h_n, w_n = x4.shape[2:]
        (kh, kw), (sh, sw), (dh, dw), (ph, pw) = win.kernel, win.strides, win.dilations, win.begin
        (oh_n, ow_n), (pe_h, pe_w) = win.out, win.end
        if self.attrs.get("count_include_pad", 0):
            cnt_h = _taps(oh_n, h_n, kh, sh, dh, ph, -ph, h_n + pe_h)
            cnt_w = _taps(ow_n, w_n, kw, sw, dw, pw, -pw, w_n + pe_w)
        else:
            cnt_h = _taps(oh_n, h_n, kh, sh, dh, ph, 0, h_n)
            cnt_w = _taps(ow_n, w_n, kw, sw, dw, pw, 0, w_n)
        y = _output(x, x4.shape[:2] + (oh_n, ow_n), out)
        parallel_for(_avg_pool, y.shape[0] * y.shape[1],
                     (x4, y, cnt_h.astype(x4.dtype), cnt_w.astype(x4.dtype), kh, kw, sh, sw, dh, dw, ph, pw),
                     2.0 * y.size * kh * kw)
        return _result(x, y, out)


def _output(x, shape4, out):
    """The (N, C, H, W) array a pool writes: ``out`` (a unit-height view of it for 1-D pools) or a new one."""
    if out is None:
        return np.empty(shape4, x.dtype)
    return out[:, :, None, :] if x.ndim == 3 else out


def _result(x, y, out):
    return out if out is not None else (y[:, :, 0, :] if x.ndim == 3 else y)


def _global(x, is_max, out=None):
    y = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype) if out is None else out
    if y.size == 0:  # empty batch or channel axis: an empty result, as the reference
        return y
    length = math.prod(x.shape[2:])
    if length == 0:
        if is_max:
            raise ValueError(f"GlobalMaxPool over an empty spatial extent {x.shape[2:]}: the maximum is undefined")
        y[...] = np.nan  # the mean of nothing, as NumPy
        return y
    rows = np.ascontiguousarray(x).reshape(y.size, length)
    parallel_for(_global_pool, y.size, (rows, y.reshape(-1), is_max), 2.0 * x.size)
    return y


def global_average_pool(x, *, out=None):
    return _global(x, False, out)


def global_max_pool(x, *, out=None):
    return _global(x, True, out)


register_kernel("GlobalAveragePool", device="cpu", vendor="numba", dtype="float32")(threaded(global_average_pool))
register_kernel("GlobalMaxPool", device="cpu", vendor="numba", dtype="float32")(threaded(global_max_pool))

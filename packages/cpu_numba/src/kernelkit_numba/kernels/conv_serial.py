"""Conv's serial fast path (``Conv.serial_call``): a convolution of static shapes that runs on the
calling thread alone binds, once, the one compiled driver its general path would reach (ftile's rows
or cols tiles for a float32 1x1 stride-1 convolution, dwtile's window tiles for a 3x3 depthwise one,
BLAS's product for a 1x1 convolution of 1x1 maps: ``_pixel_call``), with every argument that
depends only on shapes, weights and attributes fixed; a call then checks that its weight and bias
are the constants it bound and that the switches it read
(``KERNELKIT_F32_GEMM``, ``KERNELKIT_F32_DEPTHWISE``) still say the same, and calls the driver.

The general path (``Conv.compute``) makes those decisions on every call: geometry, dtype and group
checks, the ftile variant from the environment, the plan, the packed weights' cache, the
arguments, the thread-budget and BLAS bookkeeping of the bound call. On MobileNetV2 at one thread
that was ~2 ms of a ~10 ms run on the AMD dev box (52 convolutions: the session 9.7-10.2 ms, the
same drivers called alone 7.5-7.7 ms plus the head; docs/numba.md, "MobileNetV2 at one thread").
Anything the fast path does not cover (weights fed as graph inputs, a switch changed, a
non-contiguous input) runs the general path, so results never depend on which path ran.
"""
from __future__ import annotations

import functools
import os
import threading
import warnings
import weakref

import numpy as np
from kernelkit.errors import KernelkitError, KernelkitWarning

from .. import config, shards, tiered
from .._base import readonly
from . import cpair, dwtile, fdirect, ftile, halves, rnpair, winograd
from .epilogue import CLIP, NONE, scale_bias_act_cols


def serial_call(conv, step):
    """The fast call of ``conv`` (a prepared numba Conv kernel) or None where the general path runs:
    static float32 NCHW shapes, an epilogue the tiles fuse (none, Relu, Clip), and either a depthwise
    3x3 on dwtile's tiles or a dense 1x1 stride-1 unpadded convolution of more than one pixel on
    ftile's tiles."""
    return _bind_checked(conv, False, step)


def bound_compute(conv):
    """``compute`` as a bound call of ``conv`` runs it (``NumbaKernel.bind``'s general call, which
    sets the thread budget first): for the convolutions ``serial_call`` takes, their driver through
    ftile.run_sharded / dwtile.run at the budget of each call, with the arguments bound once (the
    plan per thread count); else ``conv.compute``."""
    return _bind_checked(conv, True) or conv.compute


def _bind_checked(conv, parallel: bool, step=None):
    """_bind, or None where deciding raises one of kernelkit's errors (a bad switch value, an attribute
    that disagrees with the weight): the general path then raises it at the call, as before."""
    try:
        return _bind(conv, parallel, step)
    except KernelkitError:
        return None


def _bind(conv, parallel: bool, step=None):
    specs = conv.input_specs
    if len(specs) < 2 or any(s is not None and (not s.is_static or s.layout) for s in specs):
        return None
    x_spec, w_spec = specs[0], specs[1]
    if x_spec is None or w_spec is None or x_spec.dtype != "float32" or w_spec.dtype != "float32":
        return None
    if len(x_spec.shape) != 4 or len(w_spec.shape) != 4:
        return None
    b_spec = specs[2] if len(specs) > 2 else None
    z_spec = specs[3] if len(specs) > 3 else None
    if (b_spec is not None and b_spec.dtype != "float32") or (z_spec is not None and z_spec.dtype != "float32"):
        return None
    code, p0, p1 = conv.act
    x_shape, w_shape = tuple(x_spec.shape), tuple(w_spec.shape)
    if (PIXEL and not parallel and z_spec is None and x_shape[2:] == (1, 1) and w_shape[2:] == (1, 1)
            and x_shape[1] == w_shape[1] and int(conv.attrs.get("group", 1)) == 1
            and _one_pixel(conv._geometry(x_shape, w_shape))
            and (b_spec is None or int(np.prod(b_spec.shape)) == w_shape[0])):
        return _pixel_call(conv, (x_shape[0], w_shape[0], 1, 1), code, p0, p1)
    if code not in (NONE, CLIP):
        return None
    (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = conv._geometry(x_shape, w_shape)
    n_n, c_n, h_n, w_n = x_shape
    m_n, cg, kh, kw = w_shape
    group = int(conv.attrs.get("group", 1))
    if c_n != cg * group or m_n % group or min(n_n, m_n, oh_n, ow_n) <= 0:
        return None
    y_shape = (n_n, m_n, oh_n, ow_n)
    if z_spec is not None and tuple(z_spec.shape) != y_shape:
        return None
    if b_spec is not None and int(np.prod(b_spec.shape)) != m_n:
        return None
    lo, hi = (np.float32(p0), np.float32(p1)) if code == CLIP else (np.float32(-np.inf), np.float32(np.inf))
    has_z = z_spec is not None
    if cg == 1 and group > 1:
        if not (sh == sw and dwtile.depthwise_fits(sh, kh, kw, (dh, dw), conv._all_pads(x_shape, w_shape),
                                                    np.float32) and dwtile.enabled()):
            return None
        return _depthwise_call(conv, y_shape, sh, ph, pw, lo, hi, has_z, m_n, parallel, step)
    direct = kh == kw == sh == sw == 1 and ph == pw == 0 and (oh_n, ow_n) == (h_n, w_n)
    if group != 1 or oh_n * ow_n == 1:
        return None
    if parallel and n_n == 1 and rnpair.ON and not direct and (kh, kw) != (1, 1):
        paired = _paired_call(conv, x_shape, y_shape, (kh, kw, sh, sw, dh, dw, ph, pw), code, p0, p1, lo, hi, has_z)
        if paired is not None:
            return paired
    raw = ftile.requested_raw()
    kind, forced = ftile.choice()
    if kind is None:
        return None
    from .conv import direct_wins, ftile_cols, ftile_wins, implicit_wins  # (conv imports this module)

    k_n, l_n = c_n * kh * kw, oh_n * ow_n
    # (a one-image parallel call's pair takes the cols tiles up to PAIR_COLS_MAX pixels, as one thread does)
    one = _one_thread(conv, parallel) or (parallel and n_n == 1 and rnpair.ON and rnpair.POINTWISE
                                          and _pair_cols(m_n, k_n, l_n))
    if not forced and not ftile_wins(kh, kw, sh, sw, m_n, k_n, l_n):
        return None
    if (SUBSAMPLE and kh == kw == 1 and ph == pw == 0 and not direct
            and (oh_n, ow_n) == (len(range(0, h_n, sh)), len(range(0, w_n, sw)))):
        # a 1x1 strided convolution (ResNet's and RegNetY's shortcuts): the pixels it reads
        # copied into a contiguous (C, oh, ow) buffer, then the 1x1 stride-1 tiles on it
        if SUB_DIRECT_ONE_THREAD and sh == sw and _one_thread(conv, parallel) and sub_direct_fits(kind, m_n, ow_n):
            return _sub_direct_call(conv, raw, x_shape, y_shape, sh, lo, hi, has_z)
        sub = (sh, sw, (n_n, c_n, oh_n, ow_n))
        return _tiles_call(conv, raw, kind, ftile_cols(kind, m_n, l_n, k_n, one), y_shape, k_n, l_n, lo, hi, has_z,
                           parallel, step, sub, tail=cols_tail(kind, m_n, l_n, k_n, _one_thread(conv, parallel)))
    if not direct:  # the strided convolutions conv.py runs as its implicit GEMM (the stems)
        if not implicit_wins(kind, kh, kw, sh, sw, dh, dw, ow_n, k_n) or direct_wins(kind, kh, kw, sh, sw, dh, dw,
                                                                                    m_n, ow_n, l_n, k_n):
            # (the direct convolution and Winograd: the general path, or its compiled calls bound at one thread)
            if BOUND_3X3_ONE_THREAD and not parallel and n_n == 1 and _one_thread(conv, parallel):
                return _one_3x3_call(conv, x_shape, y_shape, (kh, kw, sh, sw, dh, dw, ph, pw), code, p0, p1, lo, hi,
                                     has_z)
            return None
        return _implicit_call(conv, raw, kind, x_shape, y_shape, (kh, kw, sh, ph, pw), lo, hi, has_z, parallel,
                              step)
    # (a one-image serial call of a stride-1 1x1 layer, which cpair pairs at two threads: up to cpair.SERIAL_COLS_MAX)
    one = one or (not parallel and n_n == 1 and l_n <= cpair.SERIAL_COLS_MAX)
    return _tiles_call(conv, raw, kind, ftile_cols(kind, m_n, l_n, k_n, one), y_shape, k_n, l_n, lo, hi, has_z,
                       parallel, step, tail=cols_tail(kind, m_n, l_n, k_n, _one_thread(conv, parallel)))




def one_thread_cols_kc(l_n: int) -> int:
    """The cols tiles' K chunk in a one-thread session's bound 1x1 call on a map of ``l_n`` pixels:
    conv.FTILE_COLS_KC_SMALL_ONE_THREAD up to FTILE_COLS_MAX pixels, FTILE_COLS_KC_ONE_THREAD above (the maps
    only FTILE_COLS_MAX_ONE_THREAD takes), ftile.COLS_KC where that switch is 0."""
    from .conv import FTILE_COLS_KC_ONE_THREAD, FTILE_COLS_KC_SMALL_ONE_THREAD, FTILE_COLS_MAX

    return (FTILE_COLS_KC_SMALL_ONE_THREAD if l_n <= FTILE_COLS_MAX else FTILE_COLS_KC_ONE_THREAD) or ftile.COLS_KC


def _cols_driver(kind):
    """The 3 x 7 cols driver of a one-thread bound 1x1 call: its tiles prefetch their weights
    conv.COLS_AHEAD_ONE_THREAD steps ahead and its full tiles read their pixels at constant offsets
    (ftile.COLS_WHOLE_ONE_THREAD; ftile.cols_driver_ahead), or ftile.cols_driver where neither is on."""
    ahead, whole = _cols_ahead_whole()
    return ftile.cols_driver_ahead(kind, ahead, whole) if ahead or whole else ftile.cols_driver(kind)


def _cols_ahead_whole() -> tuple[int, bool]:
    """(conv.COLS_AHEAD_ONE_THREAD, ftile.COLS_WHOLE_ONE_THREAD): a one-thread bound 1x1 call's cols tiles'."""
    from .conv import COLS_AHEAD_ONE_THREAD

    return int(COLS_AHEAD_ONE_THREAD), bool(ftile.COLS_WHOLE_ONE_THREAD)


def _tail_call(conv, raw, kind, y_shape, k_n, l_n, lo, hi, has_z, general, buf, buf_ro, sh, sw, sub, tail):
    """_tiles_call's one-thread call with a ``tail`` (cols_tail): the weights packed in cols panels (the
    kernel's packing, Conv._ftile_weights; the last panel's rows past m_n - tail are never read), the first
    m_n - tail channels through the cols driver (its K chunk one_thread_cols_kc's; the standard
    tile: conv.COLS_TILE_ONE_THREAD's other shapes are not taken here), then the last ``tail`` rows, packed
    once into one rows panel of ``kind``, through the rows driver writing their NCHW rows of the output."""
    n_n, m_n = y_shape[0], y_shape[1]
    held = _Constants()
    zero = conv._zeros(m_n, np.float32)
    no_z = readonly(np.zeros(1, np.float32))
    width = ftile.COLS_WIDTH[kind]
    main = m_n - tail
    cols_driver = _cols_driver(kind)
    panels = main // width + int(main % width > 0)
    cols_size = ftile.scratch_size(kind, True, l_n)
    cols_kc = one_thread_cols_kc(l_n)
    rows_driver = ftile.rows_driver(kind)
    block, blocks, groups, kc = ftile.plan(kind, tail, k_n, l_n, 1)
    pack = ftile.pack_rows(tail, k_n, l_n)
    rows_size = ftile.scratch_size(kind, False, l_n, block, kc, pack)
    size = max(cols_size, rows_size)
    kept = [None, None]  # (the cols packing the tail was taken with, the tail's rows panel)

    def tiles(x, w, b=None, z=None, *, out=None):
        y = _output(out, y_shape)
        if ftile.requested_raw() != raw or not held.usable(conv, x, w, b, z, y, m_n, (k_n, width)):
            return general(x, w, b, z, out=out)
        if z is not None and _same_memory(z, y) and kc < k_n:  # (residual_over declines these; the cols tiles
            z = _copied(z)  # and the rows panel of one K chunk read each residual element before they store over it)
        if kept[0] is not held.packed:
            kept[0], kept[1] = held.packed, readonly(ftile.pack_weights(
                np.ascontiguousarray(w.reshape(m_n, k_n)[main:], np.float32), ftile.MR[kind]))
        if sub is not None:
            np.copyto(buf, x[:, :, ::sh, ::sw])
            x = buf_ro
        x = readonly(x)
        z = no_z if z is None else readonly(z)
        scratch = config.thread_buffer("ftile", size, np.float32)
        bias_t, zero_t = held.bias[main:], zero[main:]
        for n in range(n_n):
            xs = x[n].reshape(-1)
            yn = y[n].reshape(-1)
            zn = z.reshape(-1) if z is no_z else z[n].reshape(-1)
            cols_driver(held.packed, k_n, main, xs, l_n, l_n, held.bias, zn, has_z, lo, hi, yn, l_n, cols_kc,
                        scratch, 0, panels)
            zt = zn[main * l_n:] if has_z else zn
            rows_driver(kept[1], k_n, tail, xs, 0, l_n, l_n, bias_t, zero_t, zt, has_z, lo, hi, yn[main * l_n:], 0,
                        l_n, block, groups, kc, pack, scratch, 0, blocks * groups)
        return y

    return tiles


def _paired(pair, parallel: bool, *args, **kwargs) -> bool:
    """``pair(*args, **kwargs)`` (a cpair pair); in a bound parallel call its back-off backs the pool off too
    (rnpair.follow)."""
    if not parallel:
        return pair(*args, **kwargs)
    srv = cpair.server()
    before = srv.stats["backoffs"]
    done = pair(*args, **kwargs)
    rnpair.follow(srv, before)
    return done


def _paired_call(conv, x_shape, y_shape, geom, code, p0, p1, lo, hi, has_z):
    """The bound parallel call of a one-image 3x3 stride-1 layer (F(4x4, 3x3) by tiles) or a direct
    convolution (fdirect.py) as rnpair.py's pair at a budget of two threads, else ``conv.compute``;
    None where the layer has no pair."""
    from .conv import direct_wins

    kh, kw, sh, sw, dh, dw, ph, pw = geom
    kind = ftile.choice()[0]
    if kind != rnpair.KIND:
        return None
    m_n, oh_n, ow_n = y_shape[1:]
    k_n, l_n = x_shape[1] * kh * kw, oh_n * ow_n
    pad = None
    small = direct_wins(kind, kh, kw, sh, sw, dh, dw, m_n, ow_n, l_n, k_n)
    if kh == kw == 3 and sh == sw == dh == dw == 1 and conv._unbounded and l_n >= rnpair.WINO4_MIN_PIXELS \
            and not small:
        pair = rnpair.wino_pair(conv, x_shape, y_shape, ph, pw, code, p0, p1, has_z)
    elif not small and winograd.usable(kh, kw, sh, sw, dh, dw, 1, oh_n, ow_n,
                                       conv._wino_small(np.float32, x_shape[1], m_n)):
        pair = rnpair.wino2_pair(conv, x_shape, y_shape, ph, pw, code, p0, p1, has_z)
    elif small:
        pair, pad = rnpair.direct_pair(conv, x_shape, y_shape, (kh, kw), sh, ph, pw, lo, hi, has_z) or (None, None)
    else:
        return None
    if pair is None:
        return None
    general = conv.compute
    held = _Constants()
    raw = ftile.requested_raw()

    def paired(x, w, b=None, z=None, *, out=None):
        y = _output(out, y_shape)
        if (config.current_threads() != 2 or ftile.requested_raw() != raw
                or (not rnpair.BESIDE_POOL and shards.POOL.workers_spinning())
                or not held.usable(conv, x, w, b, z, y, m_n)):
            return general(x, w, b, z, out=out)  # (compute copies a residual it may not write over)
        if z is not None and small and _same_memory(z, y):  # (RESIDUAL_WINO: the direct pair's stores are
            z = _copied(z)  # not checked for it, whoever pads (PAD_SPLIT, DIRECT_ROWS: no caller's pad); the
            # Winograd pairs' output transforms are)
        x0 = readonly(x)[0]
        pad_input = None
        if pad is not None:  # the zero-padded input for both sides, on the caller (where the pair runs)
            xp, pad_h, pad_w, hp, wpad, c_n = pad

            def pad_input():
                fdirect.pad_planes(x0, xp, pad_h, pad_w, hp, wpad, 0, c_n)
        if pair(w, held.bias, x0, y[0], None if z is None else readonly(z)[0],
                lambda: _one_budget(general, x, w, b, z, y), pad_input):
            return y
        return general(x, w, b, z, out=out)

    return paired


def _one_budget(general, x, w, b, z, y):
    """``general`` (Conv.compute) into ``y`` at a budget of one thread: a one-thread session's call of the layer
    (rnpair.ALONE_SERIAL)."""
    with config.num_threads(1):
        return general(x, w, b, z, out=y)


def _one_thread(conv, parallel: bool) -> bool:
    """Whether a bound call is a one-thread session's (its tile choices: conv.ftile_cols's and
    ftile.rows_kind's ``one_thread``), or is bound as one (``_one_thread_call``)."""
    return getattr(_forced, "on", False) or (not parallel and (conv.threads or config.default_threads()) == 1)


# A one-image bound parallel call of a 1x1 layer or a strided 1x1 shortcut (ftile's tiles: _tiles_call) that runs on the
# caller alone, the shard pool backed off (a budget of one thread: under load, shards.ShardPool.HOLD_S) or
# its pair refused (the helper asleep or backed off), takes the one-thread session's bound call of the layer
# (``_one_thread_call``: its tile shapes and K chunks, conv.COLS_TILE_ONE_THREAD, one_thread_cols_kc,
# ftile.ROWS12_ONE_THREAD, cols_tail; no pair), bit for bit numba 1t's output, instead of its own driver with the
# two-thread choices. Read at each call. Issue 11, session 15 (docs/numba.md, "Layers alone under load"): on the Xeon
# under load the held default's ResNet-50 runs (no pair call, the caller on its own CPU, no run-queue wait) took
# 110-123 ms against numba 1t's 75-118 in the same rounds (default / 1t 1.22); the AMD box runs both at one speed
# (benchmarks/held_serial.py resnet50: 1.008), so its one-thread choices are the Xeon's. With a tiered start the
# one-thread call is bound (its weights packed, its drivers compiled) on the background thread, the layer's own call
# running until then (``_held_one``; session 15, hone15); eager binds it at the first held call. Off: the lead's call
# L2a (docs/benchmarks.md, "Round 15"; loaded alone on CPUs 0,1, 4 rounds) read default / hone 1.29 (1.05-1.46) on
# ResNet-18 and 1.22 (1.02-1.45) on ResNet-50, but ResNet-18 makes no held call of this kind (hone15, AMD box: its
# shortcuts take another path), so its 1.29 is drift between the processes, and ResNet-50's 1.22 is not shown to be
# more. A/B: kernels.conv_serial.HELD_ONE_THREAD=1 (loaded, with a count of the layers bound).
HELD_ONE_THREAD = False
_forced = threading.local()  # on: a bind for _one_thread_call (one-thread choices, no pair)


def _one_thread_call(conv, step):
    """The one-thread session's bound serial call of ``conv`` (its one-thread tile choices, no pair), or None."""
    _forced.on = True
    try:
        return _bind_checked(conv, False, step)
    finally:
        _forced.on = False


def _held_one(conv, step, parallel: bool, n_n: int):
    """HELD_ONE_THREAD's call for a one-image bound parallel call: ``call(x, w, b, z, y)`` (the arguments of the call
    that asks) gives the one-thread session's call of the layer, None where it has none yet, has none at all or the
    switch is off; None for other calls.

    The first ask binds it (``_one_thread_call``: the weights packed for the one-thread tiles) and runs it once, which
    compiles or loads its drivers. With a tiered start (tiered.py: nothing compiles on the thread that runs the model)
    that happens on the background thread (``tiered.background``, on private copies of the asking call's input,
    residual and output), and the asks until it ends get None: the caller runs its own path meanwhile. A bind that
    fails there leaves the layer on its own path for good and gives one KernelkitWarning at the next ask. Eager
    (``KERNELKIT_NUMBA_START=eager``, the benchmarks; a node whose trial failed; a deferred session's warm-up run) it
    happens at the first ask, on the calling thread, which compiles anyway: the runs after are the same either way."""
    if not (parallel and n_n == 1):
        return None
    held = _HeldOne(conv, step)

    def call(x, w, b, z, y):
        if not HELD_ONE_THREAD:
            return None
        if held.state is _BOUND:
            return held.one
        return held.ask(x, w, b, z, y)

    call.held = held  # (the tests)
    return call


_BOUND, _PENDING, _FAILED = "bound", "pending", "failed"
_held_lock = threading.Lock()


class _HeldOne:
    """The one-thread call of one layer for ``_held_one``: its state (None: never asked; _PENDING: a background bind
    queued or running; _BOUND: ``one`` is the call, or None where the layer has none; _FAILED: the bind raised
    ``error``), set by the background thread in one assignment each."""

    __slots__ = ("conv", "step", "state", "one", "error", "job", "__weakref__")

    def __init__(self, conv, step):
        self.conv, self.step = weakref.ref(conv), step  # (a pending bind does not keep a collected session's layer)
        self.state = self.one = self.error = self.job = None

    def ask(self, x, w, b, z, y):
        """The call where it is bound; else starts the bind (or binds here: eager) and gives None meanwhile."""
        if self._unasked():
            conv = self.conv()
            if conv is None:
                return None
            with _held_lock:  # (two threads running one session: one bind)
                if self._unasked():
                    if _binds_here(conv):
                        self._bind(conv, None)
                    else:
                        args = tuple(_private(a) for a in (x, z, y))
                        self.state = _PENDING
                        self.job = tiered.background(functools.partial(self._bind, None, (args, w, b)))
        state = self.state
        if state is _BOUND:
            return self.one
        if state is _FAILED:
            error, self.error, self.state = self.error, None, _BOUND  # warned once, then its own path for good
            warnings.warn(f"conv_serial.HELD_ONE_THREAD: the one-thread call of {getattr(self.conv(), 'where', '?')} "
                          f"could not be bound ({type(error).__name__}: {error}); the layer keeps its own call",
                          KernelkitWarning, stacklevel=4)
        return None

    def _unasked(self) -> bool:
        """Never asked, or its bind was queued in the parent of this forked process (it never runs here)."""
        job = self.job
        return self.state is None or (self.state is _PENDING and job is not None and job.pid != os.getpid()
                                      and not job.done.is_set())

    def _bind(self, conv, warm):
        """Bind the call (and, on the background thread, run it once on ``warm``'s copies); the state in one
        assignment at the end."""
        if conv is None:
            conv = self.conv()
            if conv is None:  # the session was collected meanwhile
                self.state = _BOUND
                return
        try:
            one = _one_thread_call(conv, self.step)
            if one is not None and warm is not None:
                (x, z, y), w, b = warm
                if _direct(x, w, z):  # (else the call would take the general path: the shard pool, from this thread)
                    _one_budget(one, x, w, b, z, y)  # packs the weights, compiles or loads the drivers
        except Exception as exc:  # noqa: BLE001 - the layer keeps its own call; the next ask (eager: this one) warns
            self.error, self.state = exc, _FAILED
            return
        self.one, self.state = one, _BOUND


def _direct(x, w, z) -> bool:
    """Whether a bound call takes its own driver on these arguments (not the general path: _Constants.usable)."""
    return x.flags.c_contiguous and not w.flags.writeable and w.flags.c_contiguous and (
        z is None or z.flags.c_contiguous)


def _binds_here(conv) -> bool:
    """Whether ``_held_one`` binds on the calling thread: the node compiles there anyway (its start mode is eager, or it
    has become so: a failed trial), or this is a deferred session's warm-up run (tiered.warming)."""
    mode = conv._tier_mode or tiered._mode_for(conv.context)
    return mode is tiered.EAGER or getattr(tiered._guard, "warm", False)


def _private(a):
    """A private copy of a call's array for the background bind's run (same dtype, layout and writeability, hence the
    same compiled signatures); None stays None."""
    if a is None:
        return None
    c = tiered._copy_like(a, True)
    return c if a.flags.writeable else readonly(c)


def _pooled() -> bool:
    """A batch's bound call with a pair (cpair.BATCH, at two threads): whether it takes the shard pool
    (the pool has a worker with its spin loop, spinning or asleep: a model with pooled layers, where a
    pair would be a third spinning thread; ResNet-18 b8's shortcuts found the worker asleep once a run on
    the Xeon) rather than the pair, or the calling thread alone where the pair refuses (the helper
    asleep or backed off: as at batch 1, no pool job, so a model whose layers all pair never starts a
    worker)."""
    return shards.POOL.has_spin_worker()


def _pair_now(pair, n_n: int) -> bool:
    """Whether a bound parallel call runs its pair (cpair.py's) now, not the pool. One image: rnpair.ON,
    a budget of two threads and the pool's worker not spinning (a model whose other nodes take the pool
    keeps its jobs there); a batch (cpair.BATCH): the pool has no worker (``_pooled``). Where the pair
    then finds its helper asleep or backed off, the call runs on this thread alone (the one-thread
    driver), not on the pool."""
    if pair is None:
        return False
    if n_n == 1:
        return rnpair.ON and config.current_threads() == 2 and not shards.POOL.workers_spinning()
    return not _pooled()


def _one_pixel(geometry) -> bool:
    """Stride 1, no pads, a 1x1 output: the general path's ``direct`` 1x1 of a 1x1 map."""
    (sh, sw), _dil, (ph, pw), (oh_n, ow_n) = geometry
    return sh == sw == 1 and ph == pw == 0 and oh_n == ow_n == 1


# The bound parallel call of a one-image 1x1 layer (its cpair pair, rnpair.POINTWISE) takes ftile's cols tiles on
# maps of up to this many pixels, as a one-thread session does (conv.FTILE_COLS_MAX_ONE_THREAD; the rule is
# ftile_cols's; 0: conv.FTILE_COLS_MAX's rule, the rows tiles on ResNet-50's 14x14 1x1 layers, which run 196
# pixels as 208). Issue 11, session 12 (r50t12), 196 against 0, per kind of layer in the model (nodes_ab2t.py):
# AMD box 1.03-1.15x faster (their 256 and 1024 channels cut by cpair.COLS_SPLIT); Xeon 1.11-1.16x slower,
# against 0.97-1.09x for an identical session (session 5 had the rows tiles ahead at 14x14 there, 127 against
# 111 GFLOP/s): off. A/B: kernels.conv_serial.PAIR_COLS_MAX=196
# 196 since session 17's F1 with cpair.COLS_WHOLE (the halves on the one-thread call's whole tiles; see there): the
# Xeon's loss above was the pairs' general cols tiles.
PAIR_COLS_MAX = 196
# With PAIR_COLS_MAX: False, only the expansions (more output than input channels: ResNet-50's 256 -> 1024 +Z at 14x14,
# the 1x1/2 shortcut 512 -> 1024) take the cols tiles there, the projections (1024 -> 256, 1024 -> 512) keep the rows
# tiles (and so cpair.K_SPLIT_PARALLEL's cut of their K). Issue 11, session 17 (docs/numba.md, "ResNet-50's 14x14 1x1
# halves on the one-thread tiles"). Read when a layer binds. A/B: kernels.conv_serial.PAIR_COLS_PROJECTIONS=0
PAIR_COLS_PROJECTIONS = True


def _pair_cols(m_n: int, k_n: int, l_n: int) -> bool:
    """Whether a one-image parallel call's 1x1 layer of ``k_n`` -> ``m_n`` channels on ``l_n`` pixels may take the
    cols tiles as one thread does (PAIR_COLS_MAX, PAIR_COLS_PROJECTIONS)."""
    return l_n <= PAIR_COLS_MAX and (PAIR_COLS_PROJECTIONS or m_n > k_n)
# A one-thread session's 1x1 layer whose output channels are not a multiple of the cols tiles' lanes (RegNetY's
# 440 -> 440 at 7x7: 27.5 vectors of 16) runs its first channels, down to a multiple of the lanes, on the cols
# tiles and the rest (8 channels) on one rows panel (``cols_tail``), where the rows tiles ran the whole layer's 49
# pixels as 64. Issue 11, session 14 (regnet14; docs/numba.md, "RegNetY's 440-channel 1x1 layers and the Gemm
# heads"): on the Xeon in RegNetY (nodes_ab.py, order rotated) its eleven 440 -> 440 layers at 7x7 ran 0.76-0.86x
# the rows tiles' time and its 1x1/2 shortcut to 7x7 0.81x; without it they ran at the reference's time (two of
# them over the per-node bar in the lead's call J2). A/B: kernels.conv_serial.COLS_TAIL=0 (the rows tiles)
COLS_TAIL = True


def cols_tail(kind, m_n: int, l_n: int, k_n: int, one_thread: bool) -> int:
    """The output channels past the last multiple of the cols tiles' lanes that a one-thread bound 1x1 call
    runs on a rows panel, the rest on the cols tiles (COLS_TAIL); 0: the whole layer on one kind of tile
    (ftile_cols' rule). Only where the cols tiles would take the layer but for its channel count, and at least
    one full panel of COLS_WIDTH channels is left to them."""
    from .conv import ftile_cols

    if not (COLS_TAIL and one_thread) or kind not in ftile.COLS_LANES:
        return 0
    tail = m_n % ftile.COLS_LANES[kind]
    if not tail or m_n - tail < ftile.COLS_WIDTH[kind] or tail > ftile.MR[kind]:
        return 0
    return tail if ftile_cols(kind, m_n - tail, l_n, k_n, one_thread) else 0


PIXEL = True  # 1x1 convolutions of 1x1 maps bind conv._gemm_pixel's product (False: the general path)
# 1x1 strided unpadded convolutions subsample their input into a buffer and run the stride-1 tiles
# (False: the general path, im2col's gather per column-matrix row and the tiles through conv._gemm)
SUBSAMPLE = True


# Issue 11, session 17 (r50one17): a one-thread session's 1x1 strided unpadded convolution (ResNet-50's three 1x1/2
# shortcuts, ResNet-18's, RegNetY's) on fdirect's direct tiles reading the input in place (_sub_direct_call): each
# output pixel's input value broadcast from where it lies (the stride a constant of the tiles' pixel offsets, the
# channels a table of plane offsets), where SUBSAMPLE copies every second row and column into a buffer first and
# then runs the 1x1 tiles on it (and the rows tiles copy that into tile order again). On the Xeon the copy alone was
# 0.10-0.23 ms a layer at one thread in the model (the lead's call L1 of session 17, outside_time.py: 0.46 ms a
# run over ResNet-50's three). The tiles: fdirect.tile_shape at one thread (TILE_ONE_THREAD's where it fits), its
# plan's K chunks (KC) and weight prefetch (AHEAD). Read when the layer binds (nodes_ab.py can switch it). Off: on the
# AMD box 1.02-1.08x on ResNet-50's three, but on the Xeon (nodes_ab.py, two processes) 256 -> 512 from 56x56 0.572
# and 0.580, 512 -> 1024 from 28x28 0.946 and 0.973, 1024 -> 2048 from 14x14 0.984 and 1.025: each of the layer's
# panels streams every line of the strided input's rows again (3.2 MB at 56x56, half of each line used), where the
# copy makes a compact quarter that stays in L2 for all of them. A row-block-major order (all panels over a block of
# output rows whose input rows fit L2) is the untried fix. A/B: kernels.conv_serial.SUB_DIRECT_ONE_THREAD=1
SUB_DIRECT_ONE_THREAD = False


def sub_direct_fits(kind, m_n: int, ow_n: int) -> bool:
    """Whether fdirect's tiles take a 1x1 strided layer of ``m_n`` output channels and output rows of ``ow_n`` pixels
    (fdirect.fits' channels and rows, and rows its tiles fill: conv.direct_unfilled)."""
    from .conv import direct_unfilled

    return kind == fdirect.KIND and m_n % 16 == 0 and m_n >= fdirect.MIN_M and ow_n >= fdirect.MP and \
        not direct_unfilled(kind, m_n, ow_n)


def _fdirect_one_plan(m_n: int, k_n: int, oh_n: int, ow_n: int) -> tuple:
    """fdirect's one-thread plan of a one-image layer of ``k_n`` taps, ``m_n`` output channels and an ``oh_n`` x
    ``ow_n`` output: (cv, mp) its tile (fdirect.tile_shape at one thread), (total, rb, kc) its shards, row blocks and
    K chunk (fdirect.plan), and its scratch's floats (fdirect.scratch_size)."""
    cv, mp = fdirect.tile_shape(m_n, ow_n, 1)
    total, rb, kc = fdirect.plan(m_n, k_n, oh_n, 1, cv)
    return cv, mp, total, rb, kc, fdirect.scratch_size(k_n, kc, oh_n, ow_n, rb, cv, mp)


def _sub_direct_call(conv, raw, x_shape, y_shape, s, lo, hi, has_z):
    """A one-thread 1x1 convolution of stride ``s`` both ways, no pads, on fdirect's driver over the input in place
    (SUB_DIRECT_ONE_THREAD): output pixel (oh, ow) of tap (channel) c reads ``x[c, oh * s, ow * s]``, at the plane
    offset ``koff[c]`` plus ``oh * s * W`` plus ``ow * s``; bias, the residual and the clamp in the tiles' last K
    chunk. A residual that is the output's own memory is copied first (the overlapping last tile of a row that is
    no whole number of tiles would read it after the tile before had stored over it)."""
    general = _general(conv, False)
    held = _Constants()
    n_n, c_n, h_n, w_n = x_shape
    m_n, oh_n, ow_n = y_shape[1:]
    cv, mp, total, rb, kc, size = _fdirect_one_plan(m_n, c_n, oh_n, ow_n)
    koff = readonly(np.arange(c_n, dtype=np.int64) * (h_n * w_n))
    driver = fdirect.driver_ahead(s, cv, mp, int(fdirect.AHEAD))
    no_z = readonly(np.zeros(1, np.float32))
    packing = (c_n, 16 * cv)  # (_packed's K and tile width)

    def direct(x, w, b=None, z=None, *, out=None):
        y = _output(out, y_shape)
        if ftile.requested_raw() != raw or not held.usable(conv, x, w, b, z, y, m_n, packing):
            return general(x, w, b, z, out=out)
        if z is not None and _same_memory(z, y):
            z = _copied(z)
        x = readonly(x)
        z = no_z if z is None else readonly(z)
        scratch = config.thread_buffer("ftile", size, np.float32)
        for n in range(n_n):
            zn = z.reshape(-1) if z is no_z else z[n].reshape(-1)
            driver(held.packed, c_n, m_n, x[n].reshape(-1), koff, s * w_n, ow_n, oh_n, rb, held.bias, zn, has_z, lo,
                   hi, y[n].reshape(-1), kc, scratch, 0, total)
        return y

    return direct


# Issue 11, session 17 (r50one17): a one-thread session's Winograd and direct (fdirect) layers bind the compiled calls
# their general path (Conv.compute) makes, with every argument that depends only on shapes and constants fixed
# (_one_3x3_call): F(4x4)'s run of tiles (winograd._tiles_run), F(2x2)'s input transform, position products and output
# transform, fdirect's pad and tiles. The same calls on the same arguments (bit for bit the general path's output);
# what goes is compute's per-call Python (the geometry and dtype checks, the path decisions, the transformed and
# packed weights' caches, the thread budget's and the shard counts' look-ups): on the Xeon the one-thread session's
# 3x3 layers spent 90-125 us a node outside their compiled calls where the 1x1 layers' bound calls spend 15-25 (the
# lead's call L1 of session 17, outside_time.py: 0.47 ms a run over the five 256@14 layers, 0.29 over the three 128@28,
# 0.34 over the three 3x3/2, 0.19 over the two 512@7). AMD box (nodes_ab.py, two sessions with it against the default
# in a session of its own): ResNet-50's 3x3 kinds 1.025-1.058x (ctl 0.997-1.015), all nodes 1.013 and 1.013 (ctl
# 1.001); ResNet-18's 1.014-1.052x, all nodes 1.022 (ctl 1.003). Off until the Xeon's A/B. Read when the layer binds.
# A/B: kernels.conv_serial.BOUND_3X3_ONE_THREAD=1
BOUND_3X3_ONE_THREAD = False


def _one_3x3_call(conv, x_shape, y_shape, geom, code, p0, p1, lo, hi, has_z):
    """The one-thread bound call of a one-image Winograd (F(4x4) by tiles, F(2x2)) or fdirect layer: the general
    path's decisions made once (conv.Conv.compute's and _gemm's, from the same predicates), or None where it takes
    another path (the general path then runs, as before)."""
    from .conv import direct_wins

    kh, kw, sh, sw, dh, dw, ph, pw = geom
    n_n, c_n, h_n, w_n = x_shape
    m_n, oh_n, ow_n = y_shape[1:]
    k_n, l_n = c_n * kh * kw, oh_n * ow_n
    f32 = np.dtype(np.float32)
    wino4 = winograd.usable4(kh, kw, sh, sw, dh, dw, 1, oh_n, ow_n, n_n) and conv._unbounded
    wino2 = not wino4 and winograd.usable(kh, kw, sh, sw, dh, dw, 1, oh_n, ow_n, conv._wino_small(f32, c_n, m_n)) \
        and not conv._direct_small(f32, 1, kh, kw, m_n, oh_n, ow_n)
    if wino4:
        th_n, tw_n = (oh_n + 3) // 4, (ow_n + 3) // 4
        if not winograd.tiles_usable(1, 1, th_n * tw_n):
            return None
        return _wino_one(conv, 4, y_shape, c_n, ph, pw, th_n, tw_n, code, p0, p1, has_z)
    if wino2:
        return _wino_one(conv, 2, y_shape, c_n, ph, pw, (oh_n + 1) // 2, (ow_n + 1) // 2, code, p0, p1, has_z)
    kind = conv._ftile_kind(1, code, kh, kw, sh, sw, m_n, k_n, l_n, f32)
    if kind is None or not direct_wins(kind, kh, kw, sh, sw, dh, dw, m_n, ow_n, l_n, k_n):
        return None
    return _direct_one(conv, x_shape, y_shape, geom, lo, hi, has_z)


def _wino_one(conv, variant, y_shape, c_n, ph, pw, th_n, tw_n, code, p0, p1, has_z):
    """_one_3x3_call's Winograd call: F(4x4) (``variant`` 4) as winograd._by_tiles runs it at one thread (one run of
    every tile), F(2x2) as winograd.conv3x3 at one thread (input transform, position products, output transform)."""
    general = _general(conv, False)
    held = _Constants()
    m_n = y_shape[1]
    nt = th_n * tw_n
    kept = [None, None, None, 0]  # (the weight, its transformed u, packed panels or None (BLAS), ahead)
    if variant == 2:
        v = np.empty((16, winograd._spaced(c_n * nt)), np.float32)
        mo = np.empty((16, winograd._spaced(m_n * nt)), np.float32)

    def wino(x, w, b=None, z=None, *, out=None):
        y = _output(out, y_shape)
        if not held.usable(conv, x, w, b, z, y, m_n):
            return general(x, w, b, z, out=out)
        if kept[0] is not w:
            u = conv._transformed(w, w, variant)
            kept[:] = [w, u, conv._wino_packed(u, m_n, nt), conv._wino_ahead()]
        u, packed, ahead = kept[1], kept[2], kept[3]
        x = readonly(x)
        local = config._local
        was = getattr(local, "threads", None)
        local.threads = 1  # (the helpers' shard counts: one shard, on this thread)
        try:
            if packed is None:
                config.blas_single()
            if variant == 4:  # (winograd.conv3x3_f4's residual stand-ins, as it passes them)
                zz = readonly(z[0]) if z is not None else readonly(y[:1, :1, :1, :1][0])
                winograd._tiles_run(x[0], u, y[0], (held.bias, zz, has_z, th_n, tw_n, code, p0, p1), ph, pw, th_n,
                                    tw_n, packed, ahead, 0, nt)
            else:  # (winograd.conv3x3's)
                zz = readonly(z[0] if z is not None else y[0, :1])
                winograd._input_transform(x[0], v, ph, pw, th_n, tw_n, 0, c_n)
                winograd.gemms(v, mo, u, m_n, c_n, nt, packed, ahead)
                winograd._output_transform(mo, y[0], held.bias, zz, has_z, th_n, tw_n, code, p0, p1, 0, m_n)
        finally:
            local.threads = was
        return y

    return wino


def _direct_one(conv, x_shape, y_shape, geom, lo, hi, has_z):
    """_one_3x3_call's fdirect call: conv._gemm_direct at one thread (the zero-padded input, then the tiles of
    fdirect.tile_shape's at one thread, one shard)."""
    general = _general(conv, False)
    held = _Constants()
    kh, kw, sh, sw, dh, dw, ph, pw = geom
    c_n = x_shape[1]
    m_n, oh_n, ow_n = y_shape[1:]
    k_n = c_n * kh * kw
    cv, mp, total, rb, kc, size = _fdirect_one_plan(m_n, k_n, oh_n, ow_n)
    hp, wpad, step, koff = fdirect.geometry(c_n, kh, kw, sh, oh_n, ow_n)
    koff = readonly(koff)
    xp = np.empty(c_n * hp * wpad, np.float32)
    xp_ro = readonly(xp)
    ahead = int(fdirect.AHEAD)
    no_z = readonly(np.zeros(1, np.float32))
    packing = (k_n, 16 * cv)  # (_packed's K and tile width)

    def direct(x, w, b=None, z=None, *, out=None):
        y = _output(out, y_shape)
        if not held.usable(conv, x, w, b, z, y, m_n, packing):
            return general(x, w, b, z, out=out)
        if z is not None and _same_memory(z, y):  # (as conv.compute: the tiles would read it after their stores)
            z = _copied(z)
        z = no_z if z is None else readonly(z)
        fdirect.pad_planes(readonly(x[0]), xp, ph, pw, hp, wpad, 0, c_n)
        fdirect.conv(sh, cv, mp, ahead, held.packed, k_n, m_n, xp_ro, koff, step, ow_n, oh_n, rb, held.bias,
                     z.reshape(-1) if z is no_z else z[0].reshape(-1), has_z, lo, hi, y[0].reshape(-1), kc,
                     config.thread_buffer("ftile", size, np.float32), 0, total)
        return y

    return direct


def _pixel_call(conv, y_shape, code, p0, p1):
    """conv._gemm_pixel bound once: a 1x1 convolution of 1x1 maps (squeeze-and-excitation's two
    convolutions after the global pool) as one BLAS product (N, C) @ W.T into the output, then the
    bias (+ activation, any the epilogue has) per column. The general path's per-call decisions
    (geometry, dtype and group checks, the thread budget) cost more than the product inside the
    models (EfficientNet-B0's 32 -> 8: the reference 0.042 ms, the general path 0.067)."""
    general = _general(conv, False)
    held = _Constants()
    n_n, m_n = y_shape[:2]
    one = np.float32(1)
    kept = (None, None)  # (weight, its (C, M) transposed view)

    def pixel(x, w, b=None, z=None, *, out=None):
        nonlocal kept
        y = _output(out, y_shape)
        if z is not None or not held.usable(conv, x, w, b, None, y, m_n):
            return general(x, w, b, z, out=out)
        if kept[0] is not w:
            kept = (w, w.reshape(m_n, -1).T)
        wt = kept[1]
        y2 = y.reshape(n_n, m_n)
        np.matmul(x.reshape(n_n, -1), wt, out=y2)
        if code == NONE:
            y2 += held.bias
        else:
            scale_bias_act_cols(y2, one, held.bias, one, code, p0, p1)
        return y

    return pixel


class _Constants:
    """The weight and bias a fast call bound (by identity: the session hands a node the same
    read-only constant every run), and what was derived from them."""

    __slots__ = ("w", "b", "bias", "packed")

    def __init__(self):
        self.w = self.b = self.bias = self.packed = None

    def usable(self, conv, x, w, b, z, y, m_n, packing=None) -> bool:
        """Whether the bound call may run on these arguments (an output array, a C-contiguous input
        and residual, read-only constants); a new weight or bias is taken up here: its float32 bias
        and, with ``packing`` (K, tile width), its packed weights."""
        if y is None or w.flags.writeable or not x.flags.c_contiguous or (z is not None and not z.flags.c_contiguous):
            return False
        if w is not self.w or b is not self.b:
            if not w.flags.c_contiguous or (b is not None and b.flags.writeable):
                return False
            if packing is not None:
                self.packed = _packed(conv, w, *packing)
            self.w, self.b, self.bias = w, b, _bias(conv, b, m_n)
        return True


def _bias(conv, b, m_n):
    return conv._zeros(m_n, np.float32) if b is None else config.readonly(
        np.ascontiguousarray(b, dtype=np.float32).reshape(m_n))


def _packed(conv, w, k_n, width):
    """``w``'s panels of ``width`` rows through the kernel's own cache (Conv._ftile_weights): with a
    tiered start the background trial runs the general path, which packs them first; one copy."""
    conv._w_in = w
    return conv._ftile_weights(w.reshape(w.shape[0], k_n), width)


def _general(conv, parallel: bool):
    """The general path: ``conv.compute`` inside a bound call (its wrapper made the inputs read-only
    and set the thread budget), else as the bound call runs it (NumbaKernel.run: read-only inputs,
    the thread budget, BLAS at one thread)."""
    if parallel:
        return conv.compute

    def general(*inputs, out=None):
        return conv.run(inputs, out)

    return general


def _output(out, y_shape):
    if out is None:
        return np.empty(y_shape, np.float32)
    return out if out.flags.c_contiguous else None


def _depthwise_call(conv, y_shape, stride, ph, pw, lo, hi, has_z, m_n, parallel, step=None):
    """dwtile's planes driver with its arguments fixed (dwtile.depthwise's choice of tile); ``parallel``:
    through dwtile.run at the call's thread budget. On one thread of a several-thread session: two
    halves of the planes on two cores where cpair.py pairs the layer."""
    general = _general(conv, parallel)
    cost = dwtile.cost_us("conv", stride, y_shape[0] * y_shape[1], int(np.prod(y_shape)))
    held = _Constants()
    raw = dwtile.requested_raw()
    planes = y_shape[0] * y_shape[1]
    fn = band = None
    pair = None if parallel and y_shape[0] == 1 else cpair.depthwise_pair(
        conv, step, y_shape, conv.input_specs[0].shape, stride, ph, pw, lo, hi, has_z)

    def depthwise(x, w, b=None, z=None, *, out=None):
        nonlocal fn, band
        y = _output(out, y_shape)
        if dwtile.requested_raw() != raw or not held.usable(conv, x, w, b, z, y, m_n):
            return general(x, w, b, z, out=out)
        x = readonly(x)
        zz = y if z is None else readonly(z)
        if fn is None:
            fn, args = dwtile.depthwise(x, w, held.bias, y, z, stride, ph, pw, lo, hi)
            band = args[-1]
        if parallel and (pair is None or _pooled()):
            dwtile.run(fn, planes, (x, w, held.bias, y, zz, ph, pw, lo, hi, band), cost)
        elif pair is not None and pair(w, held.bias, x, y, None if z is None else zz):
            return y
        else:
            fn(x, w, held.bias, y, zz, ph, pw, lo, hi, band, 0, planes)
        return y

    return depthwise


def _implicit_call(conv, raw, kind, x_shape, y_shape, geom, lo, hi, has_z, parallel, step=None):
    """conv._gemm_implicit with its arguments fixed: per image the input's zero-padded column phases
    (ftile.phases_padded, into a buffer of this call's), then ftile's implicit-GEMM driver over the
    output rows; ``parallel``: both through conv.implicit_phases at the call's budget, as the
    general path runs them."""
    from .conv import implicit_phases

    general = _general(conv, parallel)
    held = _Constants()
    kh, kw, s, ph, pw = geom
    n_n, c_n = x_shape[:2]
    m_n, oh_n, ow_n = y_shape[1:]
    k_n, l_n = c_n * kh * kw, oh_n * ow_n
    hp, qp, pl, step_n, koff = ftile.implicit_geometry(c_n, kh, kw, s, ph, pw, oh_n, ow_n)
    koff = config.readonly(koff)
    xpp = np.empty(s * c_n * hp * qp, np.float32)
    xpp_ro = config.readonly(xpp)
    driver = ftile.implicit_driver(kind)
    no_z = readonly(np.zeros(1, np.float32))
    work = 2.0 * m_n * k_n * l_n
    packing = (k_n, ftile.MR[kind])  # (_packed's K and tile width)
    pair = None if (parallel and n_n == 1 and not rnpair.POINTWISE) or kind != cpair.KIND else cpair.implicit_pair(
        conv, step, y_shape, k_n, xpp, koff, step_n, lo, hi, has_z, x_shape, (s, ph, pl, hp, qp))
    if parallel and n_n == 1 and pair is not None:
        pair.rule = rnpair.rule()  # a stem of ~1 ms a half: fpair's slack, one stall a hiccup
    stem_split = cpair.stem_split(pair, x_shape, (s, ph, pl, hp, qp))  # (both sides fill the phases: cpair.py)

    def implicit(x, w, b=None, z=None, *, out=None):
        y = _output(out, y_shape)
        if ftile.requested_raw() != raw or not held.usable(conv, x, w, b, z, y, m_n, packing):
            return general(x, w, b, z, out=out)
        x = readonly(x)
        z = no_z if z is None else readonly(z)
        pooled = parallel and not _pair_now(pair, n_n)
        if not pooled and pair is not None and pair.whole and pair(held.packed, held.bias, x, y,
                                                                   None if z is no_z else z):
            return y  # a batch by images: each core its images' phases and outputs (cpair.py)
        for n in range(n_n):
            yn = y[n].reshape(-1)
            zn = z.reshape(-1) if z is no_z else z[n].reshape(-1)
            if pooled:  # one job of two phases at 2+ threads (conv.implicit_phases)
                implicit_phases(x[n], xpp, s, ph, pl, hp, qp, (kind, held.packed, k_n, m_n, xpp_ro, koff, step_n, ow_n,
                                                              held.bias, zn, has_z, lo, hi, yn, l_n), oh_n, work)
            else:
                raw_n = x[n] if stem_split and x[n].flags.c_contiguous else None  # (cpair.STEM_SPLIT)
                if raw_n is None:
                    ftile.phases_padded(x[n], xpp, s, ph, pl, hp, qp, 0, c_n)
                zs = None if z is no_z else z[n:n + 1]
                if pair is not None and not pair.whole and _paired(pair, parallel and n_n == 1, held.packed,
                                                                   held.bias, x, y[n:n + 1], zs, raw=raw_n):
                    continue  # the image's output channels in two halves on two cores (cpair.py)
                if raw_n is not None:  # the pair refused: the caller fills the phases
                    ftile.phases_padded(x[n], xpp, s, ph, pl, hp, qp, 0, c_n)
                driver(held.packed, k_n, m_n, xpp_ro, koff, step_n, ow_n, held.bias, zn, has_z, lo, hi, yn, l_n, 0,
                       oh_n)
        return y

    return implicit


# Issue 11, session 15 (out15): a fused-residual 1x1 Conv that a one-thread session binds to the serial rows driver
# with its K in one chunk (ResNet-50's 28x28 and 56x56 +Z layers) lets the memory plan write its output over its
# residual where the residual dies there (Conv.output_over_input; kernelkit.memory's kernel opt-in): no second
# stream of 3.2 MB at 56x56, no read for ownership of the output's lines. Dev box (docs/numba.md, "The writes
# after the K loop"): ResNet-50's +Z layers at 56x56 1.14-1.20x, 28x28 1.06-1.08x in the model, the next nodes
# level (a prototype over every +Z layer). On since session 16: the lead's call L1 (benchmarks/out15_round.sh, the
# Xeon, alone on CPUs 0,1) read numba / ip 1.05-1.13 on the +Z kinds in both orders of nodes_ab.py (64->256@56 +Z
# 1.11-1.13, 128->512@28 +Z 1.05), the other kinds level, and the whole ResNet-50 at one thread 1t / ip 1.03
# (0.69-1.19, 8 rounds; reference / ip 1.55 against reference / 1t 1.50). Read when a session makes its memory plan
# (residual_over; nodes_ab.py can switch it). A/B: kernels.conv_serial.RESIDUAL_IN_PLACE=0
RESIDUAL_IN_PLACE = True


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one shape start at the same byte (the memory plan's in-place placement). Their bounds
    overlapping first (np.may_share_memory, ~0.2 us): the two addresses cost ~2 us a call, paid by every call of a
    layer with a residual (issue 11, session 16, out16)."""
    return a.shape == b.shape and (a.size == 0 or np.may_share_memory(a, b)) and \
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


# Issue 11, session 16 (resid16; docs/numba.md, "The output over the residual at two threads, on the cols tiles and
# on Winograd"): RESIDUAL_IN_PLACE beyond the one-thread serial rows driver, each behind its own switch, read when a
# session makes its memory plan (residual_over; the calls' guard copies a residual only where its tiles need it).
# RESIDUAL_PARALLEL: a several-thread session's fused-residual 1x1 layer on the rows tiles of one K chunk: its
# bound call's every branch runs the driver over disjoint parts of the output, each element's residual read by the
# tile that stores it (cpair's halves by channels, pixels or images, FOLLOW's and TAIL's parts too, their K chunks
# checked in the pair's descriptor at each call; the refused pair's call on the caller; the pool's shards, pixel
# blocks by panel groups; halves.py's shares). RESIDUAL_COLS: the cols tiles too (ResNet-50's 14x14 +Z layers at one
# thread, 7x7 at one and two), whose earlier K chunks keep their partial sums in the scratch, not the output, and
# whose last chunk loads each residual row (lane) before it stores the output's over it (ftile._cols_store_rows,
# the lane-by-lane stores), at any K. Off: on the Xeon (one call, every job beside five others) ResNet-50 at two threads
# read 0.99-1.05 per +Z kind and default / all 1.03 (0.70-1.13) in turns, at one thread (cols) 1.02-1.03 on the 14x14
# and 7x7 +Z kinds and 1t / one 1.05 (0.86-1.27): within that call's noise.
# A/B: kernels.conv_serial.RESIDUAL_PARALLEL=1, kernels.conv_serial.RESIDUAL_COLS=1
RESIDUAL_PARALLEL = False
RESIDUAL_COLS = False
_copies = [0]  # residuals handed as the output that a call copied first (the tests; benchmarks/resid16_count.py)


def _over_shapes(conv, specs, kernel: tuple) -> tuple | None:
    """residual_over's and wino_over's first test: the input's and the weight's shapes where the memory plan's specs
    of the Conv's four inputs are static, plain-layout float32, the input 4-D, the weight 4-D with a ``kernel`` window
    and the Conv ungrouped; else None."""
    if len(specs) < 4 or any(s is None or not s.is_static or s.layout or s.dtype != "float32" for s in specs[:4]):
        return None
    x_shape, w_shape = tuple(specs[0].shape), tuple(specs[1].shape)
    if len(x_shape) != 4 or len(w_shape) != 4 or w_shape[2:] != kernel or int(conv.attrs.get("group", 1)) != 1:
        return None
    return x_shape, w_shape


def residual_over(conv, specs) -> bool:
    """Whether RESIDUAL_IN_PLACE lets the memory plan put ``conv``'s output over its fused residual: a 1x1
    stride-1 float32 Conv with the residual, static shapes, that _bind gives ftile's tiles where each element of
    the residual is read before the output's is stored over it: a one-thread session's serial rows driver with its
    K in one chunk, or (RESIDUAL_COLS) its cols tiles; (RESIDUAL_PARALLEL) a several-thread session's bound call of
    those (``_two_over``). The choices _bind and _tiles_call make, made again here: the plan is made before the
    first call binds; a call whose bind went another way copies such a residual first. ``specs``: the memory plan's
    specs of the inputs, the run's shapes (the kernel's own may still be symbolic)."""
    threads = conv.threads or config.default_threads()
    if not RESIDUAL_IN_PLACE or not (threads == 1 or (RESIDUAL_PARALLEL and threads >= 2)):
        return False
    shapes = _over_shapes(conv, specs, (1, 1))
    if shapes is None:
        return False
    x_shape, w_shape = shapes
    if conv.act[0] not in (NONE, CLIP):
        return False
    (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = conv._geometry(x_shape, w_shape)
    n_n, c_n, h_n, w_n = x_shape
    m_n = w_shape[0]
    if (sh, sw, ph, pw) != (1, 1, 0, 0) or (oh_n, ow_n) != (h_n, w_n) or tuple(specs[3].shape) != (n_n, m_n, oh_n,
                                                                                                    ow_n):
        return False
    kind, forced = ftile.choice()
    if kind is None:
        return False
    from .conv import ftile_cols, ftile_wins

    l_n = oh_n * ow_n
    if l_n == 1 or not (forced or ftile_wins(1, 1, 1, 1, m_n, c_n, l_n)):
        return False
    if threads >= 2:
        return _two_over(kind, n_n, m_n, c_n, l_n)
    if cols_tail(kind, m_n, l_n, c_n, True):
        return False
    if ftile_cols(kind, m_n, l_n, c_n, True):
        return bool(RESIDUAL_COLS)
    kc = ftile.plan(ftile.rows_kind(kind, m_n, one_thread=True), m_n, c_n, l_n, 1)[3]
    return kc >= c_n


# RESIDUAL_WINO (issue 11, session 16, resid16): a fused-residual 3x3 stride-1 Conv on Winograd (ResNet-18's second
# 3x3 of each block: F(4x4) at 56x56 and 28x28, F(2x2) at 14x14; one and, with RESIDUAL_PARALLEL, two threads) writes
# its output over its residual too: every output transform (winograd._output_tiles4, _output_transform4,
# _output_transform, and rnpair's halves, which call them) reads each residual element just before it stores the
# output's over it, and its parts (runs of tiles, planes, channel panels, a pair's sides) are disjoint; the
# transformed input and the products live in scratch of their own. Conv.compute copies such a residual on its
# other paths (im2col's product, fdirect's direct convolution, the depthwise ones), rnpair's direct pair too.
# Read when a session makes its memory plan (wino_over). Off: on the Xeon ResNet-18's 64@56 +Z kind ran slower with it
# (0.84 at one thread, 0.93 at two; the 28x28 and 14x14 kinds 0.97-1.04). A/B: kernels.conv_serial.RESIDUAL_WINO=1
RESIDUAL_WINO = False


def wino_over(conv, specs) -> bool:
    """Whether RESIDUAL_WINO lets the memory plan put ``conv``'s output over its fused residual: a 3x3 stride-1
    float32 Conv with the residual, static shapes, whose call runs on Winograd: Conv.compute's F(4x4) or F(2x2)
    choice, or at two threads (RESIDUAL_PARALLEL) rnpair's Winograd pairs (_paired_call's choice, made again),
    not its direct pair."""
    from .conv import direct_wins

    threads = conv.threads or config.default_threads()
    if not (RESIDUAL_IN_PLACE and RESIDUAL_WINO) or (threads >= 2 and not RESIDUAL_PARALLEL):
        return False
    shapes = _over_shapes(conv, specs, (3, 3))
    if shapes is None:
        return False
    x_shape, w_shape = shapes
    (sh, sw), (dh, dw), (ph, pw), (oh_n, ow_n) = conv._geometry(x_shape, w_shape)
    n_n, c_n, m_n = x_shape[0], x_shape[1], w_shape[0]
    if (sh, sw, dh, dw) != (1, 1, 1, 1) or w_shape[1] != c_n or tuple(specs[3].shape) != (n_n, m_n, oh_n, ow_n):
        return False
    kind = ftile.choice()[0]
    if threads >= 2 and n_n == 1 and rnpair.ON and conv.act[0] in (NONE, CLIP) and kind == rnpair.KIND:
        l_n = oh_n * ow_n
        if direct_wins(kind, 3, 3, 1, 1, 1, 1, m_n, ow_n, l_n, 9 * c_n):
            return False  # (rnpair's direct pair)
    if winograd.usable4(3, 3, 1, 1, 1, 1, 1, oh_n, ow_n, n_n) and conv._unbounded:
        return True
    return (winograd.usable(3, 3, 1, 1, 1, 1, 1, oh_n, ow_n, conv._wino_small(np.float32, c_n, m_n))
            and not conv._direct_small(np.float32, 1, 3, 3, m_n, oh_n, ow_n))


def _two_over(kind, n_n: int, m_n: int, k_n: int, l_n: int) -> bool:
    """residual_over at two threads: whether the bound parallel call of this 1x1 layer (_tiles_call: its pair's
    halves, the refused pair's call on the caller, or the pool's shards, each part of the output written by one
    driver call over its own tiles) runs on tiles that may write over the residual: the rows tiles of one K chunk
    (every side's and shard's plan: its chunk depends on K alone), or the cols tiles under RESIDUAL_COLS."""
    from .conv import ftile_cols

    if ftile_cols(kind, m_n, l_n, k_n, n_n == 1 and rnpair.ON and rnpair.POINTWISE and _pair_cols(m_n, k_n, l_n)):
        return bool(RESIDUAL_COLS)
    return ftile.plan(ftile.rows_kind(kind, m_n), m_n, k_n, l_n, 1)[3] >= k_n


def _pair_chunks_whole(pair, k_n: int) -> bool:
    """Whether every rows-tiles part of ``pair``'s halves (cpair's descriptor as it stands: FOLLOW and TAIL may
    have re-planned the sides) takes the whole K in one chunk (a rows tile then reads each residual element before
    it stores the output's over it), and the sides do not cut K (K_SPLIT, K_SPLIT_COLS); True for no pair and for the
    cols tiles that do not cut K (any K chunk)."""
    if pair is None:
        return True
    d = pair.desc
    if d[cpair.KS_CUT] > 0:  # (cpair.K_SPLIT: side 0's partial sums go into the output before the residual is added;
        return False  # the cols tiles too, cpair.COLS_K_SPLIT and K_SPLIT_COLS)
    if d[cpair.OP] == cpair.COLS:
        return True
    s0, s1 = cpair.SIDE0, cpair.SIDE0 + cpair.SIDE_N
    return min(d[s0 + cpair.S_KC], d[s1 + cpair.S_KC], d[cpair.T_KC] if d[cpair.T_N] > 0 else k_n) >= k_n


def _copied(z):
    """A copy of a residual that a call was handed as its own output, counted (``_copies``)."""
    _copies[0] += 1
    return z.copy()


def _tiles_call(conv, raw, kind, cols, y_shape, k_n, l_n, lo, hi, has_z, parallel, step=None, sub=None, tail=0):
    """ftile's rows (or cols) driver for a 1x1 stride-1 convolution, the NCHW input read in place
    (conv._gemm_ftile's direct case), its arguments fixed; ``parallel``: through ftile.run_sharded
    at the call's thread budget (the plan made once per thread count), else on this thread (two
    halves on two cores where cpair.py pairs the layer).
    ``sub`` = (sh, sw, subsampled shape): a 1x1 strided convolution, whose input's every sh-th row
    and sw-th column are first copied into a contiguous buffer of this call's (one strided copy of
    a quarter of the input at stride 2) that the tiles then read as the stride-1 input. The general
    path gathered them per column-matrix row and paid its per-call decisions: ResNet-18's and
    RegNetY's shortcuts ran 0.93-1.25x the reference's slice + BLAS product on the AMD box.
    ``tail`` > 0 (``cols_tail``, one thread): the first m_n - tail channels on the cols tiles, the last
    ``tail`` on one panel of the rows tiles (its own packing of those weight rows)."""
    general = _general(conv, parallel)
    sh = sw = 1
    buf = buf_ro = None
    if sub is not None:
        sh, sw, sub_shape = sub
        buf = np.empty(sub_shape, np.float32)
        buf_ro = readonly(buf)
    work = 2.0 * y_shape[1] * k_n * l_n
    plans: dict = {}
    held = _Constants()
    n_n, m_n = y_shape[0], y_shape[1]
    zero = conv._zeros(m_n, np.float32)
    no_z = readonly(np.zeros(1, np.float32))
    cols_kc = ftile.COLS_KC
    if tail:
        return _tail_call(conv, raw, kind, y_shape, k_n, l_n, lo, hi, has_z, general, buf, buf_ro, sh, sw, sub, tail)
    if cols:
        from .conv import cols_shape_one_thread

        width = ftile.COLS_WIDTH[kind]
        driver = ftile.cols_driver(kind)
        total = -(-m_n // width)
        size = ftile.scratch_size(kind, True, l_n)
        one_thread = _one_thread(conv, parallel)
        shape = cols_shape_one_thread(kind, m_n, l_n) if one_thread else None
        if shape is not None:  # another tile shape (conv.COLS_TILE_ONE_THREAD): its own panels, no pair; the
            # weights' prefetch and the whole tiles as the 3 x 7 driver's (_cols_driver)
            width = 16 * shape[0]
            driver = ftile.cols_shape_driver(*shape, *_cols_ahead_whole())
            total = m_n // width
            size = ftile.cols_shape_scratch(*shape, l_n)
        if one_thread:  # (a two-thread call the pair refused takes its halves' driver and K chunk: below)
            cols_kc = one_thread_cols_kc(l_n)
            if shape is None:
                driver = _cols_driver(kind)
    else:
        kind = ftile.rows_kind(kind, m_n, one_thread=_one_thread(conv, parallel))
        width = ftile.MR[kind]
        block, blocks, groups, kc = ftile.plan(kind, m_n, k_n, l_n, 1)
        total = blocks * groups
        pack = ftile.pack_rows(m_n, k_n, l_n)
        xahead = ftile.ROWS_X_AHEAD_ONE_THREAD if _one_thread(conv, parallel) and not pack else 0
        nt = bool(ftile.ROWS_NT_ONE_THREAD) and _one_thread(conv, parallel) and kc >= k_n  # (one K chunk)
        driver = ftile.rows_driver_ahead(kind, xahead, nt)
        size = ftile.scratch_size(kind, False, l_n, block, kc, pack)
    packing = (k_n, width)  # (_packed's K and tile width)
    pair = None if (parallel and n_n == 1 and not rnpair.POINTWISE) or kind != cpair.KIND or (
        cols and width != ftile.COLS_WIDTH[kind]) or getattr(_forced, "on", False) else cpair.tiles_pair(
        conv, step, cols, y_shape, k_n, l_n, lo, hi, has_z, split=parallel and n_n == 1, sub=sub is not None)
    if parallel and n_n == 1 and pair is not None:
        pair.rule = rnpair.rule()  # ResNet-50's 1x1 layers (0.3-1.4 ms a half): as rnpair's
    # (cpair.SUB_SPLIT: the pair's two sides subsample the raw input into buf, not the caller before the job)
    sub_in_pair = sub is not None and parallel and n_n == 1 and cpair.sub_split(pair, conv.input_specs[0].shape, sh,
                                                                                  sw, sub[2])
    if cols and pair is not None and not _one_thread(conv, parallel):  # the call of a refused pair: its halves'
        driver, cols_kc = ftile.cols_driver_ahead(kind, pair.ahead, pair.cwhole), int(pair.desc[cpair.KC])  # (cpair.
        # COLS_AHEAD, COLS_WHOLE)
    held_one = _held_one(conv, step, parallel, n_n)
    # RESIDUAL_IN_PLACE: a rows tile of one K chunk reads each residual element before it stores the output
    # element over it, and so does a cols tile at any K (its partial sums in the scratch); every branch below runs
    # the driver over disjoint parts of the output (cpair's halves, the pool's shards, halves.py's shares), so it
    # may be handed out = z; where K is in chunks on the rows tiles (the earlier chunks store partial sums into
    # the output), it gets a copy of such a z. The switches (RESIDUAL_PARALLEL, RESIDUAL_COLS) decide the plan only.
    one_chunk = cols or kc >= k_n

    def tiles(x, w, b=None, z=None, *, out=None):
        over = z is not None and out is not None and _same_memory(z, out)  # (RESIDUAL_IN_PLACE's plan)
        if held_one is not None and HELD_ONE_THREAD and config.current_threads() == 1:  # (its call guards z itself;
            # the switch first: current_threads costs ~1.3 us, and with the switch off the call gives None)
            one = held_one(x, w, b, z, out)
            if one is not None:
                return one(x, w, b, z, out=out)
        x_in, z_in = x, z
        y = _output(out, y_shape)
        if ftile.requested_raw() != raw or not held.usable(conv, x, w, b, z, y, m_n, packing):
            return general(x, w, b, z, out=out)  # (compute copies such a z)
        if over and not (one_chunk and _pair_chunks_whole(pair, k_n)):
            z, over = _copied(z), False
        x_raw = None
        if sub is not None:
            if sub_in_pair and not over and x.flags.c_contiguous and _pair_now(pair, n_n):
                x_raw = x  # (the pair's sides copy it into buf; where the pair refuses, the copy below)
            else:
                np.copyto(buf, x[:, :, ::sh, ::sw])
            x = buf_ro
        x = readonly(x)
        z = no_z if z is None else readonly(z)
        if parallel and not _pair_now(pair, n_n):
            _sharded(x, y, z, held)
            return y
        if pair is not None and _paired(pair, parallel and n_n == 1, held.packed, held.bias, x, y,
                                        None if z is no_z else z, raw=x_raw):
            return y
        if x_raw is not None:
            np.copyto(buf, x_raw[:, :, ::sh, ::sw])
        one = held_one(x_in, w, b, z_in, y) if held_one is not None and not over else None
        if one is not None:  # the pair refused (HELD_ONE_THREAD): numba 1t's call
            return one(x_in, w, b, z_in, out=y)
        scratch = config.thread_buffer("ftile", size, np.float32)
        for n in range(n_n):
            xs = x[n].reshape(-1)
            yn = y[n].reshape(-1)
            zn = z.reshape(-1) if z is no_z else z[n].reshape(-1)
            if cols:
                driver(held.packed, k_n, m_n, xs, l_n, l_n, held.bias, zn, has_z, lo, hi, yn, l_n, cols_kc,
                       scratch, 0, total)
            else:
                driver(held.packed, k_n, m_n, xs, 0, l_n, l_n, held.bias, zero, zn, has_z, lo, hi, yn, 0, l_n, block,
                       groups, kc, pack, scratch, 0, total)
        return y

    def _sharded(x, y, z, held):
        key = (config.current_threads(), ftile.BALANCED_PLAN)
        threads = key[0]
        hit = plans.get(key)
        if hit is None:
            if cols:
                hit = plans[key] = (-(-m_n // width), None, None, None, size)
            else:
                p_block, p_blocks, p_groups, p_kc = ftile.plan(kind, m_n, k_n, l_n, threads)
                hit = plans[key] = (p_blocks * p_groups, p_block, p_groups, p_kc,
                                        ftile.scratch_size(kind, False, l_n, p_block, p_kc, pack))
        count, p_block, p_groups, p_kc, p_size = hit
        if halves.usable(threads):
            _two_shares(x, y, z)
            return
        for n in range(n_n):
            xs = x[n].reshape(-1)
            yn = y[n].reshape(-1)
            zn = z.reshape(-1) if z is no_z else z[n].reshape(-1)
            if cols:
                ftile.run_sharded(ftile.conv_cols, count, (kind, held.packed, k_n, m_n, xs, l_n, l_n, held.bias, zn,
                                                           has_z, lo, hi, yn, l_n, ftile.COLS_KC), work, p_size)
            else:
                ftile.run_sharded(ftile.conv_tiles, count, (kind, held.packed, k_n, m_n, xs, 0, l_n, l_n, held.bias,
                                                            zero, zn, has_z, lo, hi, yn, 0, l_n, p_block, p_groups,
                                                            p_kc, pack), work, p_size)

    shares: dict = {}

    def _share_plan():
        """The two shares of one image (halves.py): per share (channel offset, channels, pixel
        offset, pixels, driver plan, scratch floats); made once per axis setting."""
        axis = "channels" if cols else halves.conv_axis(m_n, l_n)
        hit = shares.get(axis)
        if hit is not None:
            return hit
        if cols:  # panels of COLS_WIDTH channels: the shares are panel ranges of the one driver
            cut = halves.caller_parts(total, work)
            hit = ((0, cut, 0, l_n, None, size), (cut, total, 0, l_n, None, size))
        elif axis == "channels":
            panels = -(-m_n // width)
            c = halves.caller_parts(panels, work) * width
            hit = tuple((c0, c1 - c0, 0, l_n, ftile.plan(kind, c1 - c0, k_n, l_n, 1))
                        for c0, c1 in ((0, c), (c, m_n)))
        else:
            nr = ftile.NR[kind]
            p = min(l_n, halves.caller_parts(-(-l_n // nr), work) * nr)
            hit = tuple((0, m_n, p0, p1 - p0, ftile.plan(kind, m_n, k_n, p1 - p0, 1)) for p0, p1 in ((0, p), (p, l_n)))
        if not cols:
            hit = tuple(h + (ftile.scratch_size(kind, False, h[3], h[4][0], h[4][3], ftile.pack_rows(h[1], k_n, h[3])),)
                        for h in hit)
        shares[axis] = hit
        return hit

    def _two_shares(x, y, z):
        """Each image as two shares on the pool (halves.run): the caller's first output channels (or
        pixels) and the worker's rest, each share one driver call over its part."""
        plan = _share_plan()
        for n in range(n_n):
            xs = x[n].reshape(-1)
            yn = y[n].reshape(-1)
            zn = z.reshape(-1) if z is no_z else z[n].reshape(-1)
            calls = [_share_call(share, xs, yn, zn) for share in plan]
            halves.run(*calls, flops=work)

    def _share_call(share, xs, yn, zn):
        c0, mc, p0, np_, dplan, ssize = share
        if cols:  # c0, mc: the panel range
            def run_cols():
                driver(held.packed, k_n, m_n, xs, l_n, l_n, held.bias, zn, has_z, lo, hi, yn, l_n, ftile.COLS_KC,
                       config.thread_buffer("ftile", ssize, np.float32), c0, mc)
            return run_cols
        block, blocks, groups, kc = dplan
        pack = ftile.pack_rows(mc, k_n, np_)
        wp, bias, zeros, out, zz = held.packed, held.bias, zero, yn, zn
        if c0:
            wp, bias, zeros = wp[c0 * k_n:], bias[c0:], zeros[c0:]
            out = yn[c0 * l_n:]
            if has_z:
                zz = zn[c0 * l_n:]

        def run_rows():
            driver(wp, k_n, mc, xs, p0, l_n, np_, bias, zeros, zz, has_z, lo, hi, out, p0, l_n, block, groups, kc,
                   pack, config.thread_buffer("ftile", ssize, np.float32), 0, blocks * groups)
        return run_rows

    return tiles

"""Strided float32 convolutions as direct convolutions on ftile.py's cols tiles (issue 11, session 10).

The 3x3 stride-2 layers and the 7x7/2 stem of the ResNets: no im2col matrix, no copy into tile order,
no column phases. The output channels are the vector lanes (weights packed once as
``ftile.pack_weights(W, 48)``: per k three vectors of 16 channels), each of a tile's 7 output pixels
(consecutive along one output row) is one broadcast load: pixel p of tap k = (c, i, j) is the input
value ``xp[c, oh * s + i, (ow + p) * s + j]`` of the zero-padded input ``xp`` (made once per call,
``pad_planes``), at ``koff[k] + oh * s * Wp + (ow + p) * s`` floats: one offset from a table per k,
the pixels at constant distances (the stride), so the stride costs nothing in the inner loop (a
broadcast load does not care where its one value lies). 21 accumulators (7 pixels x 48 channels);
the last K chunk adds bias (+ the residual Z), clamps and writes each channel's 7 pixels along its
NCHW row (``ftile._cols_store_rows``: the block transposed in registers, one masked store a channel).

A row's last tile overlaps the one before where the row is not a multiple of 7 pixels (both store the
same values), so every tile is full: the ResNets' rows (112, 28, 14, 7) are whole tiles. K is cut
into equal chunks of at most ``KC`` (earlier chunks keep their sums in a scratch, as conv_cols does).
Shards: (48-channel panel, block of output rows), panel-major; at one thread one shard.

This is what onnxruntime's MLAS does for these layers (an NCHWc direct convolution, the output
channels in the lanes) without the NCHWc layout: the input stays NCHW and the output is written NCHW.
"""
from __future__ import annotations

import numpy as np

from ..config import jit
from . import ftile

U = np.uint64
KC = 768  # K per chunk: a chunk of the 48-channel panel (144 KiB) in L2 while the tiles pass
MP = 7  # pixels a tile (ftile.COLS_MP[2])
KIND = 2  # avx512 only: the tiles' 16 lanes and the in-register transposition of the store


def geometry(c_n: int, kh: int, kw: int, s: int, oh_n: int, ow_n: int):
    """(hp, wp, row_step, koff): the padded input's planes (hp, wp), the floats between two output
    rows' first taps (s * wp) and the offset of each tap k = (c, i, j) (c * hp + i) * wp + j."""
    hp = (oh_n - 1) * s + kh
    wp = (ow_n - 1) * s + kw
    c = np.arange(c_n, dtype=np.int64)[:, None, None]
    i = np.arange(kh, dtype=np.int64)[None, :, None]
    j = np.arange(kw, dtype=np.int64)[None, None, :]
    koff = ((c * hp + i) * wp + j).reshape(-1)
    return hp, wp, s * wp, koff


@jit
def _pad_block(x, xp, ph, pw, hp, wp, c0, c1, r0, r1):
    """xp[c, r, q] = x[c, r - ph, q - pw], 0 outside x (``x`` (C, H, W), ``xp`` flat C * hp * wp), for the channels
    [c0, c1) and the padded rows [r0, r1)."""
    c_n, h_n, w_n = x.shape
    xf = x.reshape(x.size)
    q_lo = min(pw, wp)
    q_hi = max(q_lo, min(wp, w_n + pw))
    for c in range(c0, c1):
        for r in range(r0, r1):
            d0 = U((c * hp + r) * wp)
            h = r - ph
            if h < 0 or h >= h_n:
                for q in range(wp):
                    xp[d0 + U(q)] = 0
                continue
            src = (c * h_n + h) * w_n - pw  # signed: src + q >= 0 for q >= q_lo
            for q in range(q_lo):
                xp[d0 + U(q)] = 0
            for q in range(q_lo, q_hi):
                xp[d0 + U(q)] = xf[U(src + q)]
            for q in range(q_hi, wp):
                xp[d0 + U(q)] = 0


@jit
def pad_planes(x, xp, ph, pw, hp, wp, c0, c1):
    """xp[c, r, q] = x[c, r - ph, q - pw], 0 outside x (``x`` (C, H, W), ``xp`` flat C * hp * wp),
    channels [c0, c1)."""
    _pad_block(x, xp, ph, pw, hp, wp, c0, c1, 0, hp)


@jit
def pad_rows(x, xp, ph, pw, hp, wp, r0, r1):
    """``pad_planes``' floats for the padded rows [r0, r1) of every channel (``x`` (C, H, W), ``xp`` flat C * hp * wp):
    the rows a block of output rows reads (rnpair.DIRECT_ROWS: each side pads its own rows into its own buffer)."""
    _pad_block(x, xp, ph, pw, hp, wp, 0, x.shape[0], r0, r1)


def _driver(step: int, cv: int, mp: int, tiles, ahead: int = 0):
    """The direct convolution's loops for stride ``step`` on tiles of ``cv`` channel vectors x ``mp``
    pixels, its tiles fixed: ``tiles`` = (full, full_z, one, one_z, two, two_z), full tiles of ``cv``,
    1 and 2 channel vectors (the last two for a last panel of 16 or 32 channels), without and with
    the residual."""
    full, full_z, one, one_z, two, two_z = tiles
    width, lanes = cv * 16, 16

    def run(wp, k_n, m_n, x, koff, row_step, ow_n, oh_n, rb, bias, z, has_z, lo, hi, out, kc, acc, s_lo, s_hi):
        ldo = oh_n * ow_n
        tpr = (ow_n + mp - 1) // mp
        for s in range(s_lo, s_hi):
            q = s // rb
            b = s - q * rb
            h0 = b * oh_n // rb
            h1 = (b + 1) * oh_n // rb
            r0 = q * width
            m_valid = min(width, m_n - r0)
            cvs = (m_valid + lanes - 1) // lanes
            for k0 in range(0, k_n, kc):
                kk = min(kc, k_n - k0)
                first = np.int64(1 if k0 == 0 else 0)
                final = np.int64(1 if k0 + kk >= k_n else 0)
                w_off = q * k_n * width + k0 * width
                ko = koff[k0:k0 + kk]
                a = 0
                for oh in range(h0, h1):
                    xb = oh * row_step
                    ob = r0 * ldo + oh * ow_n
                    for t in range(tpr):
                        ow = min(t * mp, ow_n - mp)
                        xo = xb + ow * step
                        oo = ob + ow
                        ao = a * (mp * width)
                        a += 1
                        if cvs == cv:
                            if has_z:
                                full_z(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi,
                                       out, m_valid, mp)
                            else:
                                full(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi,
                                     out, m_valid, mp)
                        elif cvs == 1:
                            if has_z:
                                one_z(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi,
                                      out, m_valid, mp)
                            else:
                                one(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi,
                                    out, m_valid, mp)
                        elif has_z:
                            two_z(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                                  m_valid, mp)
                        else:
                            two(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                                m_valid, mp)

    return ftile._variant_jit(run, f"direct{step}_{cv}x{mp}" + (f"_a{ahead}" if ahead else ""), KIND)


def driver(step: int, cv: int = 3, mp: int = MP):
    """The compiled loops of ``conv`` for stride ``step`` and tiles of ``cv`` x ``mp`` (TILES), without
    the weights' prefetch, built on first use (cached on disk as ftile.direct{step}_{cv}x{mp}.avx512)."""
    return driver_ahead(step, cv, mp, 0)


# Issue 11, session 14 (r50two14): the tiles prefetch their weights' row k + AHEAD into L1 at step k (0: off;
# conv.py's one-thread call reads it when it first plans a layer; the two-thread pairs take rnpair.DIRECT_AHEAD, the
# shards 0): a 48-channel panel's chunk of KC steps is 144 KiB and streams from L2 (from L3 for the 512-channel
# layers' 9.4 MB of weights) once a tile, as fgemm's B panels did before B_AHEAD_ONE_THREAD. Xeon, ResNet-50 per
# kind in four processes (nodes_ab.py, two calls), 16 against 0: the 512@7 layers 1.20-1.24x, the 3x3/2 to 7x7
# 1.17-1.29x, to 14x14 1.02-1.14x, to 28x28 1.00-1.08x (an identical session 0.89-1.12x); 8: 1.09-1.19x and
# 1.07-1.16x on the 512 ones; ResNet-50 and ResNet-18 in turns 1.01 and 1.03 (medians; the host's noise).
AHEAD = 16


@ftile._built_once
def driver_ahead(step: int, cv: int, mp: int, ahead: int):
    """``driver`` with the prefetch distance given. Tiles of 4 vectors have no narrow ones: their
    products have a multiple of 64 channels (``tile_shape``)."""
    width = cv * 16
    tiles = []
    for n in (cv, 1, 2):
        for z in (False, True):
            tiles.append(ftile._cols_intrinsic("avx512", n if cv == 3 else cv, mp, z, width, xstep=step, full=True,
                                               ahead=ahead))
    return _driver(step, cv, mp, tuple(tiles), ahead)


TILES = ((3, 7), (3, 8), (4, 6), (2, 14))  # (channel vectors, pixels): 21, 24, 24 or 28 accumulators
WIDE = (3, 8)  # the tiles of products with output rows of WIDE_MIN_OW+ pixels (None: 3 x 7)
WIDE_MIN_OW = 56  # (the stem's 112-pixel rows: 14 tiles of 8 pixels, whose store transposes 8 pixel slots
# where the 7-pixel tile's transposes 7 and a padding one)
WIDE_TILE = ""  # "CVxMP" of TILES in place of WIDE ("": WIDE), for A/B runs (the bench settings take no tuple):
# kernels.fdirect.WIDE_TILE=4x6 with kernels.conv.DIRECT_MIN_K=0 runs the ResNets' 7x7/2 stem (64 channels, rows of
# 112 pixels) on one 64-channel panel of 4 x 6 tiles (24 FMAs per 4 weight vectors and 6 broadcasts) where 3 x 8
# runs a 48-channel panel and a 16-channel one of 1 x 8 tiles (8 FMAs per vector and 8 broadcasts). Issue 11,
# session 14 (r18one14): not measured on the Xeon.


# Issue 11, session 17 (r50one17): a one-thread layer's tiles where its output rows are whole tiles of it and its
# channels whole panels of it ("CVxMP" of TILES; "": tile_shape's choice at every thread count). "2x14": 32
# channels x 14 pixels (28 accumulators), per step 2 weight vectors and 14 broadcasts for 28 FMAs where 3 x 7 loads 3
# and 7 for 21: the weights' stream from L2 (a 48-channel panel's chunk of KC steps is 144 KiB) halved per FMA, and
# ResNet-50's 128-, 256- and 512-channel layers whole panels of 32 (3 x 7 runs their last panel of 32 or 16 channels on
# its 2- or 1-vector tile). The rows of 28 and 14 pixels of ResNet-50's 3x3/2 layers to 28x28 and 14x14; rows of 7 keep
# 3 x 7. conv.py's _gemm_direct reads it when it first plans a layer at one thread (as AHEAD). Xeon (nodes_ab.py, two
# processes, against the default in a session of its own): 3x3/2 128 -> 128 to 28x28 1.051 and 1.097 (ctl 1.014,
# 1.072), 256 -> 256 to 14x14 1.102 and 1.032 (ctl 1.027, 0.996); all nodes 1.026, 1.008 (ctl 0.994, 1.012). Ahead per
# layer, ~0.1 ms a run: off until a whole-model A/B. A/B: kernels.fdirect.TILE_ONE_THREAD=2x14
TILE_ONE_THREAD = ""


def one_thread_shape(m_n: int, ow_n: int) -> tuple[int, int] | None:
    """TILE_ONE_THREAD's (cv, mp) for a one-thread layer of ``m_n`` channels and output rows of ``ow_n`` pixels, or
    None where it is off or does not fit (rows not whole tiles of it, channels not whole panels, the wide rows)."""
    if not TILE_ONE_THREAD:
        return None
    cv, mp = (int(v) for v in str(TILE_ONE_THREAD).split("x"))
    if (cv, mp) not in TILES or ow_n % mp or m_n % (16 * cv) or ow_n >= WIDE_MIN_OW:
        return None
    return cv, mp


def tile_shape(m_n: int, ow_n: int, threads: int = 0) -> tuple[int, int]:
    """(cv, mp) of the tiles a product of ``m_n`` channels and output rows of ``ow_n`` pixels runs on:
    WIDE (or WIDE_TILE) for wide rows (4 x 6 only where the channels are a multiple of 64), else 3 x 7 (the ResNets'
    rows of 7, 14 and 28 pixels are whole 7-pixel tiles); at one thread (``threads`` 1) TILE_ONE_THREAD's where it
    fits."""
    if threads == 1:
        one = one_thread_shape(m_n, ow_n)
        if one is not None:
            return one
    wide = tuple(int(v) for v in str(WIDE_TILE).split("x")) if WIDE_TILE else WIDE
    if wide is not None and ow_n >= WIDE_MIN_OW and (wide[0] != 4 or m_n % 64 == 0):
        return wide
    return 3, MP


def plan(m_n: int, k_n: int, oh_n: int, threads: int, cv: int = 3) -> tuple[int, int, int]:
    """(shards, row blocks, kc): shard s is panel s // rb, output rows of block s % rb; at one thread
    one block (each panel passes every output row), at more at least SHARDS_PER_THREAD shards a thread."""
    panels = -(-m_n // (16 * cv))
    chunks = -(-k_n // KC)
    kc = -(-k_n // chunks)
    rb = 1
    if threads > 1:
        rb = min(oh_n, -(-(SHARDS_PER_THREAD * threads) // panels))
    return panels * rb, rb, kc


SHARDS_PER_THREAD = 4


def scratch_size(k_n: int, kc: int, oh_n: int, ow_n: int, rb: int, cv: int = 3, mp: int = MP) -> int:
    """Floats of a shard's scratch: the partial sums of its tiles where K takes more than one chunk."""
    if kc >= k_n:
        return 1
    return -(-oh_n // rb) * -(-ow_n // mp) * mp * cv * 16


def conv(step, cv, mp, ahead, wp, k_n, m_n, x, koff, row_step, ow_n, oh_n, rb, bias, z, has_z, lo, hi, out, kc, acc,
         s_lo, s_hi):
    """Shards [s_lo, s_hi) (``plan``) of one image's strided convolution on tiles of ``cv`` x ``mp``
    (``tile_shape``), their weights prefetched ``ahead`` steps on (AHEAD's value when the layer was
    planned): ``x`` the flat zero-padded input (``pad_planes``, planes of ``geometry``), ``wp``
    the weights as ftile.pack_weights(W, 16 * cv), ``out`` and ``z`` flat (M, OH * OW); ``acc`` a
    scratch of ``scratch_size`` floats."""
    driver_ahead(step, cv, mp, ahead)(wp, k_n, m_n, x, koff, row_step, ow_n, oh_n, rb, bias, z, has_z, lo, hi, out,
                                      kc, acc, s_lo, s_hi)


def fits(kind, kh: int, kw: int, mg: int, ow_n: int) -> bool:
    """Whether this module can run a (float32, one group) convolution: avx512, not 1x1, output
    channels a multiple of 16 (at least MIN_M), output rows of at least 7 pixels (any stride, pads;
    dilation 1)."""
    return kind == KIND and kh * kw > 1 and mg % 16 == 0 and mg >= MIN_M and ow_n >= MP


MIN_M = 64

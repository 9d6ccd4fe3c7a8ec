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
def pad_planes(x, xp, ph, pw, hp, wp, c0, c1):
    """xp[c, r, q] = x[c, r - ph, q - pw], 0 outside x (``x`` (C, H, W), ``xp`` flat C * hp * wp),
    channels [c0, c1)."""
    c_n, h_n, w_n = x.shape
    xf = x.reshape(x.size)
    q_lo = min(pw, wp)
    q_hi = max(q_lo, min(wp, w_n + pw))
    for c in range(c0, c1):
        for r in range(hp):
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


def _driver(step: int, tiles):
    """The direct convolution's loops for stride ``step``, its tiles fixed: ``tiles`` = (three, three_z,
    one, one_z, two, two_z), full 7-pixel tiles of 3, 1 and 2 channel vectors (the last two for a last
    panel of 16 or 32 channels), without and with the residual."""
    three, three_z, one, one_z, two, two_z = tiles
    width, lanes, mp = ftile.COLS_WIDTH[KIND], ftile.COLS_LANES[KIND], MP

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
                        if cvs == 3:
                            if has_z:
                                three_z(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi,
                                        out, m_valid, mp)
                            else:
                                three(wp, w_off, x, xo, ko, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi,
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

    return ftile._variant_jit(run, f"direct{step}", KIND)


@ftile._built_once
def driver(step: int):
    """The compiled loops of ``conv`` for stride ``step``, built on first use (cached on disk as
    ftile.direct{step}.avx512)."""
    width = ftile.COLS_WIDTH[KIND]
    tiles = []
    for cv in (3, 1, 2):
        for z in (False, True):
            tiles.append(ftile._cols_intrinsic("avx512", cv, MP, z, width, xstep=step, full=True))
    return _driver(step, tuple(tiles))


def plan(m_n: int, k_n: int, oh_n: int, threads: int) -> tuple[int, int, int]:
    """(shards, row blocks, kc): shard s is panel s // rb, output rows of block s % rb; at one thread
    one block (each panel passes every output row), at more at least SHARDS_PER_THREAD shards a thread
    (the blocks' count rounded up to a multiple of the threads)."""
    panels = -(-m_n // ftile.COLS_WIDTH[KIND])
    chunks = -(-k_n // KC)
    kc = -(-k_n // chunks)
    rb = 1
    if threads > 1:
        rb = min(oh_n, -(-(SHARDS_PER_THREAD * threads) // panels))
    return panels * rb, rb, kc


SHARDS_PER_THREAD = 4


def scratch_size(k_n: int, kc: int, oh_n: int, ow_n: int, rb: int) -> int:
    """Floats of a shard's scratch: the partial sums of its tiles where K takes more than one chunk."""
    if kc >= k_n:
        return 1
    return -(-oh_n // rb) * -(-ow_n // MP) * MP * ftile.COLS_WIDTH[KIND]


def conv(step, wp, k_n, m_n, x, koff, row_step, ow_n, oh_n, rb, bias, z, has_z, lo, hi, out, kc, acc, s_lo, s_hi):
    """Shards [s_lo, s_hi) (``plan``) of one image's strided convolution: ``x`` the flat zero-padded
    input (``pad_planes``, planes of ``geometry``), ``wp`` the weights as ftile.pack_weights(W, 48),
    ``out`` and ``z`` flat (M, OH * OW); ``acc`` a scratch of ``scratch_size`` floats."""
    driver(step)(wp, k_n, m_n, x, koff, row_step, ow_n, oh_n, rb, bias, z, has_z, lo, hi, out, kc, acc, s_lo, s_hi)


def fits(kind, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, mg: int, ow_n: int) -> bool:
    """Whether conv.py may run a (float32, one group) convolution here: avx512, strided both ways alike,
    undilated, not 1x1, output channels a multiple of 16 (at least MIN_M), rows of at least 7 pixels."""
    return (kind == KIND and sh == sw >= 2 and dh == dw == 1 and kh * kw > 1 and mg % 16 == 0 and mg >= MIN_M
            and ow_n >= MP)


MIN_M = 64

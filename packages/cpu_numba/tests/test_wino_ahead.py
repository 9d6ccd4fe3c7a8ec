"""The weights' prefetch in Winograd's batched products and the rows halves' pixel prefetch (issue 11, session 16;
docs/numba.md, "The weights' prefetch in the Winograd products"): ftile.batched_gemms' ``ahead`` (the cols tiles of 7
and 8 pixels), winograd.AHEAD_ONE_THREAD (a one-thread Conv's F(4x4) by tiles, F(4x4) of a batch and F(2x2)),
rnpair.WINO_AHEAD (the F(4x4) pairs by tiles and the F(2x2) pairs by output channels) and cpair.ROWS_X_AHEAD (the
rows halves that read their pixels in place). A prefetch changes no arithmetic, so each equals its path without it
bit for bit: odd channel counts (K past a prefetch's end and a panel's, a narrow last panel), both Winograd sizes,
the residual and Relu; each against the reference."""
from __future__ import annotations

import numpy as np
import pytest
from _conv_layers import (
    _at,
    _cpair_of,
    _half_by_hand,
    _kernel,
    _layer,
    _no_tail,
    _one_thread,
    _out_shape,
    _pair_of,
    _reference,
)
from kernelkit.testing import assert_close
from kernelkit_numba import config
from kernelkit_numba.kernels import conv_serial, cpair, ftile, pairs, rnpair, winograd

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the cols tiles and the pairs run on the AVX-512 tiles")]

RELU = {"activation": "Relu"}
PADS = {"pads": [1, 1, 1, 1]}


def _built(factory, *key) -> bool:
    return (factory, key) in ftile._built


@pytest.mark.parametrize("positions", [16, 36])
@pytest.mark.parametrize("nt", [49, 16, 25, 24])
def test_batched_products_prefetch(positions, nt):
    """ftile.batched_gemms with ``ahead`` 16 and 3 on the cols tiles (49 and 25 columns: the 7-pixel tile, 16 and
    24: the 8-pixel one; 80 channels: a 48-channel panel and a narrow one of 32; K = 131, odd) equals ahead 0 bit
    for bit, position-major and group-major shards alike, and float64's products; the prefetching drivers taken."""
    kind = rnpair.KIND
    rng = np.random.default_rng(nt + positions)
    m_n, c_n = 80, 131
    u = rng.standard_normal((positions, m_n, c_n)).astype(np.float32)
    cols = ftile.cols_mode(kind, nt)
    wp = config.readonly(ftile.pack_batched(u, ftile.COLS_WIDTH[kind]))
    v = np.zeros((positions, c_n * nt + 16), np.float32)
    v[:, :c_n * nt] = rng.standard_normal((positions, c_n * nt))
    v = config.readonly(v)
    zeros = config.readonly(np.zeros(m_n, np.float32))
    panels = -(-m_n // ftile.COLS_WIDTH[kind])
    want = np.einsum("pmc,pct->pmt", u.astype(np.float64), v[:, :c_n * nt].reshape(positions, c_n, nt).astype(
        np.float64))
    outs = []
    for ahead in (0, 16, 3):
        for groups in (1, -panels):
            mo = np.full((positions, m_n * nt + 16), np.nan, np.float32)
            scratch = np.empty(ftile.scratch_size(kind, cols, nt), np.float32)
            ftile.batched_gemms(kind, cols, wp, m_n, c_n, v, nt, mo, zeros, groups, scratch, 0,
                                positions * (1 if groups > 0 else panels), ahead)
            assert np.isnan(mo[:, m_n * nt:]).all()
            outs.append(mo[:, :m_n * nt].reshape(positions, m_n, nt))
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])
    assert_close(outs[0], want.astype(np.float32), np.float32)
    assert _built(ftile._batched_driver, kind, cols, 16) and _built(ftile._batched_driver, kind, cols, 3)
    assert _built(ftile.cols8_driver_ahead.__wrapped__, 16) if cols == 2 else _built(
        ftile.cols_driver_ahead.__wrapped__, kind, 16)


def test_batched_rows_tiles_ignore_ahead():
    """The rows tiles have no weight prefetch: batched_gemms on them with ``ahead`` takes the plain driver (key 0)."""
    kind = rnpair.KIND
    rng = np.random.default_rng(3)
    m_n, c_n, nt, positions = 24, 40, 70, 16
    u = rng.standard_normal((positions, m_n, c_n)).astype(np.float32)
    wp = config.readonly(ftile.pack_batched(u, ftile.MR[kind]))
    v = config.readonly(rng.standard_normal((positions, c_n * nt)).astype(np.float32))
    zeros = config.readonly(np.zeros(m_n, np.float32))
    outs = []
    for ahead in (0, 16):
        mo = np.full((positions, m_n * nt), np.nan, np.float32)
        ftile.batched_gemms(kind, 0, wp, m_n, c_n, v, nt, mo, zeros, 1, np.empty(1, np.float32), 0, positions, ahead)
        outs.append(mo)
    np.testing.assert_array_equal(outs[1], outs[0])
    assert not _built(ftile._batched_driver, kind, 0, 16)


# (x shape, weight shape, attrs, residual, cols mode of the products): F(4x4) by tiles on 131 -> 80 at 28x28 (49
# tiles: the 7-pixel tile, K odd, a narrow last panel), F(4x4) of a batch of two 14x14 maps (32 tiles: the 8-pixel
# tile, the position-major products), F(2x2) on 136 -> 144 at 14x14 (49 tiles, three panels), each with the residual
# and Relu or Relu alone
ONE = [
    ((1, 131, 28, 28), (80, 131, 3, 3), {**PADS, **RELU}, True, 1),
    ((2, 131, 14, 14), (80, 131, 3, 3), {**PADS, **RELU}, False, 2),
    ((1, 136, 14, 14), (144, 136, 3, 3), {**PADS, **RELU}, True, 1),
]


@pytest.mark.parametrize("case", ONE, ids=lambda c: f"n{c[0][0]}-{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_one_thread_winograd_prefetch(case, monkeypatch):
    """winograd.AHEAD_ONE_THREAD = 16: a one-thread Conv's Winograd call (F(4x4) by tiles, F(4x4) of a batch, F(2x2))
    equals the same call with 0 bit for bit, and the reference; the kernel keeps the value its first call found (set
    back to 0 after, it still prefetches), and the prefetching products' driver is the one built."""
    xs, ws, attrs, res, cols = case
    inputs = _layer(case, 7)
    shape = _out_shape(xs, ws, attrs)
    outs = []
    for ahead in (0, 16):
        monkeypatch.setattr(winograd, "AHEAD_ONE_THREAD", ahead)
        k = _kernel(xs, ws, attrs, 1, res)
        outs.append(_at(1, k.compute, inputs, shape))
        monkeypatch.setattr(winograd, "AHEAD_ONE_THREAD", 0)
        outs.append(_at(1, k.compute, inputs, shape))
        assert k._wino_ahead() == ahead
    assert not np.isnan(outs[0]).any()
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])
    assert_close(outs[0], _reference(inputs, attrs), np.float32)
    assert _built(ftile._batched_driver, rnpair.KIND, cols, 16)


def test_one_thread_only(monkeypatch):
    """At two threads (the shard pool's phases) the Winograd products keep the plain driver whatever the kernel
    keeps: the same output bit for bit as the one-thread call."""
    case = ((1, 136, 14, 14), (144, 136, 3, 3), {**PADS, **RELU}, False, 1)
    xs, ws, attrs, res, _cols = case
    inputs = _layer(case, 8)
    shape = _out_shape(xs, ws, attrs)
    monkeypatch.setattr(winograd, "AHEAD_ONE_THREAD", 16)
    seen = []
    real = ftile.batched_gemms

    def spy(*args):
        seen.append(args[13] if len(args) > 13 else 0)
        return real(*args)

    monkeypatch.setattr(ftile, "batched_gemms", spy)
    k = _kernel(xs, ws, attrs, 2, res)
    got = _at(2, k.compute, inputs, shape)
    assert seen and set(seen) == {0}
    seen.clear()
    np.testing.assert_array_equal(_at(1, k.compute, inputs, shape), got)
    assert seen and set(seen) == {16}


# rnpair's Winograd pairs: F(4x4) by tiles on 131 -> 80 at 28x28 (25 and 24 tiles a side: the 7- and the 8-pixel
# tiles) with the residual, F(2x2) by output channels on 136 -> 144 at 14x14 (a side's panels at every position) and
# on 129 -> 80 at 14x14 with the residual (a narrow panel on the helper's side)
PAIRS = [
    ((1, 131, 28, 28), (80, 131, 3, 3), {**PADS, **RELU}, True, rnpair.OP_WINO),
    ((1, 136, 14, 14), (144, 136, 3, 3), {**PADS, **RELU}, False, rnpair.OP_WINO2),
    ((1, 129, 14, 14), (80, 129, 3, 3), {**PADS, **RELU}, True, rnpair.OP_WINO2),
]


@pytest.mark.parametrize("case", PAIRS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}-op{c[4]}")
def test_wino_halves_prefetch(case, quiet_server, monkeypatch):
    """rnpair.WINO_AHEAD = 16: the Winograd pair (the caller alone, the helper's half by hand) equals the pair with 0
    bit for bit, and the reference and the one-thread path within the tolerances; each pair keeps its value and
    takes the half of both switches."""
    xs, ws, attrs, res, op = case
    inputs, shape, want = _one_thread(case, 9)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    outs = []
    for wino in (0, 16):
        monkeypatch.setattr(rnpair, "WINO_AHEAD", wino)
        fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
        pair = _pair_of(fn)
        assert pair.desc[rnpair.OP] == op and pair.wino == wino
        outs.append(_at(2, fn, inputs, shape))
        assert pair.desc[rnpair.FN] == rnpair.prepare(rnpair.DIRECT_AHEAD, wino)
    assert srv.stats["alone"] == 2
    assert rnpair.prepare(rnpair.DIRECT_AHEAD, 16) != rnpair.prepare(rnpair.DIRECT_AHEAD, 0)
    assert not np.isnan(outs[0]).any()
    np.testing.assert_array_equal(outs[1], outs[0])
    assert_close(outs[0], _reference(inputs, attrs), np.float32)
    assert_close(outs[0], want, np.float32)
    _half_by_hand(srv, pair.desc, rnpair.YA, shape, outs[0])  # the helper's half on the prefetching half


# cpair's rows halves of one image: 64 -> 72 at 30x30 (8-row panels read in place, a masked last tile) with the
# residual, 45 -> 100 at 17x17 (in place, K odd, a last panel of 4 rows) and 33 -> 272 at 15x15 (136 channels a side:
# packed, the plain driver) with the residual
ROWS = [
    ((1, 64, 30, 30), (72, 64, 1, 1), RELU, True, False),
    ((1, 45, 17, 17), (100, 45, 1, 1), RELU, False, False),
    ((1, 33, 15, 15), (272, 33, 1, 1), RELU, True, True),
]


@pytest.mark.parametrize("case", ROWS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_rows_halves_pixel_prefetch(case, quiet_server, monkeypatch):
    """cpair.ROWS_X_AHEAD = 8 (and 3): a one-image rows pair (the caller alone, the helper's half by hand) equals the
    pair with 0 bit for bit, and the reference; the pair keeps its value and takes the half of both switches; a side
    that packs its pixels keeps the plain driver (the same values either way)."""
    _no_tail(monkeypatch)
    xs, ws, attrs, res, packed = case
    inputs = _layer((xs, ws, attrs, res, None), 10)
    shape = _out_shape(xs, ws, attrs)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    outs = []
    for xahead in (0, 8, 3):
        monkeypatch.setattr(cpair, "ROWS_X_AHEAD", xahead)
        fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
        pair = _cpair_of(fn)
        assert pair is not None and pair.desc[cpair.OP] == cpair.ROWS and pair.xahead == xahead
        for side in (cpair.SIDE0, cpair.SIDE0 + cpair.SIDE_N):
            assert bool(pair.desc[side + cpair.S_PACK]) == packed
        outs.append(_at(2, fn, inputs, shape))
        # (every pair's half is compiled for COLS_WHOLE as well, on by default since session 17's F1: its cols tiles)
        assert pair.desc[cpair.FN] == cpair.prepare(cpair.COLS_AHEAD, xahead, cpair.COLS_WHOLE)
    assert srv.stats["alone"] == 3
    assert not np.isnan(outs[0]).any()
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])
    assert_close(outs[0], _reference(inputs, attrs), np.float32)
    assert _built(ftile.rows_driver_order.__wrapped__, rnpair.KIND, ftile.ROWS_TILE_MAJOR,
                  bool(ftile.ROWS_PREFETCH) and not ftile.ROWS_TILE_MAJOR, 8)
    _half_by_hand(srv, pair.desc, cpair.YA, shape, outs[0])  # the helper's half on the prefetching half (3)

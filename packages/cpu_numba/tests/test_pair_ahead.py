"""The weights' prefetch in the two-thread halves (issue 11, session 15; docs/numba.md, "The weights' prefetch in the
two-thread halves"): cpair.COLS_AHEAD (the 1x1 layers' cols halves, and the whole-layer call of a refused pair) with
cpair.COLS_KC_ONE_THREAD (their K chunk a one-thread session's), and rnpair.DIRECT_AHEAD (fdirect's halves). A prefetch
and a K chunk change no arithmetic, so each half equals the one-thread path bit for bit: the caller alone (the helper
'spinning' but never coming), the helper's half run by hand, and the caller's whole-layer call where the helper is
asleep; odd channel counts (K past a chunk and a prefetch's end, a narrow last panel), the residual and Relu."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import conv_serial, cpair, fdirect, ftile, pairs, rnpair

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (test_rnpair's layers and helpers)
from test_rnpair import (  # noqa: E402, I001
    RELU, _at, _cpair_of, _helper_half, _kernel, _layer, _out_shape, _pair_of, _reference)

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the pairs run on the AVX-512 tiles")]

# (x shape, weight shape, attrs, residual, pixels up to which the pair takes the cols tiles): 257 -> 80 at 7x7 (K odd:
# chunks of 128, 128 and 1 at the one-thread chunk; a 48-channel panel and a narrow one of 32, cut inside the first),
# ResNet-50's 256 -> 512 at 7x7 (11 panels, the sixth cut by pixels), 129 -> 144 at 14x14 (the cols tiles there:
# conv_serial.PAIR_COLS_MAX), each with the residual and Relu
COLS = [
    ((1, 257, 7, 7), (80, 257, 1, 1), RELU, True, 0),
    ((1, 256, 7, 7), (512, 256, 1, 1), RELU, True, 0),
    ((1, 129, 14, 14), (144, 129, 1, 1), RELU, True, 196),
]
PADS = {"pads": [1, 1, 1, 1]}
# fdirect's pairs: 3x3/2 of 33 -> 80 channels (K = 297, odd; a panel of 48 and one of 32) with the residual, 64 -> 128
# (K = 576), and 3x3/1 of 64 -> 64 at 7x7 with the residual
DIRECT = [
    ((1, 33, 14, 14), (80, 33, 3, 3), {**PADS, "strides": [2, 2], **RELU}, True, rnpair.OP_DIRECT),
    ((1, 64, 28, 28), (128, 64, 3, 3), {**PADS, "strides": [2, 2], **RELU}, False, rnpair.OP_DIRECT),
    ((1, 64, 7, 7), (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_DIRECT),
]


def _content(cell):
    try:
        return cell.cell_contents
    except ValueError:  # (a cell not yet filled: a nested function defined after)
        return None


def _cols_pair(case, monkeypatch, ahead: int, kc_one: bool):
    xs, ws, attrs, res, most = case
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", most)
    monkeypatch.setattr(cpair, "COLS_AHEAD", ahead)
    monkeypatch.setattr(cpair, "COLS_KC_ONE_THREAD", int(kc_one))
    # COLS_WHOLE (another half: prepare(ahead, 0, True)) and the K cuts (sums in another order: 257 -> 80 is a
    # projection) off, on by default since session 17's F1: this test is about the prefetch on the general tile
    # (COLS_WHOLE's own: test_pair_whole)
    monkeypatch.setattr(cpair, "COLS_WHOLE", False)
    monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 0)
    monkeypatch.setattr(cpair, "COLS_K_SPLIT", False)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.OP] == cpair.COLS and pair.ahead == ahead
    return fn, pair


@pytest.mark.parametrize("case", COLS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_cols_halves_prefetch(case, quiet_server, monkeypatch):
    """cpair.COLS_AHEAD = 16 with the one-thread K chunk: the caller alone, the helper's half by hand and the caller's
    whole-layer call (the helper asleep: the refused pair's driver) equal a one-thread session's call (the cols
    tiles with conv.COLS_AHEAD_ONE_THREAD's prefetch and its K chunk) and the plain halves (COLS_AHEAD 0, COLS_KC)
    bit for bit, and the reference."""
    xs, ws, attrs, res, _most = case
    inputs = _layer(case, 5)
    shape = _out_shape(xs, ws, attrs)
    l_n = xs[2] * xs[3]
    one = conv_serial.serial_call(_kernel(xs, ws, attrs, 1, res), None)  # a one-thread session's call
    cells = dict(zip(one.__code__.co_freevars, (_content(c) for c in one.__closure__)))
    assert cells["cols"] and cells["cols_kc"] == conv_serial.one_thread_cols_kc(l_n)  # (its prefetch, its chunk)
    want = _at(1, one, inputs, shape)
    assert_close(want, _reference(inputs, attrs), np.float32)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    plain_fn, plain = _cols_pair(case, monkeypatch, 0, False)
    assert plain.desc[cpair.KC] == ftile.COLS_KC
    plain_y = _at(2, plain_fn, inputs, shape)
    fn, pair = _cols_pair(case, monkeypatch, 16, True)
    assert pair.desc[cpair.KC] == conv_serial.one_thread_cols_kc(l_n) < ftile.COLS_KC
    assert pair.desc[cpair.FN] == 0  # (its half looked up at the first call: the prefetching one)
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == 2 and srv.stats["paired"] == 0
    assert pair.desc[cpair.FN] == cpair.prepare(16) != cpair.prepare(0) == plain.desc[cpair.FN]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(plain_y, want)
    y = _helper_half(srv, pair.desc, cpair.YA, shape)  # the helper's half on the prefetching half
    written = ~np.isnan(y)
    assert written.any() and not written.all()
    np.testing.assert_array_equal(y[written], want[written])
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep: the caller's whole-layer call, the halves' driver and chunk
    alone = srv.stats["alone"]
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.stats["alone"] == alone


@pytest.mark.parametrize("case", DIRECT, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}s{c[2].get('strides', [1])[0]}")
def test_direct_halves_prefetch(case, quiet_server, monkeypatch):
    """rnpair.DIRECT_AHEAD = 16: fdirect's pair (odd K, a narrow last panel, the residual) equals the one-thread path
    (fdirect.AHEAD's prefetch) and the plain halves bit for bit, the caller alone and the helper's half by hand."""
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 6)
    shape = _out_shape(xs, ws, attrs)
    monkeypatch.setattr(fdirect, "AHEAD", 16)
    want = _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape)
    assert_close(want, _reference(inputs, attrs), np.float32)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    outs = []
    for ahead in (0, 16):
        monkeypatch.setattr(rnpair, "DIRECT_AHEAD", ahead)
        fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
        pair = _pair_of(fn)
        assert pair is not None and pair.desc[rnpair.OP] == rnpair.OP_DIRECT and pair.ahead == ahead
        outs.append(_at(2, fn, inputs, shape))
        assert pair.desc[rnpair.FN] == rnpair.prepare(ahead, pair.wino)  # (the half of both prefetches)
    assert srv.stats["alone"] == 2 and rnpair.prepare(16, pair.wino) != rnpair.prepare(0, pair.wino)
    for got in outs:
        np.testing.assert_array_equal(got, want)
    y = _helper_half(srv, pair.desc, rnpair.YA, shape)  # the helper's half on the prefetching half
    written = ~np.isnan(y)
    assert written.any() and not written.all()
    np.testing.assert_array_equal(y[written], want[written])

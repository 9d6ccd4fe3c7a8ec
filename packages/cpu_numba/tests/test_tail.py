"""The claimed middle of a one-image layer's halves at two threads (issue 11, session 15): ``cpair.TAIL`` (the 1x1
layers of the bound parallel call on ftile's rows tiles, by channels and by pixels, and on its cols tiles) and
``rnpair.TAIL_DIRECT`` (fdirect's shards). Each side runs its fixed bulk, then claims the middle's units one at a
time from one word, the caller from the front and the helper from the back. The output must not depend on who
claimed which: at every split of the middle (the helper 0, some, all of its units), run by hand side by side, it
equals bit for bit the halves without the middle and the one-thread path, and the reference within tolerance."""
from __future__ import annotations

import numpy as np
import pytest
from _conv_layers import _at, _kernel, _layer, _no_tail, _out_shape, _reference
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import conv_serial, cpair, ftile, pairs, rnpair

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the pairs run on the AVX-512 tiles")]

RELU = {"activation": "Relu"}
PADS = {"pads": [1, 1, 1, 1]}
# (x shape, weight shape, attrs, residual, the op and the middle's kind): rows tiles by channels (200 channels: 25
# panels of 8), by pixels (900 pixels: 29 tiles of 32, the last of 4), cols tiles (512 channels: 10 panels of 48
# and one of 32), and 208 channels on 49 pixels by channels (26 panels), no residual, no Relu
POINTWISE = [
    ((1, 64, 15, 15), (200, 64, 1, 1), RELU, True, (cpair.ROWS, cpair.T_CHANNELS)),
    ((1, 256, 30, 30), (64, 256, 1, 1), RELU, True, (cpair.ROWS, cpair.T_PIXELS)),
    ((1, 256, 7, 7), (512, 256, 1, 1), RELU, True, (cpair.COLS, cpair.T_COLS)),
    ((1, 96, 7, 7), (208, 96, 1, 1), {}, False, (cpair.ROWS, cpair.T_CHANNELS)),
]
# fdirect's 3x3/2 (128@14, K = 576) and its stride-1 small map (64@7, with the residual)
DIRECT = [
    ((1, 64, 28, 28), (128, 64, 3, 3), {**PADS, "strides": [2, 2], **RELU}, False, None),
    ((1, 64, 7, 7), (64, 64, 3, 3), {**PADS, **RELU}, True, None),
]


def _pair_in(fn, cls):
    for c in getattr(fn, "__closure__", None) or ():
        try:
            v = c.cell_contents
        except ValueError:  # (a cell not yet filled)
            continue
        if isinstance(v, cls):
            return v
    return None


def _split(half, desc, words, shape, ya, j):
    """The layer's two sides run by hand into a fresh NaN output, the helper first claiming exactly ``j`` of the
    middle's units from the back (the claim word set so that its front is at n - j), then the caller the rest
    from the front. ``words``: the descriptor's (claim word, units) indices."""
    claim, units = words
    n = int(desc[units])
    y = np.full(shape, np.nan, np.float32)
    desc[ya] = y.ctypes.data
    addr = desc.ctypes.data
    desc[claim] = (n << 32) | (n - j)
    half(addr, 1)
    assert desc[claim] & 0xFFFFFFFF == desc[claim] >> 32  # (every unit it was left taken)
    desc[claim] = (n - j) << 32
    half(addr, 0)
    assert desc[claim] & 0xFFFFFFFF == n - j
    return y


@pytest.fixture(scope="module")
def halves():
    """The compiled halves (cpair's, rnpair's), callable from Python."""
    return {"cpair": cpair._build(), "rnpair": rnpair._build()}


@pytest.mark.parametrize("case", POINTWISE, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_tail_pointwise(case, quiet_server, monkeypatch, halves):
    """cpair.TAIL on the bound parallel call's 1x1 pair: the middle's words (its units, kind, start), the sides'
    bulk leaving it out; the layer through the pair (the helper not coming: the caller claims every unit) and at
    every split of the middle by hand equal the halves without the middle and the one-thread path bit for bit,
    within tolerance of the reference; and the helper's bulk alone writes its part only."""
    _no_tail(monkeypatch)
    xs, ws, attrs, res, (op, axis) = case
    inputs = _layer(case, 3)
    shape = _out_shape(xs, ws, attrs)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    plain = _pair_in(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)), cpair.Pair)
    assert plain is not None and plain.desc[cpair.T_N] == 0
    even = _at(2, conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)), inputs, shape)
    assert_close(even, _reference(inputs, attrs), np.float32)
    np.testing.assert_array_equal(even, _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape))  # one thread's
    monkeypatch.setattr(cpair, "TAIL", True)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_in(fn, cpair.Pair)
    d = pair.desc
    n = int(d[cpair.T_N])
    assert d[cpair.OP] == op and d[cpair.T_AXIS] == axis and 2 <= n <= cpair.TAIL_UNITS and pair.follow is None
    s0, s1 = cpair.SIDE0, cpair.SIDE0 + cpair.SIDE_N
    if axis == cpair.T_CHANNELS:  # the bulks: [0, start) and [start + n * step, M) of the channels
        assert d[s0 + cpair.S_C0] == 0 and d[s0 + cpair.S_MC] == d[cpair.T_START]
        assert d[s1 + cpair.S_C0] == d[cpair.T_START] + n * d[cpair.T_STEP] < ws[0]
    elif axis == cpair.T_PIXELS:
        assert d[s0 + cpair.S_NP] == d[cpair.T_START] and d[s1 + cpair.S_P0] == d[cpair.T_START] + n * d[cpair.T_STEP]
    else:  # whole panels a bulk, the middle's panels in pieces
        assert d[s0 + cpair.S_MC] == d[cpair.T_START] and d[s0 + cpair.S_NP] == d[s1 + cpair.S_NP] == 0
        assert d[s1 + cpair.S_C0] == d[cpair.T_START] + n // d[cpair.T_STEP]
    alone = srv.stats["alone"]
    got = _at(2, fn, inputs, shape)  # the helper does not come: the caller's bulk, every unit, the helper's bulk
    assert srv.stats["alone"] == alone + 1 and d[cpair.T_CLAIM] & 0xFFFFFFFF == n
    np.testing.assert_array_equal(got, even)
    for j in range(n + 1):  # the helper claims j units, the caller the rest
        np.testing.assert_array_equal(_split(halves["cpair"], d, (cpair.T_CLAIM, cpair.T_N), shape, cpair.YA, j),
                                      even)
    y = np.full(shape, np.nan, np.float32)  # the helper's bulk alone (every unit claimed): its part only
    d[cpair.YA] = y.ctypes.data
    d[cpair.T_CLAIM] = (n << 32) | n
    halves["cpair"](d.ctypes.data, 1)
    written = ~np.isnan(y)
    assert written.any() and not written.all()
    np.testing.assert_array_equal(y[written], even[written])


@pytest.mark.parametrize("case", DIRECT, ids=["s2", "s1-res"])
def test_tail_direct(case, quiet_server, monkeypatch, halves):
    """rnpair.TAIL_DIRECT: fdirect's pair keeps the shards about its cut for claims (FOLLOW_DIRECT's state none),
    and the layer through the pair and at every split of the middle by hand equals the one-thread path bit for
    bit."""
    xs, ws, attrs, res, _ = case
    inputs = _layer(case, 4)
    shape = _out_shape(xs, ws, attrs)
    want = _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape)
    assert_close(want, _reference(inputs, attrs), np.float32)
    monkeypatch.setattr(rnpair, "TAIL_DIRECT", True)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_in(fn, rnpair.Pair)
    d = pair.desc
    assert d[rnpair.OP] == rnpair.OP_DIRECT and pair.direct is None
    n, a = int(d[rnpair.T_N]), int(d[rnpair.T_START])
    s0, s1 = rnpair.SIDE0, rnpair.SIDE0 + rnpair.SIDE_N
    assert n >= 2 and d[s0 + rnpair.S_T0] == 0 and d[s0 + rnpair.S_T1] == a >= 1
    assert d[s1 + rnpair.S_T0] == a + n < d[s1 + rnpair.S_T1]
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.stats["alone"] == 1
    for j in range(n + 1):
        np.testing.assert_array_equal(_split(halves["rnpair"], d, (rnpair.T_CLAIM, rnpair.T_N), shape, rnpair.YA, j),
                                      want)


def test_tail_split_rules():
    """The middle's sizes: about TAIL_SHARE of the units, centred, at most TAIL_UNITS claims of equal units, each
    bulk at least one unit; none where there is no room."""
    assert cpair._tail_split(25) == (9, 6, 1)  # round(6.25) = 6 panels, one a claim; bulks 9 and 10
    assert cpair._tail_split(98) == (37, 8, 3)  # 25 tiles -> 8 claims of 3 (24); bulks 37 and 37
    assert cpair._tail_split(3) is None
    assert rnpair.direct_tail(11, 6) == (5, 8) and rnpair.direct_tail(8, 4) == (3, 5)
    assert rnpair.direct_tail(2, 1) is None

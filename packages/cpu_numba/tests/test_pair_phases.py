"""A pair's first phase shared by its two halves (issue 11, session 16; docs/numba.md, "ResNet-50's pairs per kind of
layer"): rnpair.PAD_SPLIT (fdirect's zero-padded input filled by both sides, by units of input channels claimed from
one word, each side then waiting until every unit is done). The padded input is the same whoever fills which
channels, so the pair equals the one-thread path bit for bit: the caller alone (the helper 'spinning' but never
coming: it claims every unit), the helper's loop run by hand with the caller having claimed some units or none (the
padded buffer then equal to the caller's own pad, the helper's output rows the one-thread path's); odd channel counts
(units of unequal channels), the residual and Relu. rnpair.DIRECT_ROWS (issue 11, session 18): fdirect's pairs cut by
rows, each side padding its own rows; a direct pair over its residual with either switch."""
from __future__ import annotations

import numpy as np
import pytest
from _conv_layers import (
    _alone_claims_all,
    _at,
    _cells,
    _cpair_of,
    _half_by_hand,
    _helper_half,
    _kernel,
    _no_tail,
    _off_and_on,
    _one_thread,
    _pair_of,
)
from kernelkit.testing import assert_close
from kernelkit_numba import config
from kernelkit_numba.kernels import conv_serial, fdirect, ftile, pairs, rnpair

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the pairs run on the AVX-512 tiles")]

RELU = {"activation": "Relu"}
PADS = {"pads": [1, 1, 1, 1]}
# fdirect's pairs: 3x3/2 of 33 -> 80 channels at 14x14 (33 input channels in 8 units: 4 or 5 each; K = 297) with the
# residual, 3x3/2 of 64 -> 128 at 28x28, 3x3/1 of 64 -> 64 at 7x7 with the residual, and 3x3/2 of 33 -> 80 at 28x28
# (PAD_UNITS 40 there: more units than channels, a unit a channel)
DIRECT = [
    ((1, 33, 14, 14), (80, 33, 3, 3), {**PADS, "strides": [2, 2], **RELU}, True, rnpair.OP_DIRECT),
    ((1, 64, 28, 28), (128, 64, 3, 3), {**PADS, "strides": [2, 2], **RELU}, False, rnpair.OP_DIRECT),
    ((1, 64, 7, 7), (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_DIRECT),
    ((1, 33, 28, 28), (80, 33, 3, 3), {**PADS, "strides": [2, 2]}, False, rnpair.OP_DIRECT),
]


def _padded(pair, x) -> np.ndarray:
    """The pair's padded input buffer (a copy) and the caller's own pad of ``x`` into a fresh one."""
    d = pair.desc
    xp = next(a for a in pair.keep if isinstance(a, np.ndarray) and a.ctypes.data == d[rnpair.XP])
    want = np.full_like(xp, np.nan)
    fdirect.pad_planes(x[0], want, int(d[rnpair.PH]), int(d[rnpair.PW]), int(d[rnpair.P_HP]), int(d[rnpair.P_WP]),
                       0, x.shape[1])
    return xp, want


@pytest.mark.parametrize("case", DIRECT, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}s{c[2].get('strides', [1])[0]}")
def test_pad_split(case, quiet_server, monkeypatch):
    """PAD_SPLIT: the caller alone fills every unit and equals the one-thread path and the caller-padded pair bit for
    bit; the helper's loop by hand, the pad's units all unclaimed or the caller's first j claimed and done, fills the
    rest (the buffer then the caller's own pad exactly) and writes its half's output, the one-thread path's."""
    xs, ws, attrs, res, op = case
    if xs[2] == 28 and xs[1] == 33:
        monkeypatch.setattr(rnpair, "PAD_UNITS", 40)
    inputs, shape, want = _one_thread(case, 7)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(rnpair, "PAD_SPLIT", False)
    plain = _pair_of(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)))
    assert plain is not None and plain.desc[rnpair.P_N] == 0
    np.testing.assert_array_equal(_at(2, conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)), inputs, shape),
                                  want)
    monkeypatch.setattr(rnpair, "PAD_SPLIT", True)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair is not None and pair.desc[rnpair.OP] == op
    units = int(pair.desc[rnpair.P_N])
    assert units == min(rnpair.PAD_UNITS, xs[1])
    alone = srv.stats["alone"]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == alone + 1 and srv.stats["paired"] == 0
    np.testing.assert_array_equal(got, want)
    d = pair.desc
    assert d[rnpair.P_CLAIM] == (units << 32) | units and d[rnpair.P_DONE] == units  # the caller claimed them all
    xp, pad = _padded(pair, inputs[0])
    np.testing.assert_array_equal(xp, pad)
    for j in (0, units // 2, units - 1):  # the caller's first j units claimed and done, the rest the helper's
        c_j = j * xs[1] // units  # the channels the caller's units cover
        plane = xp.size // xs[1]
        xp[c_j * plane:] = np.nan
        d[rnpair.P_CLAIM], d[rnpair.P_DONE] = (units << 32) | j, j
        _half_by_hand(srv, d, rnpair.YA, shape, want)  # its shards' output only
        assert d[rnpair.P_DONE] == units and d[rnpair.P_CLAIM] == (j << 32) | j  # the helper took the rest (the back)
        np.testing.assert_array_equal(xp, pad)


# cpair's 1x1 strided layers (conv_serial.SUBSAMPLE): 64 -> 128 at 28x28 / 2 (rows tiles by channels) with the residual
# and Relu, 33 -> 80 at 29x29 / 2 (33 channels in 8 units; an odd map: 15 x 15), 256 -> 512 at 14x14 / 2 (the cols
# tiles at 7x7) with the residual and Relu
SUB = [
    ((1, 64, 28, 28), (128, 64, 1, 1), {"strides": [2, 2], **RELU}, True, None),
    ((1, 33, 29, 29), (80, 33, 1, 1), {"strides": [2, 2]}, False, None),
    ((1, 256, 14, 14), (512, 256, 1, 1), {"strides": [2, 2], **RELU}, True, None),
]


def _cpair_and_buf(fn):
    cells = _cells(fn)
    return _cpair_of(fn), cells["buf"], cells["sub_in_pair"]


@pytest.mark.parametrize("case", SUB, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_sub_split(case, quiet_server, monkeypatch):
    """cpair.SUB_SPLIT: the caller alone copies every unit and equals the pair whose caller copies before the job bit
    for bit (and the one-thread path and the reference within the fp32 tolerances); the helper's loop by hand, the
    copy's units all unclaimed or the caller's first j claimed and done, copies the rest (the buffer then the NumPy
    copy exactly) and writes its half's output; a refused pair (the helper asleep) copies on the caller."""
    from kernelkit_numba.kernels import cpair

    xs = case[0]
    srv = quiet_server
    inputs, shape, one, (plain, _buf, taken), want, fn, (pair, buf, taken_on) = _off_and_on(
        case, 8, srv, monkeypatch, cpair, "SUB_SPLIT", _cpair_and_buf)
    assert plain is not None and not taken and plain.desc[cpair.U_N] == 0
    d = pair.desc
    units = int(d[cpair.U_N])
    assert taken_on and units == min(cpair.SUB_UNITS, xs[1])
    _alone_claims_all(srv, fn, inputs, shape, want, d, units)
    x = inputs[0]
    copy = np.ascontiguousarray(x[:, :, ::2, ::2])
    np.testing.assert_array_equal(buf, copy)
    for j in (0, units // 2, units - 1):  # the caller's first j units claimed and done, the rest the helper's
        buf[:, j * xs[1] // units:] = np.nan
        d[cpair.U_CLAIM], d[cpair.U_DONE], d[cpair.U_X] = (units << 32) | j, j, x.ctypes.data
        _half_by_hand(srv, d, cpair.YA, shape, want)
        d[cpair.U_X] = 0
        assert d[cpair.U_DONE] == units and d[cpair.U_CLAIM] == (j << 32) | j
        np.testing.assert_array_equal(buf, copy)
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep: the pair refuses, the caller copies and runs the layer alone
    buf[:] = np.nan
    paired = srv.stats["paired"]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["paired"] == paired
    np.testing.assert_array_equal(buf, copy)
    assert_close(got, one, np.float32)


# F(2x2)'s pairs by output channels: 128@14 on the cols-tile products (3 panels of 48), 64@14 on the rows tiles with the
# residual and Relu, 36 -> 64 at 14x14 (36 input channels in 8 units of 4 or 5)
WINO2 = [
    ((1, 128, 14, 14), (128, 128, 3, 3), {**PADS, **RELU}, False, rnpair.OP_WINO2),
    ((1, 64, 14, 14), (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_WINO2),
    ((1, 36, 14, 14), (64, 36, 3, 3), {**PADS}, False, rnpair.OP_WINO2),
]


@pytest.mark.parametrize("case", WINO2, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_wino2_shared(case, quiet_server, monkeypatch):
    """WINO2_SHARED: the caller alone transforms every unit into its v and equals the pair whose sides each transform
    the whole input bit for bit (and the one-thread path and the reference within the fp32 tolerances); the helper's
    loop by hand, the transform's units all unclaimed or the caller's first j claimed and done, transforms the rest
    into the caller's v and writes its panels' output, bit for bit."""
    xs, op = case[0], case[4]
    srv = quiet_server
    inputs, shape, one, plain, want, fn, pair = _off_and_on(case, 9, srv, monkeypatch, rnpair, "WINO2_SHARED", _pair_of)
    assert plain is not None and plain.desc[rnpair.OP] == op and plain.desc[rnpair.P_N] == 0
    d = pair.desc
    units = int(d[rnpair.P_N])
    assert units == min(rnpair.PAD_UNITS, xs[1]) and pair.sizes[1][0] == 1  # (the helper's own v unused)
    got = _at(2, fn, inputs, shape)
    np.testing.assert_array_equal(got, want)
    assert d[rnpair.P_CLAIM] == (units << 32) | units and d[rnpair.P_DONE] == units
    nt = int(d[rnpair.TH] * d[rnpair.TW])
    v = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * int(16 * d[rnpair.LV])).from_address(
        int(d[rnpair.SIDE0 + rnpair.S_V]))).reshape(16, -1)
    full = v.copy()
    for j in (0, units // 2, units - 1):  # the caller's first j units claimed and done, the rest the helper's
        v[:, j * xs[1] // units * nt:xs[1] * nt] = np.nan
        d[rnpair.P_CLAIM], d[rnpair.P_DONE] = (units << 32) | j, j
        _half_by_hand(srv, d, rnpair.YA, shape, want)
        assert d[rnpair.P_DONE] == units and d[rnpair.P_CLAIM] == (j << 32) | j
        np.testing.assert_array_equal(v[:, :xs[1] * nt], full[:, :xs[1] * nt])


# fdirect's pairs cut by output rows (DIRECT_ROWS): 3x3/2 of 64 -> 128 at 28x28 (3 panels: 48, 48, 32; 14 output
# rows), of 33 -> 80 at 28x28 with the residual and Relu, of 32 -> 64 at 56x56 (28 rows); 3x3/1 of 64 -> 64 at 7x7
# with the residual (7 rows: odd, keeps the panel-major cut)
ROWS = [
    ((1, 64, 28, 28), (128, 64, 3, 3), {**PADS, "strides": [2, 2], **RELU}, False, rnpair.OP_DIRECT),
    ((1, 33, 28, 28), (80, 33, 3, 3), {**PADS, "strides": [2, 2], **RELU}, True, rnpair.OP_DIRECT),
    ((1, 32, 56, 56), (64, 32, 3, 3), {**PADS, "strides": [2, 2]}, False, rnpair.OP_DIRECT),
]


@pytest.mark.parametrize("case", ROWS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}{'z' if c[3] else ''}")
def test_direct_rows(case, quiet_server, monkeypatch):
    """DIRECT_ROWS: the pair in two blocks of output rows, each side every panel on its rows after padding the input
    rows they read into its own buffer: both sides on the caller equal the one-thread path bit for bit; the helper's
    half by hand (its buffer NaN'd first) writes exactly the second block's rows of every channel, bit for bit, and
    pads exactly the padded rows they read (pad_planes' floats there, its buffer's other rows untouched)."""
    _no_tail(monkeypatch)
    xs, ws, attrs, res, op = case
    inputs, shape, want = _one_thread(case, 11)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(rnpair, "DIRECT_ROWS", True)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair is not None and pair.desc[rnpair.OP] == op
    d = pair.desc
    assert d[rnpair.R_KH] == 3 and d[rnpair.RB] == 2 and d[rnpair.P_N] == 0 and pair.direct is None
    assert [(d[rnpair.SIDE0 + s * rnpair.SIDE_N + rnpair.S_T0], d[rnpair.SIDE0 + s * rnpair.SIDE_N + rnpair.S_T1])
            for s in (0, 1)] == [(0, 1), (1, 2)]
    got = _at(2, fn, inputs, shape)
    np.testing.assert_array_equal(got, want)
    hp, wp, oh = int(d[rnpair.P_HP]), int(d[rnpair.P_WP]), shape[2]
    side1 = next(a for a in pair.keep if isinstance(a, np.ndarray)
                 and a.ctypes.data == d[rnpair.SIDE0 + rnpair.SIDE_N + rnpair.S_XP]).reshape(xs[1], hp, wp)
    pad = np.full(xs[1] * hp * wp, np.nan, np.float32)
    fdirect.pad_planes(inputs[0][0], pad, 1, 1, hp, wp, 0, xs[1])
    pad = pad.reshape(xs[1], hp, wp)
    side1[:] = np.nan
    y = _helper_half(srv, d, rnpair.YA, shape)
    written = ~np.isnan(y)
    assert written[:, :, oh // 2:].all() and not written[:, :, :oh // 2].any()
    np.testing.assert_array_equal(y[written], want[written])
    r0 = oh // 2 * 2  # the padded rows the second block reads: [r0, hp)
    np.testing.assert_array_equal(side1[:, r0:], pad[:, r0:])
    assert np.isnan(side1[:, :r0]).all()
    monkeypatch.setattr(rnpair, "DIRECT_ROWS_MIN_OH", oh + 2)  # fewer rows: the panel-major cut
    plain = _pair_of(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)))
    assert plain.desc[rnpair.R_KH] == 0 and plain.direct is not None


def test_direct_rows_odd(quiet_server, monkeypatch):
    """DIRECT_ROWS keeps the panel-major cut on a map of an odd number of output rows (3x3/1 64@7 with the residual),
    bit for bit the one-thread path."""
    case = ((1, 64, 7, 7), (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_DIRECT)
    xs, ws, attrs, res, _op = case
    inputs, shape, want = _one_thread(case, 12)
    quiet_server.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(rnpair, "DIRECT_ROWS", True)
    monkeypatch.setattr(rnpair, "DIRECT_ROWS_MIN_OH", 2)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    assert _pair_of(fn).desc[rnpair.R_KH] == 0
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)


@pytest.mark.parametrize("switch", ["DIRECT_ROWS", "PAD_SPLIT"])
def test_direct_over_residual(switch, quiet_server, monkeypatch):
    """A direct pair whose output is its residual's memory (3x3/2 of 33 -> 64 to 14 x 13: rows of 13 pixels, whose last
    7-pixel tile overlaps the one before and reads the residual where that one has written) takes a copy of the
    residual first with DIRECT_ROWS or PAD_SPLIT on (pairs with no caller's pad), as the panel cut does: the one-thread
    path's output bit for bit (without the copy the overlapped pixels add the residual twice)."""
    case = ((1, 33, 28, 26), (64, 33, 3, 3), {**PADS, "strides": [2, 2]}, True, rnpair.OP_DIRECT)
    xs, ws, attrs, res, op = case
    inputs, shape, want = _one_thread(case, 13)
    quiet_server.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(rnpair, switch, True)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair is not None and pair.desc[rnpair.OP] == op
    assert (pair.desc[rnpair.R_KH] > 0) == (switch == "DIRECT_ROWS") and (pair.desc[rnpair.P_N] > 0) == (
        switch == "PAD_SPLIT")
    z = inputs[3].copy()
    with config.num_threads(2):
        got = fn(*inputs[:3], z, out=z)
    assert got is z or np.shares_memory(got, z)
    np.testing.assert_array_equal(got, want)

"""The stem's padded phases filled by both sides of its pair (issue 11, session 17; docs/numba.md, "MobileNetV2's
projections cut by their input channels at two threads"): cpair.STEM_SPLIT (a one-image implicit-GEMM stem's
zero-padded column phases filled in units of an input channel's band of padded rows, claimed from one word by both
sides, each side then waiting until every unit is done). The phases are the same whoever fills which unit, so the
pair equals the one-thread path bit for bit: the caller alone (the helper never coming: it claims every unit), the
helper's loop run by hand with the caller having claimed some units or none (the phases then ftile.phases_padded's
exactly, the helper's output channels the one-thread path's), a refused pair (the caller fills them); odd maps, the
residual and Relu."""
from __future__ import annotations

import numpy as np
import pytest
from _conv_layers import _alone_claims_all, _at, _cpair_of, _half_by_hand, _off_and_on
from kernelkit_numba.kernels import cpair, ftile, pairs

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != cpair.KIND or not cpair.enabled(),
                                 reason="the pairs run on the AVX-512 tiles")]

PADS = {"pads": [1, 1, 1, 1], "strides": [2, 2]}
# MobileNetV2's stem (3 -> 32, 3x3/2 at 224x224: 3 channels of 4 bands), 3 -> 32 at 64x64 with Relu and the residual,
# 3 -> 24 at 63x65 (three 8-channel panels: 16 against 8; unequal bands of an odd number of padded rows)
STEMS = [
    ((1, 3, 224, 224), (32, 3, 3, 3), dict(PADS), False, None),
    ((1, 3, 64, 64), (32, 3, 3, 3), {**PADS, "activation": "Relu"}, True, None),
    ((1, 3, 63, 65), (24, 3, 3, 3), dict(PADS), False, None),
]


def _phases(pair, x):
    """The pair's phases buffer (the bound call's own) and ftile.phases_padded of ``x`` into a fresh one, (stride,
    channels, padded rows, columns) shaped."""
    d = pair.desc
    xpp = next(a for a in pair.keep if isinstance(a, np.ndarray) and a.ctypes.data == d[cpair.XPP])
    want = np.full_like(xpp, np.nan)
    s, hp, qp = int(d[cpair.STRIDE]), int(d[cpair.HP]), int(d[cpair.QP])
    ftile.phases_padded(x[0], want, s, int(d[cpair.PH]), int(d[cpair.PL]), hp, qp, 0, x.shape[1])
    shape = (s, x.shape[1], hp, qp)
    return xpp.reshape(shape), want.reshape(shape)


@pytest.mark.parametrize("case", STEMS, ids=lambda c: f"{c[0][1]}x{c[0][2]}x{c[0][3]}-{c[1][0]}")
def test_stem_split(case, quiet_server, monkeypatch):
    """STEM_SPLIT: the caller alone fills every unit and equals the pair whose caller fills the phases before the job
    bit for bit (and the one-thread path and the reference within the fp32 tolerances); the helper's loop by hand, the
    units all unclaimed or the caller's first j claimed and done, fills the rest (the phases then phases_padded's
    exactly) and writes its half's output; a refused pair (the helper asleep) fills them on the caller."""
    xs = case[0]
    srv = quiet_server
    inputs, shape, one, plain, want, fn, pair = _off_and_on(case, 11, srv, monkeypatch, cpair, "STEM_SPLIT", _cpair_of)
    assert plain is not None and plain.desc[cpair.OP] == cpair.IMPLICIT and plain.desc[cpair.U_N] == 0
    d = pair.desc
    units, bands = int(d[cpair.U_N]), int(d[cpair.U_H])
    assert units == xs[1] * bands and bands == max(1, cpair.STEM_UNITS // xs[1])
    _alone_claims_all(srv, fn, inputs, shape, want, d, units)
    x = inputs[0]
    xpp, phases = _phases(pair, x)
    np.testing.assert_array_equal(xpp, phases)
    hp = xpp.shape[2]
    for j in (0, units // 2, units - 1):  # the caller's first j units claimed and done, the rest the helper's
        for u in range(j, units):
            c, band = divmod(u, bands)
            xpp[:, c, band * hp // bands:(band + 1) * hp // bands] = np.nan
        assert np.isnan(xpp).any() or j == units
        d[cpair.U_CLAIM], d[cpair.U_DONE], d[cpair.U_X] = (units << 32) | j, j, x[0].ctypes.data
        _half_by_hand(srv, d, cpair.YA, shape, want)
        d[cpair.U_X] = 0
        assert d[cpair.U_DONE] == units and d[cpair.U_CLAIM] == (j << 32) | j  # the helper took the rest (the back)
        np.testing.assert_array_equal(xpp, phases)
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep: the pair refuses, the caller fills the phases and runs it alone
    xpp[:] = np.nan
    paired = srv.stats["paired"]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["paired"] == paired
    np.testing.assert_array_equal(xpp, phases)
    np.testing.assert_array_equal(got, one)


def test_stem_split_units():
    """The units: STEM_UNITS // channels bands a channel (at least one, at most the padded rows); off, a batch by
    images or no phases: not taken."""
    class _P:
        whole = False

        def __init__(self):
            self.desc = np.zeros(cpair.NDESC, np.int64)

    p = _P()
    assert not cpair.stem_split(p, (1, 3, 224, 224), (2, 1, 1, 226, 113))  # (off by default)
    old = cpair.STEM_SPLIT
    try:
        cpair.STEM_SPLIT = True
        assert cpair.stem_split(p, (1, 3, 224, 224), (2, 1, 1, 226, 113))
        assert (p.desc[cpair.U_N], p.desc[cpair.U_H], p.desc[cpair.C], p.desc[cpair.HP]) == (12, 4, 3, 226)
        assert cpair.stem_split(p, (1, 13, 9, 9), (2, 1, 1, 11, 5)) and p.desc[cpair.U_N] == 13  # one band a channel
        assert cpair.stem_split(p, (1, 1, 4, 4), (2, 1, 1, 3, 3)) and p.desc[cpair.U_H] == 3  # at most the rows
        p.whole = True
        assert not cpair.stem_split(p, (2, 3, 224, 224), (2, 1, 1, 226, 113))
        p.whole = False
        assert not cpair.stem_split(None, (1, 3, 224, 224), (2, 1, 1, 226, 113))
    finally:
        cpair.STEM_SPLIT = old

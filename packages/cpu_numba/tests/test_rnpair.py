"""The ResNets' convolutions of a batch-1 image at two threads as two halves on fpair's helper
(kernels/rnpair.py): F(4x4, 3x3) by tiles, F(2x2, 3x3) by output channels (products on ftile's rows and
cols tiles) and fdirect's direct convolutions (strides 1 and 2); the caller alone, the helper's half run
by hand, a busy slot, the back-off, the switch, and a small residual block through a two-thread session.
The direct halves are the one-thread driver's shards, so they equal the one-thread path bit for bit; the
Winograd halves (their products on ftile where the one-thread path may take BLAS) are checked against the
one-thread path and the reference within the fp32 tolerances, and the helper's copy of a half bit for bit
against the caller's."""
from __future__ import annotations

import time

import numpy as np
import pytest
from _conv_layers import _at, _cpair_of, _helper_half, _kernel, _layer, _no_tail, _out_shape, _pair_of, _reference, _ro
from kernelkit import Session
from kernelkit.builder import GraphBuilder
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba import shards
from kernelkit_numba.kernels import conv_serial, fpair, ftile, pairs, rnpair, winograd

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the ResNet pairs run on the AVX-512 tiles")]

RELU = {"activation": "Relu"}
PADS = {"pads": [1, 1, 1, 1]}
# (x shape, weight shape, attrs, residual, op): F(4x4) by tiles on the rows-tile products (64@28, K = 64,
# with the residual), F(2x2) by output channels on the cols-tile products (128@14: 3 panels of 48) and on
# the rows tiles (64@14, with the residual), fdirect's 3x3/2 (K = 576) and its stride-1 small map (64@7,
# with the residual)
LAYERS = [
    ((1, 64, 28, 28), (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_WINO),
    ((1, 128, 14, 14), (128, 128, 3, 3), {**PADS, **RELU}, False, rnpair.OP_WINO2),
    ((1, 64, 14, 14), (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_WINO2),
    ((1, 64, 28, 28), (128, 64, 3, 3), {**PADS, "strides": [2, 2], **RELU}, False, rnpair.OP_DIRECT),
    ((1, 64, 7, 7), (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_DIRECT),
]


@pytest.mark.parametrize("case", LAYERS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}s{c[2].get('strides', [1])[0]}")
def test_caller_alone_and_helper_half(case, quiet_server):
    """The helper 'spinning' but never coming: the caller claims the second half; the helper's loop run
    by hand serves a republished job's second half, bit for bit the caller's; the result equals the
    one-thread path (bit for bit for the direct convolution) and the reference."""
    _check_halves(case, quiet_server)


def test_dynamic_chunks_helper_half(quiet_server, monkeypatch):
    """DYNAMIC: the F(4x4) tiles in chunks claimed from one word (4 chunks of the 49 tiles here): the caller
    alone claims every chunk; the helper's loop run by hand after the caller took all but two runs the last
    two from the back (their tiles' rows, nothing else), bit for bit the caller's."""
    monkeypatch.setattr(rnpair, "DYNAMIC", True)
    monkeypatch.setattr(rnpair, "DYN_MIN_TILES", 12)
    assert _check_halves(LAYERS[0], quiet_server) == 4


def _check_halves(case, srv):
    xs, ws, attrs, res, op = case
    inputs = _layer(case)
    shape = _out_shape(xs, ws, attrs)
    one = _kernel(xs, ws, attrs, 1, res)
    want = _at(1, one.compute, inputs, shape)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair is not None and pair.desc[rnpair.OP] == op
    srv.ctl[pairs.AWAKE] = 1
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == 1 and srv.stats["paired"] == 0
    assert srv.ctl[pairs.STATE] == 1 * 4 + pairs.TAKEN and srv.ctl[pairs.SLOT] == 0
    assert not np.isnan(got).any()
    assert_close(got, _reference(inputs, attrs), np.float32)
    if op == rnpair.OP_DIRECT:
        np.testing.assert_array_equal(got, want)
    else:
        assert_close(got, want, np.float32)
    chunks = int(pair.desc[rnpair.DYN])
    if chunks:  # claimed chunks: the caller claimed every one from the front (its side 1 found none left)
        assert pair.desc[rnpair.CLAIM] == (chunks << 32) | chunks
        pair.desc[rnpair.CLAIM] = (chunks << 32) | (chunks - 2)  # the caller took all but the last two
    y = _helper_half(srv, pair.desc, rnpair.YA, shape)
    assert srv.ctl[pairs.STATE] == 9 * 4 + pairs.DONE
    written = ~np.isnan(y)
    assert written.any() and not written.all()  # the second half only
    np.testing.assert_array_equal(y[written], got[written])
    if chunks:  # the helper claimed the last two chunks from the back: their tiles' output rows, nothing else
        nt, tw = int(pair.desc[rnpair.TH] * pair.desc[rnpair.TW]), int(pair.desc[rnpair.TW])
        assert pair.desc[rnpair.CLAIM] == ((chunks - 2) << 32) | (chunks - 2)
        first = (chunks - 2) * nt // chunks  # the first tile of the helper's chunks
        rows = np.flatnonzero(written.any(axis=(0, 1, 3)))
        assert rows.min() == first // tw * 4 and rows.max() == shape[2] - 1
        assert written[..., (first // tw + 1) * 4:, :].all() and not written[..., :first // tw * 4, :].any()
    return chunks


def test_dynamic_chunks_caller_alone(quiet_server, monkeypatch):
    """DYNAMIC on an F(4x4) layer: the chunks (DYN_CHUNKS, each of DYN_MIN_TILES tiles or more); a helper that
    never claims the job leaves every chunk to the caller's side, which equals the static halves bit for bit
    (the same tiles' products in other blocks) and the one-thread path within the fp32 tolerances; False: the
    static halves."""
    case = LAYERS[0]
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 2)
    shape = _out_shape(xs, ws, attrs)
    monkeypatch.setattr(rnpair, "DYNAMIC", True)
    monkeypatch.setattr(rnpair, "DYN_CHUNKS", 8)
    monkeypatch.setattr(rnpair, "DYN_MIN_TILES", 12)
    assert rnpair.dyn_chunks(196, 98) == 8 and rnpair.dyn_chunks(49, 25) == 4 and rnpair.dyn_chunks(16, 8) == 2
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair.desc[rnpair.DYN] == 4
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == 1 and pair.desc[rnpair.CLAIM] == (4 << 32) | 4
    monkeypatch.setattr(rnpair, "DYNAMIC", False)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    assert _pair_of(fn).desc[rnpair.DYN] == 0
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), got)
    assert_close(got, _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape), np.float32)


def test_balanced_cut(quiet_server, monkeypatch):
    """BALANCE on an F(4x4) layer (49 tiles, 64@28): the cut moves toward the one at which both sides end
    together (a helper that takes twice the caller's time a tile and starts late: fewer tiles for it), by
    BALANCE_GAIN and within BALANCE_RANGE, and stays where the helper came after the caller's half; the output
    at a moved cut equals the even cut's bit for bit (session 14: winograd's ordered input transform) and the
    reference within the fp32 tolerances, the caller alone and the helper's half run by hand
    (its tiles' rows only, bit for bit the caller's); the pairs' trace keeps the call's stamps."""
    case = LAYERS[0]
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 4)
    shape = _out_shape(xs, ws, attrs)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    even = _at(2, conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)), inputs, shape)
    assert _pair_of(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))).balance is None
    monkeypatch.setattr(rnpair, "BALANCE", True)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair.balance[:4] == [25.0, 17, 32, 49] and pair.desc[rnpair.SIDE0 + rnpair.S_T1] == 25
    ctl = srv.ctl
    ctl[fpair.OWN], ctl[pairs.PUBLISHED], ctl[pairs.CLAIMED_AT], ctl[pairs.FINISHED_AT] = 2500, 0, 200, 200 + 4800
    # caller 100 a tile, helper 200 a tile starting at 200: both end together at (200 + 49 * 200) / 300 = 33.3
    assert rnpair.rebalance(pair, ctl) == round(25 + 0.25 * (10000 / 300 - 25))
    for _ in range(20):  # the same rates at every cut: it settles at the range's end
        nc = int(pair.desc[rnpair.SIDE0 + rnpair.S_T1])
        ctl[fpair.OWN], ctl[pairs.FINISHED_AT] = 100 * nc, 200 + 200 * (49 - nc)
        rnpair.rebalance(pair, ctl)
    assert pair.desc[rnpair.SIDE0 + rnpair.S_T1] == 32 == pair.desc[rnpair.SIDE0 + rnpair.SIDE_N + rnpair.S_T0]
    ctl[pairs.CLAIMED_AT] = 2600  # the helper came after the caller's half: left as it is
    assert rnpair.rebalance(pair, ctl) == 32
    for side in range(2):
        base = rnpair.SIDE0 + side * rnpair.SIDE_N
        n = int(pair.desc[base + rnpair.S_T1] - pair.desc[base + rnpair.S_T0])
        assert pair.desc[base + rnpair.S_BLOCKS] == winograd.tile_blocks(n, 64, 64)
    rnpair.set_cut(pair.desc, 18, 49, 64, 64)  # the helper's side its largest (31 tiles)
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == 2 and not np.isnan(got).any()
    np.testing.assert_array_equal(got, even)
    assert_close(got, _reference(inputs, attrs), np.float32)
    trace = []
    monkeypatch.setattr(pairs, "TRACE", trace)
    y = _helper_half(srv, pair.desc, rnpair.YA, shape)
    written = ~np.isnan(y)
    rows = np.flatnonzero(written.any(axis=(0, 1, 3)))
    assert rows.min() == 18 // 7 * 4 and rows.max() == shape[2] - 1  # 7 tiles a row: tile 18 starts in row 2
    np.testing.assert_array_equal(y[written], got[written])
    assert srv.ctl[pairs.FINISHED_AT] > srv.ctl[pairs.CLAIMED_AT] > 0
    srv.result(1, *rnpair.rule())
    assert len(trace) == 1 and trace[0][1] == 1
    assert trace[0][5] == srv.ctl[pairs.FINISHED_AT] - srv.ctl[pairs.CLAIMED_AT]


def test_follow_cut(quiet_server, monkeypatch):
    """FOLLOW (with BALANCE): the cut moves by FOLLOW_GAIN of the tiles that even the sides' ends, at most FOLLOW_STEP
    of the tiles a call (at least one), not within one tile's time, never past BALANCE_RANGE, and holds where the
    helper came after the caller's half; the output is bit for bit the even cut's at every cut (each side its own
    run of tiles in its own blocks) on a 64@56 layer (196 tiles) and a 64@28 one (49), and the helper's half run by
    hand at a moved cut is bit for bit the caller's."""
    monkeypatch.setattr(rnpair, "BALANCE", True)
    monkeypatch.setattr(rnpair, "FOLLOW", True)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    big = None
    for xs, cuts in (((1, 64, 56, 56), (68, 75, 97, 98, 99, 113, 128)), ((1, 64, 28, 28), (17, 20, 24, 31, 32))):
        case = (xs, (64, 64, 3, 3), {**PADS, **RELU}, True, rnpair.OP_WINO)
        inputs = _layer(case, 5)
        shape = _out_shape(xs, case[1], case[2])
        fn = conv_serial.bound_compute(_kernel(xs, case[1], case[2], 2, True))
        pair = _pair_of(fn)
        big = big or pair
        nt = (xs[2] // 4) * (xs[3] // 4)
        assert pair.balance[1:4] == [min(cuts), max(cuts), nt]  # BALANCE_RANGE 0.15 either side of the middle
        even = _at(2, fn, inputs, shape)
        assert_close(even, _reference(inputs, case[2]), np.float32)
        for cut in cuts:
            rnpair.set_cut(pair.desc, cut, nt, 64, 64)
            np.testing.assert_array_equal(_at(2, fn, inputs, shape), even)
        y = _helper_half(srv, pair.desc, rnpair.YA, shape)  # the helper's half (tiles [cuts[-1], nt)) by hand
        written = ~np.isnan(y)
        assert written.any() and not written.all()
        np.testing.assert_array_equal(y[written], even[written])
    # the moves, on the 64@56 pair from the even cut (98 of 196); cycles: each side 100 a tile
    pair = big
    pair.balance[0] = 98.0
    rnpair.set_cut(pair.desc, 98, 196, 64, 64)
    ctl = srv.ctl

    def call(own, start, helper):
        ctl[fpair.OWN], ctl[pairs.PUBLISHED], ctl[pairs.CLAIMED_AT] = own, 0, start
        ctl[pairs.FINISHED_AT] = start + helper
        return rnpair.rebalance(pair, ctl)

    assert call(9800, 0, 9890) == 98  # within one tile's time: held
    assert call(9800, 0, 9800 + 800) == 100  # 4 tiles late (2 x 4 x 100 cycles): half of the 4 tiles that even them
    assert call(9800, 0, 9800 + 20000) == 104  # far late: FOLLOW_STEP x 196 = 3.92 tiles a call at most
    assert pair.desc[rnpair.SIDE0 + rnpair.S_T1] == 104 == pair.desc[rnpair.SIDE0 + rnpair.SIDE_N + rnpair.S_T0]
    for _ in range(20):
        call(9800, 0, 9800 + 20000)
    assert pair.desc[rnpair.SIDE0 + rnpair.S_T1] == 128  # held at the range's end
    for _ in range(20):  # the caller the slower: to the other end
        call(9800 + 20000, 0, 9800)
    assert pair.desc[rnpair.SIDE0 + rnpair.S_T1] == 68
    assert call(1000, 2000, 5000) == 68  # the helper came after the caller's half: held


def test_busy_slot_asleep_back_off_and_pool(quiet_server, monkeypatch):
    """A held slot: the general path (no job); the helper asleep or backed off: both halves on the
    caller, no job; the pool's worker spinning: the general path; a one-thread budget: the general path."""
    case = LAYERS[3]  # fdirect's 3x3/2: the general path's result bit for bit
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 1)
    shape = _out_shape(xs, ws, attrs)
    want = _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    srv.ctl[pairs.SLOT] = 1
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.ctl[pairs.JOB] == 0 and srv.stats["alone"] == 0
    srv.ctl[pairs.SLOT] = 0
    srv.ctl[pairs.AWAKE] = 0  # asleep: both halves on the caller
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.ctl[pairs.JOB] == 0
    srv.ctl[pairs.AWAKE] = 1
    srv.until = time.perf_counter() + 60  # backed off
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.ctl[pairs.JOB] == 0
    srv.until = 0.0
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: True)
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    np.testing.assert_array_equal(_at(1, fn, inputs, shape), want)
    assert srv.ctl[pairs.JOB] == 0
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: False)
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.ctl[pairs.JOB] == 1


def test_switch_and_sizes(monkeypatch):
    """No pair with rnpair.ON off, for batch 2, or for a 3x3 layer of a map under WINO4_MIN_PIXELS that
    fdirect does not take (48 channels)."""
    xs, ws, attrs, res, _op = LAYERS[0]

    def pair_of(xs, ws):
        return _pair_of(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, False)))

    assert pair_of(xs, ws) is not None
    assert pair_of((2,) + xs[1:], ws) is None
    assert pair_of((1, 48, 12, 12), (48, 48, 3, 3)) is None
    monkeypatch.setattr(rnpair, "ON", False)
    assert pair_of(xs, ws) is None


def _block_model(rng):
    """A ResNet basic block at 64@28 (two 3x3 layers, the residual) and a 3x3/2 layer to 128@14, and its
    input."""
    g = GraphBuilder("block")
    x = g.input("x", (1, 64, 28, 28))

    def conv(t, m, c, **attrs):
        w = g.constant((rng.standard_normal((m, c, 3, 3)) * (0.5 / np.sqrt(c * 9))).astype(np.float32))
        b = g.constant(rng.standard_normal(m).astype(np.float32) * np.float32(0.1))
        return g.op("Conv", t, w, b, pads=[1, 1, 1, 1], **attrs)

    a = g.op("Relu", conv(x, 64, 64))
    r = g.op("Relu", g.op("Add", conv(a, 64, 64), x))
    g.output(g.op("Relu", conv(r, 128, 64, strides=[2, 2])))
    return g.build(), {"x": rng.standard_normal((1, 64, 28, 28)).astype(np.float32)}


def test_block_through_a_two_thread_session(monkeypatch, session_pair_calls):
    """The block in a two-thread session runs its three layers as pairs on fpair's helper thread (no
    pool job) and equals the reference and the one-thread run within the fp32 tolerances on every run."""
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: False)  # (other tests' pool workers)
    rng = np.random.default_rng(3)
    model, feeds = _block_model(rng)
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    one = Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    tried, jobs = session_pair_calls(sess, feeds, want, one, 15)
    assert tried >= 15 and jobs == 0


def test_one_stall_is_a_hiccup(quiet_server):
    """rnpair's stall rule (HICCUP_S, the pool's STALL_PAIR_S): one stall counts and does not back off, a
    second within HICCUP_S does; the default rule (fpair's, cpair's) backs off at the first."""
    srv = quiet_server
    srv.ctl[pairs.WAITED] = srv.stall + 1
    srv.ctl[fpair.OWN] = 0
    srv.result(1, False, rnpair.HICCUP_S)
    assert srv.stats["stalls"] == 1 and srv.stats["backoffs"] == 0 and srv.until == 0.0
    srv.result(1, False, rnpair.HICCUP_S)
    assert srv.stats["stalls"] == 2 and srv.stats["backoffs"] == 1 and srv.until > time.perf_counter()
    srv.until = 0.0
    srv._stalls = [time.perf_counter() - 2 * rnpair.HICCUP_S]  # the one before, longer ago than HICCUP_S
    srv.result(1, False, rnpair.HICCUP_S)
    assert srv.stats["stalls"] == 3 and srv.stats["backoffs"] == 1 and srv.until == 0.0
    srv.result(1)
    assert srv.stats["backoffs"] == 2 and srv.stats["stall_backoffs"] == 2


def test_hiccups_in_a_window(quiet_server, monkeypatch):
    """rnpair.HICCUPS = 3 (its rule()): two stalls within HICCUP_S are hiccups, the third backs off; a stall older than
    the window drops out of the count; with no window (fpair's rule) the first stall still backs off."""
    monkeypatch.setattr(rnpair, "HICCUPS", 3)
    srv = quiet_server
    srv.ctl[pairs.WAITED] = srv.stall + 1
    srv.ctl[fpair.OWN] = 0
    for stalls in (1, 2):
        srv.result(1, *rnpair.rule())
        assert srv.stats["stalls"] == stalls and srv.stats["backoffs"] == 0 and srv.until == 0.0
    srv.result(1, *rnpair.rule())
    assert srv.stats["stalls"] == 3 and srv.stats["backoffs"] == 1 and srv.until > time.perf_counter()
    srv.until = 0.0
    old = time.perf_counter() - 2 * rnpair.HICCUP_S
    srv._stalls = [old, old]  # both before, longer ago than HICCUP_S
    srv.result(1, *rnpair.rule())
    srv.result(1, *rnpair.rule())
    assert srv.stats["stalls"] == 5 and srv.stats["backoffs"] == 1 and srv.until == 0.0
    srv.ctl[pairs.WAITED] = srv.stall  # not past STALL_S: no stall, the count stays
    srv.result(1, *rnpair.rule())
    assert srv.stats["stalls"] == 5 and srv.stats["backoffs"] == 1
    srv.ctl[pairs.WAITED] = srv.stall + 1
    srv.result(1, *rnpair.rule())
    assert srv.stats["stalls"] == 6 and srv.stats["backoffs"] == 2 and srv.until > time.perf_counter()
    srv.until = 0.0
    srv.result(1)
    assert srv.stats["backoffs"] == 3 and srv.stats["stall_backoffs"] == 3


def test_hiccup_back_off_of_fixed_length(quiet_server, monkeypatch):
    """rnpair.HICCUP_BACKOFF_S: a back-off the hiccup rule fires lasts that long however many came before
    (the doubling state untouched), and the pool's that follows it (rnpair.follow) too; a back-off of the
    other signs (MISSES) still doubles."""
    monkeypatch.setattr(rnpair, "HICCUP_BACKOFF_S", 0.03)
    calls = []
    monkeypatch.setattr(shards.POOL, "_back_off", lambda why, seconds=0.0: calls.append(seconds))
    srv = quiet_server
    srv.ctl[pairs.WAITED] = srv.stall + 1
    srv.ctl[fpair.OWN] = 0
    for backoffs in (1, 2, 3):
        before = srv.stats["backoffs"]
        srv._stalls = []  # (the stall before, long ago)
        t0 = time.perf_counter()
        srv.result(1, *rnpair.rule())
        srv.result(1, *rnpair.rule())
        t1 = time.perf_counter()
        rnpair.follow(srv, before)
        assert srv.stats["backoffs"] == backoffs and srv._backoff == pairs.MIN_BACKOFF_S
        assert t0 + 0.03 <= srv.until <= t1 + 0.03 and calls == [0.03] * backoffs
    for _ in range(pairs.MISSES):  # then the helper's misses: the doubling back-off, the pool's of its own
        srv.result(2)
    assert srv.stats["backoffs"] == 4 and srv.fixed == 0.0 and srv._backoff == 2 * pairs.MIN_BACKOFF_S
    rnpair.follow(srv, 3)
    assert calls[-1] == 0.0


def test_pool_back_off_of_fixed_length():
    """ShardPool._back_off with ``seconds``: jobs run alone that long, the doubling state as it was; without,
    it doubles from there as before."""
    pool = shards.ShardPool(spin_s=0.0)
    pool.FREE_CORES = 0.0
    t0 = time.perf_counter()
    pool._back_off("test", 0.02)
    assert pool._backoff == pool.MIN_BACKOFF_S and t0 + 0.02 <= pool._serial_until <= time.perf_counter() + 0.02
    assert pool.backed_off() and pool.stats["backoffs"] == 1
    pool._back_off("test")
    assert pool._backoff == 2 * pool.MIN_BACKOFF_S and pool.stats["backoffs"] == 2


def test_chunk_stall_rule(quiet_server):
    """With claimed chunks a stall is a wait past STALL_S plus one of the caller's chunks (its own time over
    the chunks it ran), with HICCUP_S's rule on top; the static halves keep the server's rule (None)."""
    srv = quiet_server
    srv.stall = 1000
    desc = np.zeros(rnpair.NDESC, np.int64)
    assert rnpair.chunk_stall(srv, desc) is None
    desc[rnpair.DYN], desc[rnpair.CLAIM] = 8, (5 << 32) | 5  # the caller ran 5 chunks in 5000 cycles
    srv.ctl[fpair.OWN] = 5000
    srv.ctl[pairs.WAITED] = 1900  # past STALL_S, not past STALL_S plus a chunk: no stall
    assert rnpair.chunk_stall(srv, desc) is False
    srv.result(1, False, rnpair.HICCUP_S, False)
    srv.result(1, False, rnpair.HICCUP_S, False)
    assert srv.stats["stalls"] == 0 and srv.stats["backoffs"] == 0
    srv.ctl[pairs.WAITED] = 2001
    assert rnpair.chunk_stall(srv, desc) is True
    srv.result(1, False, rnpair.HICCUP_S, True)
    srv.result(1, False, rnpair.HICCUP_S, True)
    assert srv.stats["stalls"] == 2 and srv.stats["backoffs"] == 1


def test_stall_slack(quiet_server, monkeypatch):
    """rnpair.STALL_SLACK: a stall is a wait past STALL_S plus that fraction of the caller's own half; at the default
    (0.5) rule()'s verdicts are the server's own (fpair's slack) on a scripted run of waits; at 1.0 a wait up to
    STALL_S plus the caller's whole half (the pair no slower than the caller alone) is none."""
    srv = quiet_server
    srv.stall = 1000
    srv.ctl[fpair.OWN] = 4000
    waits = (0, 2999, 3000, 3001, 4999, 5000, 5001, 40000)
    want = [w > 1000 + 2000 for w in waits]
    got = []
    for w in waits:
        srv.ctl[pairs.WAITED] = w
        before = srv.stats["stalls"]
        srv._stalls = []  # (each verdict on its own: no back-off)
        srv.result(1, *rnpair.rule())
        got.append(srv.stats["stalls"] > before)
        assert srv.stalled() == (w > 3000)
    assert got == want and srv.stats["backoffs"] == 0
    monkeypatch.setattr(rnpair, "STALL_SLACK", 1.0)
    got = []
    for w in waits:
        srv.ctl[pairs.WAITED] = w
        before = srv.stats["stalls"]
        srv._stalls = []
        srv.result(1, *rnpair.rule())
        got.append(srv.stats["stalls"] > before)
    assert got == [w > 1000 + 4000 for w in waits]
    srv.ctl[pairs.WAITED] = 40000
    srv.result(1, *rnpair.rule(False))  # the caller's own verdict (claimed chunks) still decides
    assert srv.stats["stalls"] == 7
    srv.result(2, *rnpair.rule())  # a call the caller ran alone is no stall
    assert srv.stats["stalls"] == 7 and srv.stats["alone"] == 1


def test_stall_back_off_counted_in_calls(quiet_server, monkeypatch):
    """rnpair.STALL_SKIP: the hiccup rule's back-off is the next STALL_SKIP pair calls on the caller (usable() False,
    the helper not woken), no time-based back-off and none of the pool's (rnpair.follow); a fire within SKIP_CALM
    times the last length of calls after its end doubles it, up to SKIP_MAX times STALL_SKIP; a later one starts
    again at STALL_SKIP; the helper's misses still back off in time."""
    monkeypatch.setattr(rnpair, "STALL_SKIP", 5)
    pool_calls, wakes = [], []
    monkeypatch.setattr(shards.POOL, "_back_off", lambda why, seconds=0.0: pool_calls.append(why))
    srv = quiet_server
    monkeypatch.setattr(srv, "wake", lambda: wakes.append(1))
    srv.ctl[pairs.WAITED] = srv.stall + 1
    srv.ctl[fpair.OWN] = 0
    srv.ctl[pairs.AWAKE] = 1

    def fire():  # two stalls within HICCUP_S (the one before them long ago)
        before = srv.stats["backoffs"]
        srv._stalls = []
        srv.result(1, *rnpair.rule())
        srv.result(1, *rnpair.rule())
        rnpair.follow(srv, before)

    def calls(n):  # n pair calls asked for: how many were refused
        return sum(not srv.usable() for _ in range(n))

    srv.result(1, *rnpair.rule())  # one stall alone: a hiccup
    assert srv.stats["stalls"] == 1 and srv.skip == 0 and srv.stats["skips"] == 0
    srv.result(1, *rnpair.rule())
    assert srv.stats["skips"] == 1 and srv.skip == 5 and srv.until == 0.0
    assert srv.stats["backoffs"] == 0 and srv.stats["stall_backoffs"] == 0 and pool_calls == []
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep meanwhile: not woken while calls are left to skip
    for _ in range(4):
        assert not srv.usable()
        srv.asleep()
    assert wakes == [] and srv.skip == 1
    assert not srv.usable()
    srv.asleep()  # the last skipped call wakes it, for the next
    assert wakes == [1] and srv.skip == 0
    srv.ctl[pairs.AWAKE] = 1
    assert srv.usable()
    fire()  # soon after the skip's end (1 call, within SKIP_CALM x 5): doubled
    assert srv.skip == 10 and calls(12) == 10 and pool_calls == []
    fire()  # 2 calls after: doubled again
    assert srv.skip == 20 and calls(20) == 20
    assert calls(pairs.SKIP_CALM * 20 + 1) == 0
    fire()  # calm for longer than SKIP_CALM x 20 calls: from STALL_SKIP again
    assert srv.skip == 5 and calls(5) == 5
    for _ in range(12):  # stalls that keep coming: doubling up to SKIP_MAX x STALL_SKIP
        fire()
    assert srv.skip == pairs.SKIP_MAX * 5 and srv.stats["skips"] == 16 and srv.stats["backoffs"] == 0
    assert srv.until == 0.0 and pool_calls == []
    srv.skip = 0
    for _ in range(pairs.MISSES):  # the helper's misses: the time-based back-off, as before
        srv.result(2, *rnpair.rule())
    assert srv.stats["backoffs"] == 1 and srv.until > time.perf_counter()
    monkeypatch.setattr(rnpair, "STALL_SKIP", 0)  # off: the stall rule's back-off in time, as before
    srv.until = 0.0
    fire()
    assert srv.stats["backoffs"] == 2 and srv.stats["stall_backoffs"] == 1 and srv.skip == 0
    assert srv.until > time.perf_counter() and len(pool_calls) == 1


def test_lone_stall_fire_is_a_skip_in_the_hiccup_rule(quiet_server, monkeypatch):
    """pairs.LONE_SKIP with rnpair.rule() (issue 11, session 18): a stall alone fires nothing (the hiccup rule); the
    first fire (two stalls within HICCUP_S) is a skip of LONE_SKIP pair calls, with no back-off in time and none of the
    pool's (rnpair.follow); a fire within pairs.BURST_S of it is the back-off in time, the pool's with it; with
    rnpair.STALL_SKIP the caller's own skip rule decides, as before."""
    monkeypatch.setattr(pairs, "LONE_SKIP", 4)
    monkeypatch.setattr(pairs, "BURST_S", 600.0)
    pool_calls = []
    monkeypatch.setattr(shards.POOL, "_back_off", lambda why, seconds=0.0: pool_calls.append(why))
    srv = quiet_server
    srv.ctl[pairs.WAITED] = srv.stall + 1
    srv.ctl[fpair.OWN] = 0
    srv.ctl[pairs.AWAKE] = 1

    def stall():
        before = srv.stats["backoffs"]
        srv.result(1, *rnpair.rule())
        rnpair.follow(srv, before)

    stall()
    assert srv.stats["stalls"] == 1 and srv.skip == 0 and srv.stats["lone"] == 0
    stall()
    assert srv.stats["lone"] == 1 and srv.skip == 4 and srv.until == 0.0 and pool_calls == []
    assert sum(not srv.usable() for _ in range(6)) == 4 and srv.stats["refused"] == 4
    stall()  # the one before within HICCUP_S, and a fire within BURST_S: the back-off in time
    assert srv.stats["stall_backoffs"] == 1 and srv.until > time.perf_counter() and len(pool_calls) == 1
    assert srv.stats["lone"] == 1 and not srv.usable() and srv.stats["refused"] == 5
    monkeypatch.setattr(rnpair, "STALL_SKIP", 5)  # the caller's own skip rule
    srv.until, srv._stalls = 0.0, []
    stall()
    stall()
    assert srv.stats["skips"] == 1 and srv.skip == 5 and srv.stats["lone"] == 1


def test_stalls_paid_for(quiet_server, monkeypatch):
    """rnpair.STALL_NET: a stall that the paired calls since the last one paid for (their own halves less their waits,
    it included, at 0 or above) is counted (stats["paid"]) but not toward the hiccup rule; one after calls that lost
    time counts, and two such within HICCUP_S back off; off, the same run backs off at its second stall."""
    srv = quiet_server
    srv.stall = 1000
    srv.ctl[fpair.OWN] = 4000
    script = [0, 0, 0, 10000, 10000, 0, 10000]  # the waits: 3 calls saving 4000 each, stalls of 6000 lost
    monkeypatch.setattr(rnpair, "STALL_NET", True)
    fired = []
    for w in script:
        srv.ctl[pairs.WAITED] = w
        srv.result(1, *rnpair.rule())
        fired.append(srv.stats["backoffs"])
    # the first stall paid for (12000 saved before it, 6000 lost), the second not (-6000): counted; the third
    # after a call that saved 4000: -2000, counted, the second within HICCUP_S: backs off
    assert srv.stats["stalls"] == 3 and srv.stats["paid"] == 1 and fired == [0, 0, 0, 0, 0, 0, 1]
    assert srv._net == 0 and srv.stats["stall_backoffs"] == 1
    srv.until, srv._stalls = 0.0, []
    srv.ctl[pairs.WAITED] = 0
    for _ in range(2):  # 8000 saved, then a stall of 20000 lost: not paid for, one counted stall (a hiccup)
        srv.result(1, *rnpair.rule())
    srv.ctl[pairs.WAITED] = 24000
    srv.result(1, *rnpair.rule())
    assert srv.stats["paid"] == 1 and srv.stats["backoffs"] == 1 and len(srv._stalls) == 1
    monkeypatch.setattr(rnpair, "STALL_NET", False)
    srv2 = fpair.FPairServer(0)
    srv2.stall, srv2.ctl[fpair.OWN] = 1000, 4000
    fired = []
    for w in script:
        srv2.ctl[pairs.WAITED] = w
        srv2.result(1, *rnpair.rule())
        fired.append(srv2.stats["backoffs"])
    assert srv2.stats["paid"] == 0 and fired == [0, 0, 0, 0, 1, 1, 2]


def test_misses_in_a_window(monkeypatch):
    """MISS_WINDOW: the pairs back off where MISSES of the last MISS_WINDOW outcomes were misses, though a claimed
    job came between them (a helper beside the caller on its CPU: 3 misses, then a claim, over and over); off, only
    MISSES in a row do, and that pattern never backs off."""
    pattern = [2, 2, 2, 1] * 12
    monkeypatch.setattr(pairs, "MISS_WINDOW", 0)
    srv = fpair.FPairServer(0)
    for done in pattern:
        srv.result(done, *rnpair.rule())
    assert srv.stats["backoffs"] == 0 and srv.stats["alone"] == 36 and srv.stats["paired"] == 12
    monkeypatch.setattr(pairs, "MISS_WINDOW", 16)
    srv = fpair.FPairServer(0)
    fired = []
    for done in pattern:
        if srv.until:  # (what the caller would see: no pair within the back-off; here the outcomes go on)
            fired.append(srv.stats["alone"] + srv.stats["paired"])
            srv.until = 0.0
        srv.result(done, *rnpair.rule())
    # the 8th miss among the last 16 outcomes: call 10 (3 + 3 + 2 misses, 2 claims), then 8 more misses in a
    # window that a back-off empties: 10-11 calls later
    assert fired == [10, 21, 31, 42] and srv.stats["backoffs"] == 4
    srv = fpair.FPairServer(0)
    for done in [1] * 20 + [2] * 7 + [1] + [2] * 7:  # 14 misses in 16, never 8 in a row: backs off at the 8th
        srv.result(done, *rnpair.rule())
    assert srv.stats["backoffs"] == 1


@pytest.mark.parametrize("case", [LAYERS[0], LAYERS[3]], ids=["wino", "direct"])
def test_a_skipped_layer_runs_alone(case, quiet_server):
    """A layer asked for within a back-off counted in calls runs both halves on the caller (no job published, no
    outcome counted) and uses one call up: bit for bit the output of a paired call whose helper never came (the
    caller took its half), and of the one-thread path for fdirect's shards."""
    xs, ws, attrs, res, op = case
    inputs = _layer(case, 3)
    shape = _out_shape(xs, ws, attrs)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    assert _pair_of(fn) is not None
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    taken = _at(2, fn, inputs, shape)  # the helper 'spinning' but never coming: the caller takes its half
    assert srv.stats["alone"] == 1 and srv.ctl[pairs.STATE] == 1 * 4 + pairs.TAKEN
    srv.skip = 2
    skipped = _at(2, fn, inputs, shape)
    assert srv.skip == 1 and srv.stats["alone"] == 1 and srv.stats["paired"] == 0
    assert srv.ctl[pairs.JOB] == 1  # no job published
    np.testing.assert_array_equal(skipped, taken)
    if op == rnpair.OP_DIRECT:
        np.testing.assert_array_equal(skipped, _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape))
    assert_close(skipped, _reference(inputs, attrs), np.float32)


@pytest.mark.parametrize("case", LAYERS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}s{c[2].get('strides', [1])[0]}")
def test_a_layer_alone_runs_the_one_thread_call(case, quiet_server, monkeypatch):
    """ALONE_SERIAL: a layer whose pair finds the helper not spinning (asleep here) runs the one-thread session's
    call of it, bit for bit that session's output and the reference's within the tolerances, publishes no job and
    counts no outcome; off, the same layer runs both halves on the caller, bit for bit a paired call's halves."""
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 5)
    shape = _out_shape(xs, ws, attrs)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    assert _pair_of(fn) is not None
    srv = quiet_server
    one = _at(1, conv_serial.bound_compute(_kernel(xs, ws, attrs, 1, res)), inputs, shape)
    monkeypatch.setattr(rnpair, "ALONE_SERIAL", True)
    alone = _at(2, fn, inputs, shape)
    assert srv.ctl[pairs.JOB] == 0 and srv.stats["alone"] == srv.stats["paired"] == 0
    np.testing.assert_array_equal(alone, one)
    assert_close(alone, _reference(inputs, attrs), np.float32)
    monkeypatch.setattr(rnpair, "ALONE_SERIAL", False)
    halves = _at(2, fn, inputs, shape)
    assert srv.ctl[pairs.JOB] == 0
    srv.ctl[pairs.AWAKE] = 1  # the helper 'spinning' but never coming: the caller takes its half
    np.testing.assert_array_equal(halves, _at(2, fn, inputs, shape))
    assert srv.ctl[pairs.JOB] == 1 and srv.stats["alone"] == 1


def test_a_pairs_back_off_backs_the_pool_off(quiet_server, monkeypatch):
    """POOL_BACKOFF: a back-off of the pairs (here a busy helper's misses through a paired layer) backs
    the shard pool off (its look at the free cores decides its end); off: the pairs' own alone."""
    calls = []
    monkeypatch.setattr(shards.POOL, "_back_off", lambda why: calls.append(why))
    case = LAYERS[3]
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 2)
    shape = _out_shape(xs, ws, attrs)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    for _ in range(pairs.MISSES):  # the helper 'spinning' but never claiming
        _at(2, fn, inputs, shape)
    assert srv.stats["backoffs"] == 1 and len(calls) == 1
    srv.until = 0.0
    monkeypatch.setattr(rnpair, "POOL_BACKOFF", False)
    for _ in range(pairs.MISSES):
        _at(2, fn, inputs, shape)
    assert srv.stats["backoffs"] == 2 and len(calls) == 1


# ResNet-50's 1x1 layers on the cols tiles in the bound parallel call (issue 11, session 12): 512 channels at 7x7
# (10 panels of 48 and one of 32) and 256 at 14x14 with the residual (conv_serial.PAIR_COLS_MAX; 5 panels and
# one of 16), each cut where both sides get the same channels x pixels, the panel at the cut split by pixels
POINTWISE = [
    ((1, 256, 7, 7), (512, 256, 1, 1), RELU, False, None),
    ((1, 128, 14, 14), (256, 128, 1, 1), RELU, True, None),
]


@pytest.mark.parametrize("case", POINTWISE, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_cols_split_halves(case, quiet_server, monkeypatch):
    """A 1x1 layer's cols panels cut with the panel at the cut split by pixels (cpair.COLS_SPLIT): the
    caller alone and the helper's half run by hand equal the one-thread path (the same cols driver over
    parts of the output) bit for bit, and the reference; the helper writes its part only."""
    _no_tail(monkeypatch)
    from kernelkit_numba.kernels import cpair

    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", 196)  # (the 14x14 layer on the cols tiles)
    xs, ws, attrs, res, _op = case
    inputs = _layer(case)
    shape = _out_shape(xs, ws, attrs)
    want = _at(1, conv_serial.bound_compute(_kernel(xs, ws, attrs, 1, res)), inputs, shape)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.OP] == cpair.COLS
    s0, s1 = cpair.SIDE0, cpair.SIDE0 + cpair.SIDE_N
    q, a = cpair.cols_split(ws[0], xs[2] * xs[3])
    assert a > 0 and pair.desc[s0 + cpair.S_NP] == a and pair.desc[s1 + cpair.S_P0] == a
    assert pair.desc[s0 + cpair.S_MC] == q and pair.desc[s1 + cpair.S_C0] == q + 1
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == 1
    np.testing.assert_array_equal(got, want)
    assert_close(got, _reference(inputs, attrs), np.float32)
    y = _helper_half(srv, pair.desc, cpair.YA, shape)
    written = ~np.isnan(y)
    half = y.reshape(ws[0], -1)
    width = ftile.COLS_WIDTH[cpair.KIND]
    assert not written.reshape(ws[0], -1)[:q * width].any() and written.reshape(ws[0], -1)[(q + 1) * width:].all()
    assert not np.isnan(half[q * width, a:]).any() and np.isnan(half[q * width, :a]).all()
    np.testing.assert_array_equal(y[written], got[written])


def test_cols_split_rule():
    """cpair.cols_split: both sides' channels x pixels within one tile of pixels of a half."""
    from kernelkit_numba.kernels import cpair

    width, mp = ftile.COLS_WIDTH[cpair.KIND], ftile.COLS_MP[cpair.KIND]
    for m_n, l_n in ((512, 49), (256, 196), (2048, 49), (1024, 196), (96, 49), (480, 49)):
        q, a = cpair.cols_split(m_n, l_n)
        mine = q * width * l_n + min(width, m_n - q * width) * a
        assert abs(mine - m_n * l_n / 2) <= min(width, m_n - q * width) * mp / 2 + 1e-9


# cpair.FOLLOW (issue 11, session 14): one-image 1x1 layers in the bound parallel call, with the residual and Relu, at
# odd sizes: 64 -> 200 at 15x15 (rows tiles by channels: 25 panels of 8), 256 -> 64 at 30x30 (rows tiles by pixels:
# 29 tiles of 32, the last of 4) and 256 -> 512 at 7x7 (cols tiles: 11 panels x 7 tiles of 7 pixels)
FOLLOW_LAYERS = [
    ((1, 64, 15, 15), (200, 64, 1, 1), RELU, True, 0),
    ((1, 256, 30, 30), (64, 256, 1, 1), RELU, True, 0),
    ((1, 256, 7, 7), (512, 256, 1, 1), RELU, True, 1),
]


@pytest.mark.parametrize("case", FOLLOW_LAYERS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_follow_cut_pointwise(case, quiet_server, monkeypatch):
    """cpair.FOLLOW: a 1x1 pair's output is bit for bit the bound cut's at every cut of its range (the caller
    alone), and the helper's half run by hand at a moved cut writes its part only, equal to it; the cut moves
    toward the faster side by FOLLOW_GAIN of the units that even the ends, at most FOLLOW_STEP of them a call,
    not within one unit's time, never past FOLLOW_RANGE, and holds where the helper came after the caller's half."""
    _no_tail(monkeypatch)
    from kernelkit_numba.kernels import cpair

    monkeypatch.setattr(cpair, "FOLLOW", True)
    xs, ws, attrs, res, op = case
    inputs = _layer(case, 3)
    shape = _out_shape(xs, ws, attrs)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.OP] == (cpair.COLS if op else cpair.ROWS)
    cut0, lo, hi, nt = int(pair.follow[0]), *pair.follow[1:4]
    assert nt == {0: (25, 29)[xs[1] == 256], 1: 77}[op] and lo < cut0 < hi
    assert (lo, hi) == (max(1, round(cut0 - 0.15 * nt)), min(nt - 1, round(cut0 + 0.15 * nt)))
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    even = _at(2, fn, inputs, shape)
    assert_close(even, _reference(inputs, attrs), np.float32)
    alone = srv.stats["alone"]
    for cut in range(lo, hi + 1):
        cpair.set_cut(pair, cut)
        srv._misses = srv._recent = 0  # (no back-off after MISSES calls alone, in a row or in pairs.MISS_WINDOW)
        np.testing.assert_array_equal(_at(2, fn, inputs, shape), even)
    assert srv.stats["alone"] == alone + hi - lo + 1 and srv.stats["backoffs"] == 0
    y = _helper_half(srv, pair.desc, cpair.YA, shape)  # the helper's half (units [hi, nt)) by hand
    written = ~np.isnan(y)
    assert written.any() and not written.all()
    np.testing.assert_array_equal(y[written], even[written])
    # the moves from the bound cut; cycles: 100 a unit
    pair.follow[0] = float(cut0)
    cpair.set_cut(pair, cut0)
    ctl = srv.ctl
    total = 100 * nt

    def call(own, start, helper):
        ctl[fpair.OWN], ctl[pairs.PUBLISHED], ctl[pairs.CLAIMED_AT] = own, 0, start
        ctl[pairs.FINISHED_AT] = start + helper
        return cpair.follow_cut(pair, ctl)

    half = total // 2
    most = max(1, int(0.02 * nt))
    assert call(half, 0, total - half + 90) == cut0  # within one unit's time: held
    assert call(half, 0, total - half + 400) == cut0 + 1  # the helper 2 units late: half of the 2 that even the ends
    assert call(half, 0, total - half + 100 * total) == cut0 + 1 + most  # far late: at most FOLLOW_STEP a call
    for _ in range(nt):
        call(half, 0, half + total)
    assert call(half, 0, half + total) == hi  # held at the range's end
    for _ in range(nt):  # the caller the slower: to the other end
        last = call(half + total, 0, half)
    assert last == lo
    assert call(1000, 2000, 5000) == lo  # the helper came after the caller's half: held
    srv._misses = 0
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), even)
    assert srv.stats["alone"] == alone + hi - lo + 2


@pytest.mark.parametrize("case", LAYERS[3:], ids=["s2", "s1-res"])
def test_follow_cut_direct(case, quiet_server, monkeypatch):
    """rnpair.FOLLOW_DIRECT: fdirect's pair (3x3/2; 64@7 with the residual) equals the one-thread path bit for bit at
    every cut of its range, and its cut moves toward the faster side within the range (cpair.follow_step's rule)."""
    _no_tail(monkeypatch)
    monkeypatch.setattr(rnpair, "FOLLOW_DIRECT", True)
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 4)
    shape = _out_shape(xs, ws, attrs)
    want = _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    assert pair.desc[rnpair.OP] == rnpair.OP_DIRECT
    cut0, lo, hi, nt = int(pair.direct[0]), *pair.direct[1:]
    s0, s1 = rnpair.SIDE0, rnpair.SIDE0 + rnpair.SIDE_N
    assert pair.desc[s0 + rnpair.S_T1] == cut0 and lo < hi and nt == pair.desc[s1 + rnpair.S_T1]
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    for cut in range(lo, hi + 1):
        rnpair.set_direct_cut(pair, cut)
        srv._misses = 0
        np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.stats["alone"] == hi - lo + 1
    rnpair.set_direct_cut(pair, cut0)
    ctl = srv.ctl

    def call(own, helper):
        ctl[fpair.OWN], ctl[pairs.PUBLISHED], ctl[pairs.CLAIMED_AT], ctl[pairs.FINISHED_AT] = own, 0, 0, helper
        return rnpair.follow_direct(pair, ctl)

    for _ in range(2 * nt):  # the helper the slower: the caller takes shards up to the range's end
        call(1000, 3000)
    assert pair.desc[rnpair.SIDE0 + rnpair.S_T1] == hi == pair.desc[rnpair.SIDE0 + rnpair.SIDE_N + rnpair.S_T0]
    for _ in range(2 * nt):
        call(3000, 1000)
    assert pair.desc[rnpair.SIDE0 + rnpair.S_T1] == lo
    srv._misses = 0
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)


@pytest.mark.parametrize("stride", [2, 1])
def test_maxpool_pair(stride, quiet_server):
    """A one-image MaxPool 3x3 in a two-thread session as two halves of its planes (cpair.maxpool_pair): the
    caller alone equals the reference bit for bit, the helper's half run by hand writes the upper planes
    only, equal to it."""
    from kernelkit_numba.kernels import cpair
    from kernelkit_numba.kernels.pool import MaxPool

    attrs = {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": [1, 1, 1, 1]}
    rng = np.random.default_rng(5)
    x = _ro(rng.standard_normal((1, 16, 20, 20)).astype(np.float32))
    (want,) = run_single_op("MaxPool", [x], attrs, vendors=["reference"])
    k = MaxPool()
    k.context = KernelContext(Node("MaxPool", ["x"], ["y"], {}, "n"), None, {}, 2)
    k.prepare([TensorSpec(x.shape, "float32")], attrs)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    got = k.compute(x)
    assert srv.stats["alone"] == 1
    np.testing.assert_array_equal(got, want)
    pair = k._pair[1]
    assert pair.desc[cpair.DWFN] == 6 + (stride == 2)
    y = _helper_half(srv, pair.desc, cpair.YA, want.shape)
    assert np.isnan(y[0, :8]).all() and not np.isnan(y[0, 8:]).any()
    np.testing.assert_array_equal(y[0, 8:], want[0, 8:])


@pytest.mark.parametrize("case", [LAYERS[0], ((1, 128, 28, 28), (128, 128, 3, 3), {**PADS, **RELU}, True, 0)],
                         ids=["64x28-rows", "128x28-z"])
def test_by_output_channels(case, quiet_server, monkeypatch):
    """BY_M_TILES: an F(4x4) layer of that many tiles or fewer pairs by output channels (whole weight panels a
    side, every tile on both): the caller alone equals the one-thread path and the reference within the fp32
    tolerances, and the halves by tiles within them too (the tiles in other blocks); the helper's half run by hand
    writes its channels only (every pixel of them), bit for bit the caller's; 0: by tiles."""
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, 5)
    shape = _out_shape(xs, ws, attrs)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    tiles = _at(2, conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)), inputs, shape)
    monkeypatch.setattr(rnpair, "BY_M_TILES", 49)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _pair_of(fn)
    d = pair.desc
    width = int(d[rnpair.WIDTH])
    assert d[rnpair.OP] == rnpair.OP_WINO and d[rnpair.PANELS] == -(-ws[0] // width) >= 2
    cut = int(d[rnpair.SIDE0 + rnpair.S_T1])
    assert cut == d[rnpair.SIDE0 + rnpair.SIDE_N + rnpair.S_T0] and d[rnpair.SIDE0 + rnpair.SIDE_N + rnpair.S_T1] == \
        d[rnpair.PANELS]
    assert abs(2 * min(ws[0], cut * width) - ws[0]) <= width
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == 2 and not np.isnan(got).any()
    assert_close(got, _reference(inputs, attrs), np.float32)
    assert_close(got, _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape), np.float32)
    assert_close(got, tiles, np.float32)
    y = _helper_half(srv, d, rnpair.YA, shape)
    written = ~np.isnan(y)
    assert written[:, cut * width:].all() and not written[:, :cut * width].any()
    np.testing.assert_array_equal(y[written], got[written])
    monkeypatch.setattr(rnpair, "BY_M_TILES", 48)  # 49 tiles: by tiles
    assert _pair_of(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))).desc[rnpair.PANELS] == 0

"""float32 products as two halves on two cores, handed over in compiled code (kernels/fpair.py,
pairs.py): the helper's half and the caller's through the descriptor (columns and rows, partial
panels, bias or none, a clamp or an activation), the caller alone, a busy slot, fgemm at two threads
with the helper spinning, a Gemm node through a session, and the back-off when the helper has no core."""
from __future__ import annotations

import time

import numpy as np
import pytest
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba import config, shards
from kernelkit_numba.kernels import epilogue, fgemm, fpair, ftile, pairs

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] is None, reason="no AVX2/AVX-512 float32 tiles on this CPU")]


def _case(rng, m, k, n):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    return a, b, bias


def _want(a, b, bias, lo=-np.inf, hi=np.inf, alpha=1.0):
    y = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + (0 if bias is None else bias)
    return np.clip(y, lo, hi).astype(np.float32)


def _made(kind, packed, a, out, axis, monkeypatch, bias=None, lo=-np.inf, hi=np.inf, post=epilogue.NONE, mr=None):
    monkeypatch.setattr(fpair, "AXIS", axis)
    mr = fgemm.MR[kind] if mr is None else mr
    fvals = (np.float32(1), np.float32(lo), np.float32(hi), np.float32(0), np.float32(0))
    if bias is not None:
        packed.bias_buf[:packed.n_n] = bias
    made = fgemm._pair_descriptor(kind, post, mr, packed, a.shape[1], a.shape[0], a.shape[1], out.shape[1], fvals,
                                  packed.zeros if bias is None else packed.bias_buf, a.size, out.size)
    assert made is not False
    return made


@pytest.mark.parametrize("axis", ["columns", "rows"])
@pytest.mark.parametrize("m, k, n", [(64, 784, 1024), (53, 70, 99), (9, 40, 33), (128, 256, 256)])
def test_halves_through_the_descriptor(axis, m, k, n, monkeypatch):
    """The helper's loop runs side 1 of an open job, the caller's half side 0: together the product."""
    kind = ftile.choice()[0]
    rng = np.random.default_rng(m + n)
    a, b, bias = _case(rng, m, k, n)
    packed = fgemm.Packed(b, b, kind)
    out = np.full((m, n), np.nan, np.float32)
    made = _made(kind, packed, a, out, axis, monkeypatch, bias, lo=0.0)
    assert made.mode == (fpair.ROWS if axis == "rows" else fpair.COLUMNS)
    d = made.desc
    d[fpair.AP], d[fpair.OUT] = a.ctypes.data, out.ctypes.data
    ctl = np.zeros(8, np.int64)
    ctl[pairs.DESC] = d.ctypes.data
    ctl[pairs.STATE] = 5 * 4 + pairs.OPEN  # job 5, open
    assert fpair.pair_serve(ctl, 1 << 22, 1 << 40) == 0  # claims, runs side 1, then idles out
    assert ctl[pairs.STATE] == 5 * 4 + pairs.DONE
    half = fpair.half_address(fgemm.driver(kind, epilogue.NONE, fgemm.MR[kind]),
                              f"fpair.half.{kind}.{fgemm.MR[kind]}.{epilogue.NONE}")[0]
    cut = int(d[fpair.CUT])
    side0 = out[:cut] if axis == "rows" else out[:, :cut]
    assert np.isnan(side0).all() and not np.isnan(out).all()
    assert half(d.ctypes.data, 0) == 0
    assert_close(out, _want(a, b, bias, lo=0.0))


@pytest.mark.parametrize("m, k, n", [(64, 300, 70), (1, 300, 70)])
def test_halves_with_the_l1_prefetch_and_one_row(m, k, n, monkeypatch):
    """Halves compiled with B_AHEAD_PAIR's L1 prefetch (64 rows), and a one-row head's halves on the
    1-row tiles (fgemm.row_pair, a masked last panel, a bias, alpha): the helper's side through its
    loop, the caller's through the descriptor's half, together the product."""
    kind = ftile.choice()[0]
    rng = np.random.default_rng(m + n)
    a, b, bias = _case(rng, m, k, n)
    packed = fgemm.Packed(b, b, kind)
    out = np.full((m, n), np.nan, np.float32)
    if m == 1:
        made = fgemm.row_pair(kind, packed, 0.5, bias)
        want = _want(a, b, bias, alpha=0.5)
    else:
        monkeypatch.setattr(fgemm, "B_AHEAD_PAIR", 8)
        made = _made(kind, packed, a, out, "columns", monkeypatch, bias, lo=0.0)
        want = _want(a, b, bias, lo=0.0)
    d = made.desc
    d[fpair.AP], d[fpair.OUT] = a.ctypes.data, out.ctypes.data
    ctl = np.zeros(8, np.int64)
    ctl[pairs.DESC] = d.ctypes.data
    ctl[pairs.STATE] = 5 * 4 + pairs.OPEN
    assert fpair.pair_serve(ctl, 1 << 22, 1 << 40) == 0
    assert ctl[pairs.STATE] == 5 * 4 + pairs.DONE
    cut = int(d[fpair.CUT])
    assert 0 < cut < n and np.isnan(out[:, :cut]).all() and not np.isnan(out[:, cut:]).any()
    if m == 1:
        half, address = fpair.half_address(fgemm.driver(kind, epilogue.NONE, 1, 0, fgemm.ROW_AHEAD),
                                           f"fpair.half.{kind}.1.{epilogue.NONE}" +
                                           (f".a{fgemm.ROW_AHEAD}" if fgemm.ROW_AHEAD else ""))
    else:
        mr = fgemm.MR[kind]
        pf = f".pf{fgemm.PREFETCH}" if fgemm.PREFETCH else ""
        half, address = fpair.half_address(fgemm.driver(kind, epilogue.NONE, mr, None, 8),
                                           f"fpair.half.{kind}.{mr}.{epilogue.NONE}{pf}.a8")
    assert address == d[fpair.FN]
    assert half(d.ctypes.data, 0) == 0
    assert_close(out, want)


@pytest.mark.parametrize("axis", ["columns", "rows"])
def test_caller_alone_busy_slot_and_activation(axis, monkeypatch):
    """No helper: the caller claims side 1 itself (2); a held slot does nothing (3); a Gelu epilogue
    (an activation applied over each tile) and no bias."""
    kind = ftile.choice()[0]
    a, b, _ = _case(np.random.default_rng(1), 40, 96, 80)
    packed = fgemm.Packed(b, b, kind)
    out = np.full((40, 80), np.nan, np.float32)
    made = _made(kind, packed, a, out, axis, monkeypatch, post=epilogue.GELU)
    fpair.half_address(fgemm.driver(kind, epilogue.GELU, fgemm.MR[kind]),
                       f"fpair.half.{kind}.{fgemm.MR[kind]}.{epilogue.GELU}")
    ctl = np.zeros(8, np.int64)
    assert fpair.pair_run(ctl, made.desc, a.reshape(-1), out.reshape(-1)) == 2
    assert ctl[pairs.STATE] == 1 * 4 + pairs.TAKEN and ctl[pairs.SLOT] == 0
    want = run_single_op("Gelu", [_want(a, b, None)], vendors=["reference"])[0]
    assert_close(out, want)
    ctl[pairs.SLOT] = 1
    fresh = np.full_like(out, np.nan)
    assert fpair.pair_run(ctl, made.desc, a.reshape(-1), fresh.reshape(-1)) == 3
    assert np.isnan(fresh).all()


def _spinning(monkeypatch):
    """fpair's helper awake (the pool's back-off off: a loaded test machine would stop the pairs)."""
    monkeypatch.setattr(shards.POOL, "backoff", False)
    monkeypatch.setattr(shards.POOL, "_serial_until", 0.0)
    helper = fpair.server()
    helper.until = 0.0
    return helper


@pytest.mark.parametrize("m, k, n, axis", [(64, 784, 1024, "auto"), (100, 70, 99, "rows"), (128, 256, 256, "auto")])
def test_fgemm_pairs_at_two_threads(m, k, n, axis, monkeypatch, pair_calls):
    """fgemm.gemm at two threads hands its products to the helper (woken at the first call): every
    result within tolerance of the float64 product, and pairs made."""
    kind = ftile.choice()[0]
    monkeypatch.setattr(fpair, "AXIS", axis)
    helper = _spinning(monkeypatch)
    a, b, bias = _case(np.random.default_rng(m), m, k, n)
    packed = fgemm.Packed(b, b, kind)
    want = _want(a, b, bias, 0.0, 6.0)

    def run():
        out = np.full((m, n), np.nan, np.float32)
        with config.num_threads(2):
            fgemm.gemm(kind, packed, a, out, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(6), 2)
        assert_close(out, want)

    assert pair_calls(run, helper, 20) >= 20
    assert packed.pairs


def test_off_one_thread_and_small(monkeypatch):
    """No descriptor at one thread, under KERNELKIT_F32_PAIR=off, or below PAIR_FLOPS."""
    kind = ftile.choice()[0]
    _spinning(monkeypatch)
    a, b, bias = _case(np.random.default_rng(2), 64, 256, 256)
    packed = fgemm.Packed(b, b, kind)
    out = np.empty((64, 256), np.float32)
    with config.num_threads(1):
        fgemm.gemm(kind, packed, a, out, 1.0, bias)
    monkeypatch.setenv(fpair.ENV, "off")
    with config.num_threads(2):
        fgemm.gemm(kind, packed, a, out, 1.0, bias)
    assert not packed.pairs
    monkeypatch.delenv(fpair.ENV)
    monkeypatch.setattr(fgemm, "PAIR_FLOPS", 1e12)
    with config.num_threads(2):
        fgemm.gemm(kind, packed, a, out, 1.0, bias)
    assert not packed.pairs
    assert_close(out, _want(a, b, bias))


@pytest.mark.parametrize("act", ["", "Relu"])
def test_gemm_node_at_two_threads(act, monkeypatch):
    """The MLP's first layer (64 x 784 -> 1024) through a two-thread session: its bound call
    (Gemm.bound_compute) hands the product to fpair from the first calls on, against the reference."""
    _spinning(monkeypatch)
    calls = []
    real = fpair.run

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(fpair, "run", counted)
    from kernelkit import Session
    from kernelkit.testing import single_op_model

    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 784)).astype(np.float32)
    b = (rng.standard_normal((1024, 784)) / 28).astype(np.float32)
    c = rng.standard_normal(1024).astype(np.float32)
    attrs = {"transB": 1, "alpha": 1.5, **({"activation": act} if act else {})}
    want = run_single_op("Gemm", [a, b, c], {"transB": 1, "alpha": 1.5}, constants=(1, 2), vendors=["reference"])[0]
    if act:
        want = np.maximum(want, 0)
    sess = Session(single_op_model("Gemm", [a, b, c], attrs, constants=(1, 2)), vendors=["numba"], fallback=False,
                   threads=2)
    for _ in range(6):
        assert_close(sess.run(None, {"in0": a})[0], want)
    assert len(calls) >= 4


def test_a_helper_without_a_core_backs_off(monkeypatch):
    """A helper marked awake that never claims (its core taken): every job runs on the caller, right,
    and after MISSES of them the pairs stop for a back-off."""
    kind = ftile.choice()[0]
    monkeypatch.setattr(shards.POOL, "backoff", False)
    monkeypatch.setattr(shards.POOL, "_serial_until", 0.0)
    idle = fpair.FPairServer(7)
    assert idle.prepare()
    idle.ctl[pairs.AWAKE] = 1  # "spinning", but no thread
    monkeypatch.setattr(fpair, "_server", [idle])
    a, b, bias = _case(np.random.default_rng(4), 64, 256, 512)
    packed = fgemm.Packed(b, b, kind)
    for _ in range(pairs.MISSES):
        out = np.full((64, 512), np.nan, np.float32)
        with config.num_threads(2):
            fgemm.gemm(kind, packed, a, out, 1.0, bias)
        assert_close(out, _want(a, b, bias))
    assert idle.stats["alone"] == pairs.MISSES and idle.stats["backoffs"] == 1
    assert not idle.usable()


@pytest.mark.parametrize("trans_b, with_c, relu", [(1, True, True), (0, False, False), (1, True, False)])
def test_one_thread_gemm_binds_the_micro_kernels(trans_b, with_c, relu, monkeypatch):
    """A one-thread session's Gemm of fgemm's shape classes (the MLP's layers) takes the bound call
    (fgemm.serial) from its first call on, the 10-column head Gemm too on avx512's NARROW tiles
    (gemm.HEAD_NARROW; elsewhere its bound BLAS call); both equal to the reference."""
    made = []
    real = fgemm.serial

    def counted(*args, **kw):
        made.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(fgemm, "serial", counted)
    from kernelkit import Session
    from kernelkit.testing import single_op_model

    rng = np.random.default_rng(11)
    for n in (1024, 10):
        a = rng.standard_normal((64, 784)).astype(np.float32)
        b = (rng.standard_normal((n, 784) if trans_b else (784, n)) / 28).astype(np.float32)
        c = rng.standard_normal(n).astype(np.float32)
        inputs = [a, b, c] if with_c else [a, b]
        attrs = {"transB": trans_b, "alpha": 0.5, "beta": 2.0} if with_c else {"transB": trans_b}
        model = single_op_model("Gemm", inputs, attrs, constants=(1, 2) if with_c else (1,))
        sess = Session(model, vendors=["numba"], fallback=False, threads=1)
        want = run_single_op("Gemm", inputs, attrs, constants=(1, 2) if with_c else (1,), vendors=["reference"])[0]
        if relu:
            want = np.maximum(want, 0)
            model2 = single_op_model("Gemm", inputs, {**attrs, "activation": "Relu"},
                                     constants=(1, 2) if with_c else (1,))
            sess = Session(model2, vendors=["numba"], fallback=False, threads=1)
        for _ in range(4):
            assert_close(sess.run(None, {"in0": a})[0], want)
    from kernelkit_numba.kernels import gemm

    kind = ftile.choice()[0]
    assert made == [kind] + ([fgemm.NARROW] if gemm.HEAD_NARROW and kind == ftile.KIND["avx512"] else [])


def test_stall_scales_with_the_callers_half():
    """A wait beyond STALL_S plus half the caller's own half backs off; a shorter one (a large product's
    halves a little uneven) does not."""
    helper = fpair.FPairServer(9)
    helper.stall = 100
    helper.ctl[fpair.OWN] = 1000
    helper.ctl[pairs.WAITED] = 500
    helper.result(1)
    assert helper.stats["stalls"] == 0 and helper.until == 0.0
    helper.ctl[pairs.WAITED] = 700
    helper.result(1)
    assert helper.stats["stalls"] == 1 and helper.until > time.perf_counter()


@pytest.mark.parametrize("trans_b, with_c", [(1, True), (0, False)])
def test_one_row_head_pairs_at_two_threads(trans_b, with_c, monkeypatch):
    """A one-row Gemm of a 1 MiB+ weight (MobileNetV2's 1280 x 1000 head, hpair.py) at two threads: its
    halves through fpair's helper (the caller's and the helper's half each checked by hand through the
    descriptor), and through a two-thread session against the reference; ``hpair.ON`` off: no pair."""
    from kernelkit import Session
    from kernelkit.testing import single_op_model
    from kernelkit_numba.kernels import hpair

    _spinning(monkeypatch)
    rng = np.random.default_rng(12)
    k, n = 1280, 1000
    a = rng.standard_normal((1, k)).astype(np.float32)
    b = (rng.standard_normal((n, k) if trans_b else (k, n)) / 36).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    want = _want(a, b.T if trans_b else b, 2 * c if with_c else None, alpha=0.5)
    made = hpair.descriptor(b, c * 2 if with_c else np.zeros(n, np.float32), 0.5, k, n, trans_b)
    assert made is not None and 0 < made.desc[hpair.CUT] < n
    out = np.full((1, n), np.nan, np.float32)
    made.desc[hpair.AP], made.desc[hpair.OUT] = a.ctypes.data, out.ctypes.data
    hpair.half(made.desc.ctypes.data, 0)
    assert np.isnan(out[0, made.desc[hpair.CUT]:]).all()
    hpair.half(made.desc.ctypes.data, 1)
    assert_close(out, want)

    calls = []
    real = fpair.run
    monkeypatch.setattr(fpair, "run", lambda *args: calls.append(1) or real(*args))
    inputs, consts = ([a, b, c], (1, 2)) if with_c else ([a, b], (1,))
    attrs = {"transB": trans_b, "alpha": 0.5, "beta": 2.0}
    for on, threads in ((True, 2), (False, 2), (True, 1)):
        monkeypatch.setattr(hpair, "ON", on)
        calls.clear()
        sess = Session(single_op_model("Gemm", inputs, attrs, constants=consts), vendors=["numba"], fallback=False,
                       threads=threads)
        pairs_due = on and threads == 2
        runs, deadline = 0, time.perf_counter() + 60  # at least 8 runs; a busy machine's (pytest-xdist's other
        # worker): more, until 4 went to fpair, as the pool's worker may still spin (no pair) until it gets its core
        while runs < 8 or (pairs_due and len(calls) < 4 and time.perf_counter() < deadline):
            assert_close(sess.run(None, {"in0": a})[0], want)
            time.sleep(0.001)
            runs += 1
        assert (len(calls) >= 4) if pairs_due else not calls


def test_a_woken_helper_waits_for_its_first_job():
    """The caller that wakes the helper runs its product alone: the woken helper spins WAKE_IDLE_S for its
    first job, not IDLE_S, or a product longer than IDLE_S finds it asleep again at the next product, and
    every product of every run wakes it and runs alone (the MLP at two threads, session 12)."""
    import time

    helper = fpair.FPairServer(11)
    assert helper.prepare()
    assert pairs.WAKE_IDLE_S > pairs.IDLE_S
    rate = helper.idle / pairs.IDLE_S
    helper.wake_idle = int(5.0 * rate)  # 5 s: the test's own window, far beyond any scheduling delay,
    helper.cap = int(10.0 * rate)  # inside one call of the helper's loop (WAKE_IDLE_S < CAP_S)
    helper.wake()
    deadline = time.perf_counter() + 5.0
    while helper.ctl[pairs.AWAKE] != 1 and time.perf_counter() < deadline:
        time.sleep(1e-3)
    assert helper.ctl[pairs.AWAKE] == 1
    time.sleep(50 * pairs.IDLE_S)  # no job: past IDLE_S, inside the wake window
    try:
        assert helper.ctl[pairs.AWAKE] == 1
    finally:
        helper.ctl[pairs.STOP] = 1
        helper._thread.join(5.0)
    assert not helper._thread.is_alive()


def test_a_lone_stall_skips_a_few_calls_a_burst_backs_off(monkeypatch):
    """pairs.LONE_SKIP (issue 11, session 18): fpair's rule fires a back-off at every stall; with LONE_SKIP a fire with
    none within BURST_S before it is the next LONE_SKIP pair calls on the caller (the helper not woken, no back-off in
    time), and the products then run right on the caller; a second fire within BURST_S (a burst) is the back-off in
    time, doubling as before; one after a calm BURST_S is a skip again; the helper's misses still back off in time;
    off (0), every stall backs off in time."""
    kind = ftile.choice()[0]
    monkeypatch.setattr(shards.POOL, "backoff", False)
    monkeypatch.setattr(shards.POOL, "_serial_until", 0.0)
    monkeypatch.setattr(pairs, "LONE_SKIP", 3)
    monkeypatch.setattr(pairs, "BURST_S", 600.0)  # (the products between the stalls compile on a slow box)
    srv = fpair.FPairServer(7)
    assert srv.prepare()
    srv.ctl[pairs.AWAKE] = 1  # "spinning", but no thread: a pair call runs both halves on the caller (alone)
    monkeypatch.setattr(fpair, "_server", [srv])
    wakes = []
    monkeypatch.setattr(srv, "wake", lambda: wakes.append(1))
    a, b, bias = _case(np.random.default_rng(5), 64, 256, 512)
    packed = fgemm.Packed(b, b, kind)

    def stall():
        srv.ctl[fpair.OWN], srv.ctl[pairs.WAITED] = 1000, srv.stall + 501
        srv.result(1, False, fpair.HICCUP_S)

    def product():
        out = np.full((64, 512), np.nan, np.float32)
        with config.num_threads(2):
            fgemm.gemm(kind, packed, a, out, 1.0, bias)
        assert_close(out, _want(a, b, bias))

    stall()
    assert srv.stats["stalls"] == 1 and srv.stats["lone"] == 1 and srv.skip == 3
    assert srv.until == 0.0 and srv.stats["backoffs"] == 0 and srv.stats["stall_backoffs"] == 0
    for _ in range(3):  # skipped: on the caller, no job published, the helper not woken before the last
        product()
    assert srv.stats["refused"] == 3 and srv.stats["alone"] == 0 and srv.skip == 0 and wakes == [1]
    product()  # the skip over: a pair call again (no thread: the caller takes the helper's half)
    assert srv.stats["alone"] == 1 and srv.stats["refused"] == 3
    stall()  # a second fire within BURST_S: the burst's back-off in time
    assert srv.stats["lone"] == 1 and srv.stats["stall_backoffs"] == 1 and srv.skip == 0
    assert srv.until > time.perf_counter() and srv._backoff == pairs.MIN_BACKOFF_S
    product()
    assert srv.stats["refused"] == 4 and srv.stats["alone"] == 1
    stall()  # again soon: doubling, as before
    assert srv.stats["stall_backoffs"] == 2 and srv._backoff == 2 * pairs.MIN_BACKOFF_S
    srv._fired -= pairs.BURST_S + 1.0  # calm for BURST_S: a lone stall again
    srv.until = 0.0
    stall()
    assert srv.stats["lone"] == 2 and srv.skip == 3 and srv.until == 0.0 and srv.stats["stall_backoffs"] == 2
    srv.skip = 0
    for _ in range(pairs.MISSES):  # the helper's misses: the back-off in time, as before
        srv.result(2, False, fpair.HICCUP_S)
    assert srv.stats["backoffs"] == 3 and srv.until > time.perf_counter() and srv.skip == 0
    monkeypatch.setattr(pairs, "LONE_SKIP", 0)
    off = fpair.FPairServer(8)
    off.stall = srv.stall
    off.ctl[fpair.OWN], off.ctl[pairs.WAITED] = 1000, off.stall + 501
    off.result(1, False, fpair.HICCUP_S)
    assert off.stats["stall_backoffs"] == 1 and off.stats["lone"] == 0 and off.skip == 0
    assert off.until > time.perf_counter()

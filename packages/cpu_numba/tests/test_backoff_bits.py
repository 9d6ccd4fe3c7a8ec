"""A two-thread session's output across a back-off of the shard pool (config.KEEP_BUDGET; issue 11, session 18,
docs/numba.md, "The first run's bits at two threads"): while the pool is backed off, ``current_threads()`` keeps the
budget, so the layers keep their two-thread choices (the pairs' halves, the cuts) and run them on the caller. A run
during a back-off then gives the bits of a run without one (on by default since session 19). Off, a back-off puts
every layer on the one-thread session's kernels, whose sums run in another order (the F(4x4) layers' BLAS products,
the 1x1 layers' K chunks): the bits change with the back-off, within the fp32 tolerances."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from _conv_layers import _graph_conv
from kernelkit import Session
from kernelkit.builder import GraphBuilder
from kernelkit.testing import assert_close
from kernelkit_numba import config, shards
from kernelkit_numba.kernels import ftile, pairs, rnpair

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the ResNet pairs run on the AVX-512 tiles")]


def _bottleneck(rng):
    """A ResNet-50 bottleneck at 56x56 (1x1 64 -> 64, 3x3 64 -> 64 on F(4x4) by tiles, 1x1 64 -> 256, the 1x1
    projection of the input, the residual) and its input."""
    g = GraphBuilder("bottleneck")
    x = g.input("x", (1, 64, 56, 56))

    conv = functools.partial(_graph_conv, g, rng)

    a = g.op("Relu", conv(x, 64, 64, 1))
    a = g.op("Relu", conv(a, 64, 64, 3, pads=[1, 1, 1, 1]))
    y = g.op("Relu", g.op("Add", conv(a, 256, 64, 1), conv(x, 256, 64, 1)))
    g.output(y)
    return g.build(), {"x": rng.standard_normal((1, 64, 56, 56)).astype(np.float32)}


def _pool_shares(monkeypatch) -> list:
    """The stall share of every job the shard pool runs from now on (ShardPool.run's ``stall_share``), in order."""
    shares, run = [], shards.POOL.run

    def run_kept(fn, count, threads, phases=(), stall_share=shards.ShardPool.STALL_SHARE):
        shares.append(stall_share)
        return run(fn, count, threads, phases, stall_share)

    monkeypatch.setattr(shards.POOL, "run", run_kept)
    return shares


def test_a_back_off_keeps_the_bits(quiet_server, monkeypatch):
    """KEEP_BUDGET: runs before, during and after a back-off of the pool equal each other bit for bit, and the
    reference within the fp32 tolerances (fpair's helper never comes: every pair runs its halves on the caller)."""
    monkeypatch.setattr(config, "KEEP_BUDGET", True)
    model, feeds = _bottleneck(np.random.default_rng(18))
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    first = sess.run(None, feeds)[0]
    assert_close(first, want, np.float32)
    monkeypatch.setattr(shards.POOL, "backed_off", lambda: True)
    during = [sess.run(None, feeds)[0] for _ in range(2)]
    monkeypatch.setattr(shards.POOL, "backed_off", lambda: False)
    after = sess.run(None, feeds)[0]
    for got in (*during, after):
        np.testing.assert_array_equal(got, first)


def test_off_a_back_off_is_one_thread(monkeypatch):
    """Off: ``current_threads()`` is 1 while the pool is backed off (the one-thread session's kernels), the budget
    otherwise."""
    monkeypatch.setattr(config, "KEEP_BUDGET", False)
    with config.num_threads(2):
        monkeypatch.setattr(shards.POOL, "backed_off", lambda: True)
        assert config.current_threads() == 1
        monkeypatch.setattr(config, "KEEP_BUDGET", True)
        assert config.current_threads() == 2
        monkeypatch.setattr(shards.POOL, "backed_off", lambda: False)
        monkeypatch.setattr(config, "KEEP_BUDGET", False)
        assert config.current_threads() == 2


def test_a_spinning_worker_keeps_the_bits(quiet_server, monkeypatch):
    """rnpair.BESIDE_POOL: where the shard pool's worker spins (a model with pooled nodes), the ResNet pairs' layers
    run their two halves as the pool's job's two shards, not the general path, so that runs whose calls find it
    spinning and runs whose calls do not give the same bits (issue 11, session 20; the detection head's 3x3 layers gave
    three outputs in 20 runs before); the pool ran jobs for them."""
    model, feeds = _bottleneck(np.random.default_rng(20))
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    first = sess.run(None, feeds)[0]
    assert_close(first, want, np.float32)
    rng = np.random.default_rng(5)
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: bool(rng.random() < 0.5))
    shares = _pool_shares(monkeypatch)
    for _ in range(4):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], first)
    assert rnpair.POOL_STALL_SHARE in shares  # (the halves' jobs; the 1x1 layers' general path: the pool's own)
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: True)
    np.testing.assert_array_equal(sess.run(None, feeds)[0], first)


def test_off_a_spinning_worker_takes_the_general_path(quiet_server, monkeypatch):
    """BESIDE_POOL off: a layer that finds the pool's worker spinning takes the general path (Conv.compute on the
    pool's shards, its own order of sums), within the fp32 tolerances of the pair's output."""
    monkeypatch.setattr(rnpair, "BESIDE_POOL", False)
    model, feeds = _bottleneck(np.random.default_rng(20))
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    first = sess.run(None, feeds)[0]
    calls = []
    monkeypatch.setattr(rnpair.Pair, "__call__", lambda self, *a, **k: calls.append(1) or False)
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: True)
    got = sess.run(None, feeds)[0]
    assert not calls
    assert_close(got, first, np.float32)


@pytest.mark.parametrize("beside", [True, False])
def test_a_held_slot_keeps_the_bits(quiet_server, monkeypatch, beside):
    """A layer whose pair finds the callers' slot held (fpair's helper serving another session's layer: pair_run's 3)
    runs its halves as the pool's two shards with BESIDE_POOL, the bits of the call that held it; off, the general
    path (within the fp32 tolerances)."""
    monkeypatch.setattr(rnpair, "BESIDE_POOL", beside)
    model, feeds = _bottleneck(np.random.default_rng(21))
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    first = sess.run(None, feeds)[0]  # (quiet_server: the helper never spins, every pair's halves on the caller)
    monkeypatch.setattr(quiet_server, "usable", lambda: True)
    quiet_server.ctl[pairs.SLOT] = 1  # another caller's job holds the slot
    shares = _pool_shares(monkeypatch)
    try:
        got = sess.run(None, feeds)[0]
    finally:
        quiet_server.ctl[pairs.SLOT] = 0
    assert (rnpair.POOL_STALL_SHARE in shares) == beside
    if beside:
        np.testing.assert_array_equal(got, first)
    else:
        assert_close(got, first, np.float32)

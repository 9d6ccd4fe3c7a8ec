"""Shared helpers: run one op through a Session on the numba kernels only (fallback off) and on
the NumPy reference, and compare within kernelkit.testing.TOLERANCES."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from kernelkit.testing import assert_close, run_single_op

sys.path.insert(0, str(Path(__file__).parent))  # the tests' helper module (_conv_layers)


def check_against_reference(op, inputs, attrs=None, *, constants=(), n_outputs=None):
    """Run ``op`` with vendor numba (no fallback) and with the reference; outputs must agree."""
    got = run_single_op(op, inputs, attrs, n_outputs, constants, vendors=["numba"], fallback=False)
    want = run_single_op(op, inputs, attrs, n_outputs, constants, vendors=["reference"], fallback=False)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, err_msg=f"{op} output {i} attrs={attrs} shapes={[np.shape(x) for x in inputs]}")
    return got


@pytest.fixture
def check():
    """``check(op, inputs, attrs, constants=..., n_outputs=...)``: numba vs reference (a pure
    function, so hypothesis may reuse it across examples)."""
    return check_against_reference


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _steady_pool():
    """The shard pool neither starts a test backed off nor backs off during one: on a busy CI box a
    worker that loses its core would make ``current_threads()`` 1 for a while (shards.py) and a test
    that checks the thread budget or the sharding flaky. test_pool_wait turns it on where it tests it."""
    from kernelkit_numba import shards

    shards.POOL.reset()
    shards.POOL.backoff = False
    yield
    shards.POOL.backoff = True
    shards.POOL.reset()


@pytest.fixture
def pair_calls():
    """``pair_calls(run, server, n)``: ``run()`` (which checks its own results) once, then again and again
    until the pair server (pairs.PairServer) has taken ``n`` more pair calls, paired or run alone, or 60 s
    have passed, its back-off cleared between runs (a loaded test machine's); returns the count. The first
    run is not counted: it compiles (eager start) what the test's switches ask for, which on a loaded CI
    machine with an empty Numba cache took most of the 60 s."""
    def calls(run, srv, n: int) -> int:
        run()
        srv.until = 0.0
        before = srv.stats["paired"] + srv.stats["alone"]
        deadline = time.perf_counter() + 60
        while True:
            run()
            tried = srv.stats["paired"] + srv.stats["alone"] - before
            if tried >= n or time.perf_counter() > deadline:
                return tried
            srv.until = 0.0

    return calls


@pytest.fixture
def session_pair_calls(pair_calls):
    """``session_pair_calls(sess, feeds, want, one, n)``: runs the two-thread session ``sess`` (``pair_calls``)
    until fpair's helper has taken ``n`` more pair calls, each output equal to the reference's ``want`` and
    the one-thread run's ``one`` within the fp32 tolerances; returns the pair calls taken and the shard-pool
    jobs started meanwhile."""
    from kernelkit_numba import shards
    from kernelkit_numba.kernels import fpair

    def calls(sess, feeds, want, one, n: int) -> tuple[int, int]:
        jobs = shards.POOL.stats["jobs"]

        def run():
            got = sess.run(None, feeds)[0]
            assert_close(got, want, np.float32)
            assert_close(got, one, np.float32)

        return pair_calls(run, fpair.server(), n), shards.POOL.stats["jobs"] - jobs

    return calls

@pytest.fixture
def quiet_server(monkeypatch):
    """fpair's helper (the one for every float32 pair: cpair's, rnpair's, tpair's halves) of this test's
    own whose thread never starts (the helper's half is run by hand), the shard pool neither backed off
    nor with a worker spinning or asleep."""
    from kernelkit_numba import shards
    from kernelkit_numba.kernels import fpair

    srv = fpair.FPairServer(0)
    monkeypatch.setattr(fpair, "_server", [srv])
    monkeypatch.setattr(srv, "wake", lambda: None)
    monkeypatch.setattr(shards.POOL, "backed_off", lambda: False)
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: False)
    monkeypatch.setattr(shards.POOL, "workers_asleep", lambda: False)
    return srv

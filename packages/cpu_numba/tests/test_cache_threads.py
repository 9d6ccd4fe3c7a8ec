"""cache=True: a second process loads compiled kernels from disk; Session(threads=...) reaches the
shard pool's thread budget; the pool finishes every shard, runs shards on several threads, and
re-raises a shard's error in the caller."""
import json
import os
import subprocess
import sys
import threading

import kernelkit
import numpy as np
import pytest
from kernelkit_numba import config
from kernelkit_numba.shards import ShardPool

JIT_OFF = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")

_PROBE = """
import json, numpy as np
from numba.core.registry import CPUDispatcher
from kernelkit_numba.config import serial
from kernelkit_numba.kernels import softmax
softmax.softmax(np.ones((3, 2000), np.float32))  # above softmax.SMALL: the sharded path's kernels
with serial():
    softmax.softmax(np.ones((3, 2000), np.float32))
jitted = [f for f in vars(softmax).values() if isinstance(f, CPUDispatcher) and f.signatures]
print(json.dumps([sum(sum(f.stats.cache_hits.values()) for f in jitted),
                  sum(sum(f.stats.cache_misses.values()) for f in jitted), len(jitted)]))
"""


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
def test_second_process_loads_from_cache(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def probe():
        out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                             check=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])

    hits, misses, used = probe()
    assert used >= 2 and (hits, misses) == (0, used)  # empty cache dir: every kernel compiled and written
    assert probe() == [used, 0, used]  # second process: every kernel loaded, none compiled


def test_num_threads_context_sets_and_restores():
    before = config.current_threads()
    with config.num_threads(1):
        assert config.current_threads() == 1 and config.in_serial()
        with config.num_threads(None):
            assert config.current_threads() == 1
    assert config.current_threads() == before == config.default_threads()


def test_blas_single_leaves_every_blas_at_one_thread():
    libs = config._blas_controllers()
    before = [lib.get_num_threads() for lib in libs]
    try:
        config.blas_single()
        assert all(lib.get_num_threads() == 1 for lib in libs)
    finally:
        for lib, n in zip(libs, before):
            lib.set_num_threads(n)


def test_blas_threads_context_sets_and_restores():
    libs = config._blas_controllers()
    before = [lib.get_num_threads() for lib in libs]
    with config.blas_threads(1):
        assert all(lib.get_num_threads() == 1 for lib in libs)
    assert [lib.get_num_threads() for lib in libs] == before


def test_shard_count_follows_budget_and_work():
    assert config.shard_count(1000, 1e12, threads=1) == 1
    assert config.shard_count(1000, config.MIN_SHARD_WORK, threads=4) == 1  # too little work
    assert config.shard_count(1000, 1e12, threads=2) == 2 * config.SHARDS_PER_THREAD
    assert config.shard_count(1000, 6 * config.MIN_SHARD_WORK, threads=2, unit=3 * config.MIN_SHARD_WORK) == 2
    assert config.shard_count(3, 1e12, threads=8) == 3  # never more shards than iterations


def test_pool_runs_every_shard_once_on_several_threads():
    pool, seen, lock = ShardPool(), [], threading.Lock()
    barrier = threading.Barrier(2, timeout=10)

    def shard(i):
        if i < 2:
            barrier.wait()  # the caller alone could not pass: shards 0 and 1 run on two threads at once
        with lock:
            seen.append((i, threading.get_ident()))

    pool.run(shard, 40, threads=2)
    assert sorted(i for i, _ in seen) == list(range(40))
    assert len({t for _, t in seen}) == 2


def test_pool_caller_finishes_when_workers_are_busy():
    """A worker that never gets to run (here: stuck in another job) leaves its shards to the caller."""
    pool, release = ShardPool(), threading.Event()
    started = threading.Event()

    def stuck(i):
        started.set()
        release.wait(10)

    blocker = threading.Thread(target=pool.run, args=(stuck, 2, 2))
    blocker.start()
    started.wait(10)
    done = []
    pool.run(done.append, 50, threads=2)  # the only worker is blocked: the caller runs all 50
    assert sorted(done) == list(range(50))
    release.set()
    blocker.join(10)


def test_pool_reraises_shard_error_in_caller():
    def shard(i):
        if i == 7:
            raise ValueError("shard 7")

    with pytest.raises(ValueError, match="shard 7"):
        ShardPool().run(shard, 20, threads=2)


def test_parallel_for_covers_range_in_order_free_shards():
    out = np.zeros(1000, np.int64)

    def kernel(arr, lo, hi):
        arr[lo:hi] += 1

    with config.num_threads(2):
        config.parallel_for(kernel, 1000, (out,), 1e9)
    assert (out == 1).all()


def _spy_conv(monkeypatch, threads, shape):
    from kernelkit_numba.kernels.conv import Conv

    seen = []
    original = Conv.compute

    def spy(self, *xs, **kw):  # kw: out= (Conv writes into the session's arena)
        seen.append((config.current_threads(), tuple(lib.get_num_threads() for lib in config._blas_controllers())))
        return original(self, *xs, **kw)

    g = kernelkit.GraphBuilder("t")
    x = g.input("x", shape)
    g.output(g.op("Conv", x, np.ones((8, shape[1], 3, 3), np.float32)))
    monkeypatch.setattr(Conv, "compute", spy)
    kernelkit.Session(g.build(), vendors=["numba"], fallback=False, threads=threads).run(
        None, {"x": np.ones(shape, np.float32)})
    return seen


def test_session_threads_one_runs_serial_with_one_blas_thread(monkeypatch):
    [(threads, blas)] = _spy_conv(monkeypatch, 1, (1, 2, 5, 5))
    assert threads == 1 and set(blas) <= {1}  # the calling thread alone, every BLAS library at one thread
    assert config.current_threads() == config.default_threads()  # reset after the call


def test_large_call_runs_on_session_threads_with_blas_at_one(monkeypatch):
    from kernelkit_numba.kernels import rnpair

    monkeypatch.setattr(rnpair, "ON", False)  # the pool's path (a pair runs its halves without Conv.compute)
    [(threads, blas)] = _spy_conv(monkeypatch, 2, (1, 64, 64, 64))  # ~38 MFLOP: above SERIAL_WORK
    assert threads == 2 and set(blas) <= {1}  # shards in parallel, BLAS never threads itself


def test_progress_line_names_the_kernel_and_closes_it():
    from contextlib import contextmanager
    from types import SimpleNamespace

    from kernelkit_numba import progress
    from kernelkit_numba.kernels import softmax

    shown = []

    @contextmanager
    def task(description):  # stands in for kernelkit.progress.task
        shown.append(("open", description))
        yield
        shown.append(("close", description))

    line = progress._Line(task)
    event = SimpleNamespace(data={"dispatcher": softmax._shift_rows})
    line.on_start(event)
    line.on_start(event)  # a nested compilation (a callee) keeps the one line
    line.on_end(event)
    assert shown == [("open", "kernelkit-numba: compiling softmax._shift_rows (0 compiled)")]
    line.on_end(event)  # the outermost one ends: the line goes away
    assert shown[-1][0] == "close" and len(shown) == 2


def test_progress_line_stays_off_when_stderr_is_not_a_terminal(monkeypatch):
    from kernelkit_numba import progress
    from numba.core import event

    registered = []
    monkeypatch.setattr(progress, "_installed", False)
    monkeypatch.setattr(event, "register", lambda kind, listener: registered.append(kind))
    progress.install()  # pytest captures stderr: not a terminal, so core's progress is disabled
    assert registered == [] and progress._installed


def test_pool_backs_off_to_the_caller_after_a_stall(monkeypatch):
    """A worker that holds a shard for long (as when another process takes its core) makes the
    next jobs run on the calling thread alone; after the back-off the workers help again."""
    import time

    pool, caller = ShardPool(), threading.get_ident()
    monkeypatch.setattr(ShardPool, "MIN_BACKOFF_S", 0.3)
    pool._backoff = 0.3
    started = threading.Event()

    def slow_on_worker(i):
        if threading.get_ident() != caller:
            started.set()
            time.sleep(0.05)  # 50 ms: far above STALL_S
        else:
            started.wait(5)  # the caller runs its shards only once a worker holds one

    pool.run(slow_on_worker, 4, threads=2)
    assert pool.stalls == 1
    seen = []
    pool.run(lambda i: seen.append(threading.get_ident()), 30, threads=2)
    assert set(seen) == {caller}  # backing off: the caller alone
    time.sleep(0.35)
    barrier = threading.Barrier(2, timeout=10)
    pool.run(lambda i: barrier.wait() if i < 2 else None, 10, threads=2)  # needs two threads again

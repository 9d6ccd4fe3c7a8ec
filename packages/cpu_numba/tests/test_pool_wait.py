"""The shard pool (shards.py): every shard runs once with 1 and 2 threads, the spin and the back-off
paths (forced through the environment and by workers that lose their core), errors raised in a
shard reach the caller with their type, and nothing hangs (every pool call runs under a timeout)."""
from __future__ import annotations

import threading
import time
import types

import numba
import numpy as np
import pytest
from kernelkit.errors import KernelExecutionError, ShapeError
from kernelkit_numba import config, shards

TIMEOUT_S = 20.0


def within(fn, *args, timeout: float = TIMEOUT_S):
    """``fn(*args)`` on a thread of its own; fails the test instead of hanging when it takes longer."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"pool call did not return within {timeout} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def counting(count: int, delay: float = 0.0):
    """A shard function that records which thread ran each shard (a list of hits per shard)."""
    hits = [[] for _ in range(count)]

    def fn(i):
        hits[i].append(threading.current_thread().name)
        if delay:
            time.sleep(delay)

    return fn, hits


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("spin_us", [0.0, 200.0])
def test_every_shard_runs_once(threads, spin_us):
    pool = shards.ShardPool(spin_us * 1e-6)
    for count in (1, 2, 7, 64) * (pool.SPIN_AFTER_JOBS // 2):  # past the jobs after which workers spin
        fn, hits = counting(count, delay=2e-5)
        within(pool.run, fn, count, threads)
        assert [len(h) for h in hits] == [1] * count
    if threads == 1:
        assert pool.stats["jobs"] == 0 and not pool._workers  # one thread: no job, no worker started


def test_workers_help_and_budget_holds():
    """A pool with more workers than a job's budget: only ``threads - 1`` of them join it."""
    pool = shards.ShardPool(200e-6)
    fn, _ = counting(8, delay=1e-3)
    within(pool.run, fn, 8, 4)  # starts three workers
    assert len(pool._workers) == 3
    for _ in range(20):
        fn, hits = counting(16, delay=1e-3)
        within(pool.run, fn, 16, 2)
        names = {n for h in hits for n in h}
        assert len(names) <= 2 and [len(h) for h in hits] == [1] * 16


def test_kernel_results_equal_at_one_and_two_threads(rng, monkeypatch):
    """A real sharded kernel (Softmax rows through ``config.parallel_for``) gives the same numbers
    at one and two threads, and the same as NumPy."""
    from kernelkit_numba.kernels import softmax, tpair

    monkeypatch.setattr(tpair, "ON", False)  # at two threads the rows pair on fpair's helper (test_tpair.py)

    x = rng.standard_normal((512, 1024)).astype(np.float32)
    def at(threads):  # the budget is per thread: set it on the thread that runs the kernel
        with config.num_threads(threads):
            return softmax.softmax(x, axis=-1), shards.POOL.stats["jobs"]

    shards.POOL.reset()
    got = {}
    for threads in (1, 2):
        jobs = shards.POOL.stats["jobs"]
        got[threads], after = within(at, threads)
        assert (after > jobs) == (threads == 2)  # two threads really shard
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got[1], e / e.sum(axis=-1, keepdims=True), rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(got[1], got[2])


def test_spin_time_from_environment(monkeypatch):
    monkeypatch.setenv(shards.SPIN_ENV, "0")
    assert shards.ShardPool().spin_s == 0.0
    monkeypatch.setenv(shards.SPIN_ENV, "50")
    assert shards.ShardPool().spin_s == pytest.approx(50e-6)
    monkeypatch.setenv(shards.SPIN_ENV, "lots")  # unreadable: the default, logged
    assert shards.ShardPool().spin_s == pytest.approx(shards.DEFAULT_SPIN_US * 1e-6)
    monkeypatch.delenv(shards.SPIN_ENV)
    assert shards.spin_seconds() == pytest.approx(200e-6)


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the spin loop is machine code (workers block without it)")
def test_spin_loop_sees_the_generation():
    spin, rate, wait = shards._spinner()
    flag = np.zeros(4, np.int64)
    assert spin(flag, 0, 10, 1 << 40, False, 0, 0, 0) == 0  # polls as the clock
    assert spin(flag, 1, 10, 1 << 40, False, 0, 0, 0) == 1
    if rate > 0:  # bounded by the cycle counter: ~1 ms of ticks ends a spin of many polls
        t0 = time.perf_counter()
        assert spin(flag, 0, int(1e-3 * rate), 1 << 62, True, 0, 0, 0) == 0
        assert 5e-4 < time.perf_counter() - t0 < 1.0
    threading.Timer(0.01, lambda: flag.__setitem__(0, 5)).start()
    t0 = time.perf_counter()
    while spin(flag, 0, 200, 1 << 40, False, 0, 0, 0) != 1:
        assert time.perf_counter() - t0 < TIMEOUT_S
    assert flag[0] == 5


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the spin loop is machine code (workers block without it)")
def test_heartbeats_keep_the_spin_going():
    """Beats (``flag[1]`` changing) keep a spin going past its idle time (for its beat idle time after
    each); it returns 2 at the cap while they come, 0 once they stop."""
    spin, rate, wait = shards._spinner()
    if rate <= 0:
        pytest.skip("no cycle counter")
    flag = np.zeros(4, np.int64)
    stop = threading.Event()

    def beats():
        while not stop.is_set():
            flag[1] += 1
            time.sleep(2e-4)

    t = threading.Thread(target=beats, daemon=True)
    t.start()
    try:
        t0 = time.perf_counter()
        # idle 20 ms, 50 ms after a beat, cap 200 ms (a loaded box delays the beats)
        got = spin(flag, 0, int(0.02 * rate), int(0.2 * rate), True, 0, 0, int(0.05 * rate))
        took = time.perf_counter() - t0
    finally:
        stop.set()
        t.join()
    assert got == 2 and took > 0.15  # the beats (every 0.2 ms) outlasted the idle times
    assert spin(flag, 0, int(5e-3 * rate), int(0.1 * rate), True, 0, 0, int(5e-3 * rate)) == 0


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the spin loop is machine code (workers block without it)")
def test_the_worker_leaves_a_job_without_the_gil():
    """A spin started with the job the worker has just left stores it in ``flag[3]`` (with the GIL
    released), which ``wait_left`` polls for; a job seen is returned ``after`` clock units late."""
    spin, rate, wait = shards._spinner()
    flag = np.zeros(4, np.int64)
    assert wait(flag, 7, 1000, False) == 0  # nobody left job 7: gives up after its limit
    assert spin(flag, 0, 10, 1 << 40, False, 7, 0, 0) == 0 and flag[3] == 7
    assert wait(flag, 7, 1000, False) == 1
    flag[0] = 1
    if rate > 0:
        t0 = time.perf_counter()
        assert spin(flag, 0, 10, 1 << 40, True, 0, int(2e-3 * rate), 0) == 1
        assert time.perf_counter() - t0 > 1.5e-3  # seen at once, returned 2 ms later


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the spin loop is machine code (workers block without it)")
def test_the_phase_barrier_poll():
    """``_spin.wait_count`` (the phases' barrier, issue 11, session 9): 0 after its limit while the
    count is short, 1 once it is reached, returned ``after`` clock units late."""
    _, rate, _ = shards._spinner()
    from kernelkit_numba import _spin

    count = np.zeros(2, np.int64)
    count[1] = 2
    assert _spin.wait_count(count, 1, 3, 1000, False, 0) == 0
    assert _spin.wait_count(count, 1, 2, 1000, False, 0) == 1
    if rate > 0:
        t0 = time.perf_counter()
        assert _spin.wait_count(count, 1, 2, int(1e-3 * rate), True, int(2e-3 * rate)) == 1
        assert time.perf_counter() - t0 > 1.5e-3  # reached at once, returned 2 ms later


def test_a_heartbeat_wakes_a_sleeping_worker_and_no_beat_while_backed_off():
    """The first beat of a run wakes a sleeping worker (once it has a spin loop), so that it is
    awake for the run's first parallel kernel; a backed-off pool does not beat."""
    pool = shards.ShardPool(200e-6)
    fn, _ = counting(4)
    within(pool.run, fn, 4, 2)  # starts the worker
    deadline = time.perf_counter() + TIMEOUT_S
    while not pool._sleeping:
        assert time.perf_counter() < deadline
        time.sleep(1e-3)
    beats = int(pool._gen[1])
    pool.beat()
    assert pool._gen[1] == beats + 1 and pool._gen[2] == 0  # no spin loop yet: nobody is woken
    pool._can_spin = True
    pool.beat()
    assert pool._gen[2] == 1
    while pool._waking:  # the worker wakes (and, without a job or a spin loop, sleeps again)
        assert time.perf_counter() < deadline
        time.sleep(1e-3)
    pool._back_off("test")
    pool.beat()
    assert pool._gen[1] == beats + 2
    pool.reset()


def test_stall_backs_off_and_current_threads_says_one(monkeypatch):
    """A worker that holds its shard far longer than the caller's whole share (a worker that lost
    its core) is a stall; a second one within STALL_PAIR_S backs the pool off: it then runs jobs on
    the calling thread, and with ``config.KEEP_BUDGET`` off (on by default since issue 11, session 19:
    test_backoff_bits.py) ``current_threads()`` is 1 for that time, so the kernels cut their work
    for one thread."""
    monkeypatch.setattr(config, "KEEP_BUDGET", False)
    pool = shards.POOL
    pool.reset()
    pool.backoff = True  # off for the other tests of this package (conftest)
    start = threading.Event()

    def fn(i):
        if threading.current_thread().name.startswith("kernelkit-numba"):
            start.set()
            time.sleep(0.02)  # the worker's shard: 20 ms, its core taken
        else:
            start.wait(TIMEOUT_S)  # the caller waits until a worker holds a shard

    try:
        stalls = pool.stats["stalls"]
        within(pool.run, fn, 4, 2)
        assert pool.stats["stalls"] == stalls + 1 and not pool.backed_off()  # one stall: a hiccup
        start.clear()
        within(pool.run, fn, 4, 2)
        assert pool.stats["stalls"] == stalls + 2 and pool.backed_off()
        with config.num_threads(2):
            assert config.current_threads() == 1
            assert config.shard_count(1000, 1e12, threads=None) == 1
            seen, hits = counting(8)
            jobs = pool.stats["jobs"]
            within(pool.run, seen, 8, 2)  # backed off: the caller runs every shard
            assert pool.stats["jobs"] == jobs and all(len(h) == 1 for h in hits)
    finally:
        pool.reset()
    with config.num_threads(2):
        assert config.current_threads() == 2


def test_workers_that_never_claim_back_off():
    """Helpers that claim no shard while the caller works for milliseconds (their core is taken)
    back the pool off after ``MISSES`` jobs."""
    pool = shards.ShardPool(0.0)
    pool._serve = lambda: time.sleep(3600)  # workers that never get to run
    for _ in range(pool.MISSES):
        assert not pool.backed_off()
        fn, hits = counting(4, delay=pool.MISS_S / 2)
        within(pool.run, fn, 4, 2)
        assert [len(h) for h in hits] == [1] * 4
    assert pool.stats["misses"] == pool.MISSES and pool.backed_off() and pool.stats["backoffs"] == 1
    pool.reset()
    assert not pool.backed_off()


@pytest.mark.parametrize("spin_us", [0.0, 200.0])
def test_a_stall_share_of_the_callers_time(spin_us):
    """``run``'s stall_share (rnpair.POOL_STALL_SHARE's jobs of two halves): a wait at the end is a stall only past
    that share of the caller's own time, so two waits of 0.7 of it back the pool off at the default share (0.5) and
    not at 1.0; waits past the caller's time do at 1.0. A real job of two halves passes the share through."""
    job = types.SimpleNamespace(claimed=1)
    worked = 10 * shards.ShardPool.STALL_S
    for share, waited, backs in ((0.5, 0.7, True), (1.0, 0.7, False), (1.0, 1.2, True)):
        pool = shards.ShardPool(0.0)
        pool._judge(job, waited * worked, worked, stall_share=share)
        pool._judge(job, waited * worked, worked, stall_share=share)
        assert pool.backed_off() == backs and pool.stats["stalls"] == (2 if backs else 0), (share, waited)
    pool = shards.ShardPool(spin_us * 1e-6)
    seen = []
    pool._judge = lambda job, *a: seen.append(a[-1])
    done = []
    pool.run(done.append, 2, 2, stall_share=1.0)
    pool.run(done.append, 2, 2)
    assert sorted(done) == [0, 0, 1, 1] and seen == [1.0, 0.5]


def test_back_off_grows_while_contention_repeats():
    """The back-off doubles while signs come within CALM_S of the last back-off's end, and starts
    again at MIN_BACKOFF_S after a calm spell; isolated stalls (further apart than STALL_PAIR_S)
    never back off."""
    pool = shards.ShardPool(0.0)
    pool._back_off("test")
    first = pool._backoff
    pool._back_off("test")
    assert first == pool.MIN_BACKOFF_S and pool._backoff == 2 * first and pool.backed_off()
    pool._serial_until = time.perf_counter() - 2 * pool.CALM_S  # ended a calm spell ago
    pool._back_off("test")
    assert pool._backoff == pool.MIN_BACKOFF_S
    pool.reset()
    job = types.SimpleNamespace(claimed=1)
    for _ in range(3):
        pool._judge(job, 2 * pool.STALL_S, pool.STALL_S)
        assert not pool.backed_off()
        pool._last_stall -= 2 * pool.STALL_PAIR_S  # the next stall comes long after
    pool._judge(job, 2 * pool.STALL_S, pool.STALL_S)
    pool._judge(job, 2 * pool.STALL_S, pool.STALL_S)  # two in a row
    assert pool.backed_off() and pool.stats["stalls"] == 5
    pool.reset()
    pool.reset()
    backoffs = pool.stats["backoffs"]
    pool.backoff = False  # signs counted, no back-off
    pool._back_off("test")
    assert not pool.backed_off() and pool.stats["backoffs"] == backoffs


@pytest.mark.parametrize("spin_us", [0.0, 200.0])
def test_error_in_a_worker_shard_reaches_the_caller_typed(spin_us):
    pool = shards.ShardPool(spin_us * 1e-6)
    raised = threading.Event()

    def fn(i):
        if threading.current_thread().name.startswith("kernelkit-numba"):
            raised.set()
            raise ShapeError(f"shard {i} of a worker")
        raised.wait(TIMEOUT_S)  # the caller's shards wait until a worker has raised

    with pytest.raises(ShapeError, match="of a worker"):
        within(pool.run, fn, 8, 2)
    fn2, hits = counting(8)  # the pool still works after the error
    within(pool.run, fn2, 8, 2)
    assert [len(h) for h in hits] == [1] * 8


def test_error_in_the_callers_shard_and_the_rest_skipped():
    pool = shards.ShardPool(0.0)
    ran = []

    def fn(i):
        ran.append(i)
        raise KernelExecutionError(f"shard {i}")

    with pytest.raises(KernelExecutionError):
        within(pool.run, fn, 64, 2)
    assert len(ran) < 64  # shards claimed after the first error are skipped


def test_nested_and_concurrent_callers_do_not_wait_for_the_slot():
    """A shard that runs a parallel job itself, and two threads calling at once: the slot is taken,
    so those callers run their shards on their own thread; every shard still runs once."""
    pool = shards.ShardPool(200e-6)
    inner = [[0] * 4 for _ in range(8)]

    def outer(i):
        def leaf(j):
            inner[i][j] += 1
        pool.run(leaf, 4, 2)

    within(pool.run, outer, 8, 2)
    assert inner == [[1] * 4] * 8 and pool.stats["busy_slot"] >= 1

    results = []

    def caller():
        fn, hits = counting(32, delay=1e-4)
        pool.run(fn, 32, 2)
        results.append([len(h) for h in hits])

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    assert not any(t.is_alive() for t in threads) and results == [[1] * 32] * 3


def test_trace_records_who_ran_each_shard():
    pool = shards.ShardPool(200e-6)
    pool.trace = []
    fn, _ = counting(16, delay=1e-4)
    within(pool.run, fn, 16, 2)
    assert sorted(r[1] for r in pool.trace if r[1] >= 0) == list(range(16))
    (job,) = [r for r in pool.trace if r[1] < 0]  # the job: published, all done, the caller's shards done
    assert job[3] <= job[5] <= job[4] and all(job[3] <= r[3] <= r[4] <= job[4] for r in pool.trace if r[1] >= 0)


def test_a_preempted_caller_backs_off():
    """A caller whose shards got under PREEMPT_SHARE of a core (its thread CPU time against the wall
    time it spent on them: a busy process shares its core) ``MISSES`` jobs in a row backs the pool
    off; a job where it ran at full speed clears the count."""
    pool = shards.ShardPool(0.0)
    job = types.SimpleNamespace(claimed=2)
    worked = 10 * pool.PREEMPT_MIN_S
    for _ in range(pool.MISSES - 1):
        pool._judge(job, 0.0, worked, 0.5 * worked)
    pool._judge(job, 0.0, worked, worked)  # a quiet job: the count starts again
    assert not pool.backed_off() and pool.stats["preempted"] == pool.MISSES - 1
    for _ in range(pool.MISSES):
        assert not pool.backed_off()
        pool._judge(job, 0.0, worked, 0.5 * worked)
    assert pool.backed_off() and pool.stats["backoffs"] == 1 and pool.stats["preempted"] == 2 * pool.MISSES - 1
    pool._judge(job, 0.0, pool.PREEMPT_MIN_S / 2, 0.0)  # too short a share to tell
    assert pool.stats["preempted"] == 2 * pool.MISSES - 1


def test_short_jobs_nobody_helps_back_off():
    """Short jobs (the caller worked SHORT_MISS_S to MISS_S) that no worker claimed from, although
    workers spin (they have their spin loop) and none was asleep when the job came, ``SHORT_MISSES``
    in a row back the pool off: the worker has no core (a busy process holds it). Before workers
    spin, or with one asleep (woken late by design), such jobs are no sign; a helped job clears the count."""
    pool = shards.ShardPool(0.0)
    unhelped, helped = types.SimpleNamespace(claimed=0), types.SimpleNamespace(claimed=1)
    worked = 2 * pool.SHORT_MISS_S
    for _ in range(2 * pool.SHORT_MISSES):
        pool._judge(unhelped, 0.0, worked, worked)  # no spin loop yet: workers sleep between jobs
        pool._judge(unhelped, 0.0, worked, worked, 1)
    assert pool.stats["short_misses"] == 0
    pool._can_spin = True
    for _ in range(2 * pool.SHORT_MISSES):
        pool._judge(unhelped, 0.0, worked, worked, 1)  # a worker asleep at publication
    for _ in range(pool.SHORT_MISSES - 1):
        pool._judge(unhelped, 0.0, worked, worked)
    pool._judge(helped, 0.0, worked, worked)
    pool._judge(unhelped, 0.0, pool.SHORT_MISS_S / 2, 0.0)  # too short to tell
    assert not pool.backed_off() and pool.stats["short_misses"] == pool.SHORT_MISSES - 1
    for _ in range(pool.SHORT_MISSES):
        assert not pool.backed_off()
        pool._judge(unhelped, 0.0, worked, worked)
    assert pool.backed_off() and pool.stats["backoffs"] == 1


def test_short_jobs_of_a_worker_without_a_core_back_off():
    """The same through ``run``: a worker that never runs (its core taken) while the pool counts it
    as spinning; every shard still runs once, on the caller."""
    pool = shards.ShardPool(0.0)
    pool._serve = lambda: time.sleep(3600)
    pool._can_spin = True
    pool.MISS_S = pool.PREEMPT_MIN_S = float("inf")  # this rule alone (a loaded box stretches the jobs)
    hits = [0] * 4

    def fn(i):
        hits[i] += 1
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < pool.SHORT_MISS_S / 2:
            pass

    for _ in range(pool.SHORT_MISSES):
        assert not pool.backed_off()
        within(pool.run, fn, 4, 2)
    assert hits == [pool.SHORT_MISSES] * 4
    assert pool.backed_off() and pool.stats["short_misses"] == pool.SHORT_MISSES


def test_late_workers_back_off():
    """Jobs a worker helped with, but came to more than LATE_S after publication although it spins
    (the spin loop exists, none asleep), ``LATE_MISSES`` in a row back the pool off: it has no core.
    A worker asleep at publication, or before workers spin, is no sign; a prompt one clears the count."""
    pool = shards.ShardPool(0.0)
    helped = types.SimpleNamespace(claimed=1)
    worked, late, prompt = 2 * pool.SHORT_MISS_S, 2 * pool.LATE_S, pool.LATE_S / 10
    for _ in range(2 * pool.LATE_MISSES):
        pool._judge(helped, 0.0, worked, worked, 0, late)  # no spin loop yet
    pool._can_spin = True
    for _ in range(2 * pool.LATE_MISSES):
        pool._judge(helped, 0.0, worked, worked, 1, late)  # asleep at publication: woken late by design
    assert pool.stats["late"] == 0
    for _ in range(pool.LATE_MISSES - 1):
        pool._judge(helped, 0.0, worked, worked, 0, late)
    pool._judge(helped, 0.0, worked, worked, 0, prompt)
    assert not pool.backed_off() and pool.stats["late"] == pool.LATE_MISSES - 1
    for _ in range(pool.LATE_MISSES):
        assert not pool.backed_off()
        pool._judge(helped, 0.0, worked, worked, 0, late)
    assert pool.backed_off() and pool.stats["backoffs"] == 1


def test_a_caller_short_of_a_core_through_a_run_backs_off():
    """The heartbeat's windows (``WINDOW_S``): the calling thread's CPU time under WINDOW_SHARE of
    the wall time, ``WINDOW_MISSES`` windows in a row, backs the pool off; a gap between beats longer
    than WINDOW_GAP_S (between runs) or a beat from another thread starts a new window, and a window
    at full speed clears the count."""
    pool = shards.ShardPool(0.0)
    cpu = [0.0]
    pool._thread_time = lambda: cpu[0]
    step = pool.WINDOW_S / 10

    def beats(n, t, share):
        for _ in range(n):
            t += step
            cpu[0] += share * step
            pool._window(t)
        return t

    t = beats(15, 0.0, 1.0)
    assert pool.stats["windows"] >= 1 and pool.stats["slow_windows"] == 0
    t = beats(11, t, 0.5)  # one slow window
    t = beats(11, t, 1.0)  # a full one clears the count
    assert pool.stats["slow_windows"] == 1 and not pool.backed_off()
    for _ in range(3):  # long gaps between beats (between runs): no window is judged
        t += 2 * pool.WINDOW_GAP_S
        pool._window(t)
    t = beats(5, t, 0.5)
    assert pool.stats["slow_windows"] == 1
    t = beats(25, t, 0.5)
    assert pool.backed_off() and pool.stats["backoffs"] == 1
    pool.reset()
    windows = pool.stats["windows"]
    other = threading.Thread(target=lambda: pool._window(t + step))
    other.start()
    other.join()
    beats(5, t + step, 0.5)  # after another thread's beat, a new window
    assert pool.stats["windows"] == windows


def test_a_beating_caller_that_sleeps_backs_off():
    """The same through ``beat``: a caller that beats every 2 ms and sleeps in between (its thread
    CPU time far under its wall time) backs the pool off within a few windows; no beat counts
    while backed off, nor before the pool has a worker (no parallel job yet: nothing to keep awake
    or to make serial)."""
    pool = shards.ShardPool(0.0)
    for _ in range(3):
        pool.beat()
    assert int(pool._gen[1]) == 0 and pool.stats["windows"] == 0
    fn, _ = counting(4)
    within(pool.run, fn, 4, 2)  # starts the worker
    t0 = time.perf_counter()
    while not pool.backed_off() and time.perf_counter() - t0 < 5.0:
        pool.beat()
        time.sleep(0.002)
    assert pool.backed_off() and pool.stats["slow_windows"] >= pool.WINDOW_MISSES
    beats = int(pool._gen[1])
    pool.beat()
    assert int(pool._gen[1]) == beats


def _expire(pool, idle_s: float, cpu_s: float, wall_s: float = 0.1) -> None:
    """End the current back-off now, as if it had lasted ``wall_s`` with the affinity CPUs idle for
    ``idle_s`` and this process busy for ``cpu_s`` (a synthetic probe: nothing is timed)."""
    now = time.perf_counter()
    wall, idle, cpu = pool._probe
    pool._probe = (now - wall_s, idle, cpu)
    pool._serial_until = now - 1e-6
    pool.clock["idle"] = idle + idle_s
    pool.clock["cpu"] = cpu + cpu_s


def _probed_pool():
    pool = shards.ShardPool(0.0)
    pool.clock = {"idle": 100.0, "cpu": 5.0}
    pool._idle_time = lambda: pool.clock["idle"]
    pool._process_time = lambda: pool.clock["cpu"]
    return pool


def test_a_back_off_lasts_while_no_core_is_free():
    """At the end of a back-off the pool looks at how much of a core a second thread had through
    it (idle time of the affinity CPUs + this process's CPU time, over the wall time, less the
    caller's core): under FREE_CORES (a busy process on the other core, whether the caller ran or
    waited) it backs off again, doubling; with a core free it comes back, and a back-off without a
    reading (not Linux) or with FREE_CORES = 0 ends on time."""
    pool = _probed_pool()
    pool._back_off("test")
    assert pool._probe is not None and pool.backed_off()
    _expire(pool, idle_s=0.0, cpu_s=0.1)  # the caller busy on one core, the busy process on the other
    assert pool.backed_off() and pool.stats["held"] == 1 and pool._backoff == 2 * pool.MIN_BACKOFF_S
    _expire(pool, idle_s=0.09, cpu_s=0.01)  # the caller mostly idle, the other core still busy
    assert pool.backed_off() and pool.stats["held"] == 2 and pool._backoff == 4 * pool.MIN_BACKOFF_S
    _expire(pool, idle_s=0.1, cpu_s=0.1)  # quiet: the other core idle
    assert not pool.backed_off() and pool.stats["held"] == 2 and pool._probe is None
    assert not pool.backed_off()  # looked once; stays on
    pool._back_off("test")
    _expire(pool, idle_s=0.19, cpu_s=0.01)  # quiet and the caller idle between requests
    assert not pool.backed_off() and pool.stats["backoffs"] == 4  # two of them held

    pool.FREE_CORES = 0.0  # off: no look
    pool._back_off("test")
    assert pool._probe is None
    pool._serial_until = time.perf_counter() - 1e-6
    assert not pool.backed_off()
    unreadable = shards.ShardPool(0.0)
    unreadable._idle_time = lambda: None
    unreadable._back_off("test")
    assert unreadable._probe is None
    unreadable._serial_until = time.perf_counter() - 1e-6
    assert not unreadable.backed_off()


def test_a_back_off_looked_at_long_after_its_end_ends():
    """A first job long after the back-off's end (an idle process: between requests, or while other
    processes ran) does not read the CPUs' use over that gap as its own load: no hold, the pool is back."""
    pool = _probed_pool()
    pool._back_off("test")
    _expire(pool, idle_s=0.0, cpu_s=0.1, wall_s=1.0)  # the other core busy all along...
    pool._serial_until -= 2 * pool.STALE_PROBE_S  # ...but the back-off ended long before this look
    assert not pool.backed_off() and pool.stats["held"] == 0 and pool._probe is None
    pool._back_off("test")
    _expire(pool, idle_s=0.0, cpu_s=0.1)  # looked at right at the end: still held
    assert pool.backed_off() and pool.stats["held"] == 1


def test_a_loaded_process_looks_again_after_a_gap():
    """HOLD_S: a process whose last held look was within HOLD_S, back after an idle gap past the back-off's end,
    backs off again with a fresh look (``rehold``) instead of coming back without one; that look decides: still
    loaded, held (and the hold renewed); a core free, the pool comes back. Past HOLD_S, or off, it comes back."""
    pool = _probed_pool()
    pool.HOLD_S = 5.0
    pool._back_off("test")
    _expire(pool, idle_s=0.0, cpu_s=0.1)  # the busy process on the other core: held
    assert pool.backed_off() and pool.stats["held"] == 1
    held_at = pool.last_held
    _expire(pool, idle_s=0.0, cpu_s=0.1, wall_s=1.0)
    pool._serial_until -= 2 * pool.STALE_PROBE_S  # an idle gap past the back-off's end
    assert pool.backed_off() and pool.stats["rehold"] == 1 and pool.stats["held"] == 1
    assert pool._probe is not None and pool._serial_until > time.perf_counter()  # a back-off with its own look
    _expire(pool, idle_s=0.0, cpu_s=0.1)  # still loaded
    assert pool.backed_off() and pool.stats["held"] == 2 and pool.last_held > held_at
    _expire(pool, idle_s=0.0, cpu_s=0.1, wall_s=1.0)
    pool._serial_until -= 2 * pool.STALE_PROBE_S
    assert pool.backed_off() and pool.stats["rehold"] == 2
    _expire(pool, idle_s=0.1, cpu_s=0.1)  # the load has gone: back
    assert not pool.backed_off() and pool.stats["held"] == 2 and pool._probe is None
    pool._back_off("test")  # a later back-off, looked at long after its end
    _expire(pool, idle_s=0.0, cpu_s=0.1, wall_s=1.0)
    pool._serial_until -= 2 * pool.STALE_PROBE_S
    pool.last_held -= pool.HOLD_S  # loaded longer ago than HOLD_S: back without a look
    assert not pool.backed_off() and pool.stats["rehold"] == 2
    pool.HOLD_S = 0.0  # off: a gap right after a held look comes back too
    pool._back_off("test")
    _expire(pool, idle_s=0.0, cpu_s=0.1)
    assert pool.backed_off() and pool.stats["held"] == 3
    _expire(pool, idle_s=0.0, cpu_s=0.1, wall_s=1.0)
    pool._serial_until -= 2 * pool.STALE_PROBE_S
    assert not pool.backed_off() and pool.stats["rehold"] == 2
    pool.reset()
    assert pool.last_held == float("-inf")


def test_a_held_back_off_does_not_beat():
    """The heartbeat of a run after a back-off's end looks first: still loaded, no beat (the workers
    keep sleeping) and the pool stays backed off; free, the beat goes on."""
    pool = _probed_pool()
    fn, _ = counting(4)
    within(pool.run, fn, 4, 2)  # starts the worker (no beat before the pool has one)
    pool.reset()  # whatever signs that job left (a loaded machine)
    pool._back_off("test")
    beats = int(pool._gen[1])
    _expire(pool, idle_s=0.0, cpu_s=0.1)
    pool.beat()
    assert pool._gen[1] == beats and pool.stats["held"] == 1 and pool.backed_off()
    _expire(pool, idle_s=0.1, cpu_s=0.1)
    pool.beat()
    assert pool._gen[1] == beats + 1 and not pool.backed_off()
    pool._back_off("test")
    pool.reset()
    assert pool._probe is None and not pool.backed_off()


def test_the_idle_reading(monkeypatch):
    """``/proc/stat``'s idle seconds of the affinity CPUs: a number that grows (or None off Linux),
    and None when a CPU of the affinity has no line there (then back-offs end on time)."""
    first = shards._proc_stat_idle()
    if first is None:
        pytest.skip("no /proc/stat")
    assert first >= 0.0 and shards._proc_stat_idle() >= first
    monkeypatch.setattr(shards.os, "sched_getaffinity", lambda pid: {0, 1 << 20})
    assert shards._proc_stat_idle() is None


def test_no_beat_while_the_caller_shares_its_core():
    """A preempted job or a slow window (signs that the caller shares its core, before a back-off)
    stop the heartbeat, so the worker's spin ends and its free core goes idle; a job at full speed
    starts the beats again."""
    pool = shards.ShardPool(0.0)
    fn, _ = counting(4)
    within(pool.run, fn, 4, 2)  # starts the worker (no beat before the pool has one)
    pool.reset()  # whatever signs that job left (a loaded machine)
    pool.HUSH_ON_SIGN = True  # off by default (shards.ShardPool.HUSH_ON_SIGN)
    job = types.SimpleNamespace(claimed=2)
    worked = 10 * pool.PREEMPT_MIN_S
    beats = int(pool._gen[1])
    pool.beat()
    assert pool._gen[1] == beats + 1
    pool._judge(job, 0.0, worked, 0.5 * worked)  # one preempted job
    pool.beat()
    assert pool._gen[1] == beats + 1 and not pool.backed_off()
    pool._judge(job, 0.0, worked, worked)  # at full speed again
    pool.beat()
    assert pool._gen[1] == beats + 2
    pool._slow = 1  # a slow window
    pool.beat()
    assert pool._gen[1] == beats + 2


@pytest.mark.parametrize("spin_us", [0.0, 200.0])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_phases_start_after_the_phase_before(spin_us, threads):
    """``run``'s phases (issue 11, session 9): every shard runs once, and no shard of a phase starts
    before every shard of the phase before has finished, on whichever threads (uneven shard times:
    the other threads wait at the barrier, polling once the spin loops exist, else on the lock)."""
    pool = shards.ShardPool(spin_us * 1e-6)
    ends = (3, 4, 9)  # phases of 3, 1, 5 and 2 shards
    count = 11
    for _ in range(pool.SPIN_AFTER_JOBS + 4):  # past the jobs after which workers spin
        spans = [[] for _ in range(count)]

        def fn(i, spans=spans):
            t0 = time.perf_counter()
            time.sleep(1e-4 * (1 + i % 3))
            spans[i].append((t0, time.perf_counter(), threading.current_thread().name))

        within(pool.run, fn, count, threads, ends)
        assert [len(s) for s in spans] == [1] * count
        bounds = (0, *ends, count)
        for p in range(1, len(bounds) - 1):
            done = max(spans[i][0][1] for i in range(bounds[p - 1], bounds[p]))
            assert all(spans[i][0][0] >= done for i in range(bounds[p], bounds[p + 1]))
    if threads > 1:
        assert pool.stats["jobs"] > 0


def test_phases_error_reaches_the_caller_and_the_pool_goes_on():
    """An error in a phase's shard: the later phases' barriers still open (the failed shard counts as
    finished), the caller gets the error, and the next job runs every shard."""
    pool = shards.ShardPool(200e-6)

    def fn(i):
        if i == 1:
            raise ShapeError("shard 1 of phase 0")
        time.sleep(5e-5)

    with pytest.raises(ShapeError, match="phase 0"):
        within(pool.run, fn, 8, 2, (2, 5))
    fn2, hits = counting(8, delay=2e-5)
    within(pool.run, fn2, 8, 2, (2, 5))
    assert [len(h) for h in hits] == [1] * 8


def test_run_phases_calls_each_part_in_order(monkeypatch):
    """config.run_phases: each part's shards with their own numbers, parts in order, empty parts
    skipped; one job on the pool."""
    monkeypatch.setattr(config, "default_threads", lambda: 2)
    seen = []
    lock = threading.Lock()

    def part(name):
        def fn(i):
            with lock:
                seen.append((name, i))
        return fn

    jobs = shards.POOL.stats["jobs"] + shards.POOL.stats["serial_jobs"]
    within(config.run_phases, [(part("a"), 3), (part("none"), 0), (part("b"), 1), (part("c"), 4)])
    assert sorted(seen) == sorted([("a", i) for i in range(3)] + [("b", 0)] + [("c", i) for i in range(4)])
    order = [name for name, _ in seen]
    assert order.index("b") > max(k for k, n in enumerate(order) if n == "a")
    assert min(k for k, n in enumerate(order) if n == "c") > order.index("b")
    assert shards.POOL.stats["jobs"] + shards.POOL.stats["serial_jobs"] == jobs + 1


def test_a_worker_stalled_before_a_barrier_is_a_stall():
    """A caller waiting at a phase's barrier for a worker's long shard counts a stall (its longest
    wait, as at a job's end), and the time there is not its work: a job whose worker holds the last
    shard of the first phase for 20 ms while the caller's shards take ~1 ms."""
    pool = shards.ShardPool(200e-6)
    pool.backoff = False
    seen = []

    def fn(i):
        worker = threading.current_thread().name.startswith("kernelkit-numba")
        if i < 2:
            if worker:
                seen.append(i)
                time.sleep(0.02)
            else:
                time.sleep(1e-3)  # the caller's first shard: the worker comes meanwhile

    for _ in range(20):  # until the worker took a shard of the first phase
        before = pool.stats["stalls"]
        seen.clear()
        within(pool.run, fn, 4, 2, (2,))
        if seen:
            assert pool.stats["stalls"] == before + 1
            break
    else:
        pytest.skip("the worker never came within the caller's first shard on this box")

"""The backend's thread pool: work cut into shards that whichever thread is running claims.

Numba's ``prange`` and OpenBLAS's own threads split a loop statically, one share per thread, and
the caller waits at a join for every share. When another process holds one of the cores, the
share of the thread that waits for that core arrives a scheduler time slice late (4-8 ms), so
each parallel region of a few microseconds takes milliseconds: on 2 cores with one of them busy,
a 512x512 ``prange`` loop ran 121x slower at 2 threads than at 1 (docs/numba.md).

Here a parallel call is cut into many more shards than threads. The shards are claimed one at a
time from a shared counter by the calling thread and by up to ``threads - 1`` pool workers; a
worker that is not running yet claims nothing, so the caller finishes every shard itself and only
waits for the shards a worker has already started (onnxruntime's pool works this way). Workers
block on a queue while idle (no spinning), and the kernels they run are ``nogil`` Numba functions
or BLAS calls made at one BLAS thread, so the threads really run in parallel and BLAS never starts
threads of its own. A worker can still lose its core in the middle of a shard; when the caller
then waits for it longer than ``ShardPool.STALL_S``, the pool runs jobs on the calling thread
alone for a while (``ShardPool._judge``), so that a loaded machine costs about what one thread
costs rather than a scheduler slice per parallel region.
"""
from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time

log = logging.getLogger("kernelkit.numba")


class _Job:
    """One parallel call: ``fn(i)`` for every shard ``i`` in ``range(count)``."""

    __slots__ = ("fn", "count", "claim", "left", "lock", "done", "error")

    def __init__(self, fn, count: int):
        self.fn, self.count = fn, count
        self.claim = itertools.count().__next__  # atomic under the GIL: each index is claimed once
        self.left = count
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def work(self) -> None:
        """Claim and run shards until none is left; count the finished ones."""
        finished = 0
        fn, count = self.fn, self.count
        while True:
            i = self.claim()
            if i >= count:
                break
            try:
                fn(i)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                self.error = self.error or exc
            finished += 1
        if finished:
            with self.lock:
                self.left -= finished
                if self.left == 0:
                    self.done.set()


class ShardPool:
    """Persistent worker threads (started on first use, never more than asked for) that help the
    calling thread through a job's shards."""

    # A stall: the caller, done with every unclaimed shard, waited this long (and longer than half
    # its own share) for a worker's shard, which means the worker lost its core mid-shard to another
    # process (a scheduler slice, milliseconds). The pool then runs jobs on the calling thread alone
    # for a back-off period, doubling (up to MAX_BACKOFF_S) while stalls keep coming within
    # CALM_S of each other, so a machine that stays loaded is probed for a core rarely.
    STALL_S = 5e-4
    MIN_BACKOFF_S, MAX_BACKOFF_S, CALM_S = 0.05, 2.0, 10.0

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._serial_until = 0.0
        self._backoff = self.MIN_BACKOFF_S
        self._last_stall = float("-inf")
        self.stalls = 0  # count, for benchmarks and tests

    def _ensure(self, n: int) -> None:
        if os.getpid() != self._pid:  # forked child: the parent's threads did not come along
            self._queue, self._workers, self._pid = queue.SimpleQueue(), [], os.getpid()
        if len(self._workers) >= n:
            return
        with self._lock:
            while len(self._workers) < n:
                t = threading.Thread(target=self._serve, name=f"kernelkit-numba-{len(self._workers)}", daemon=True)
                t.start()
                self._workers.append(t)

    def _serve(self) -> None:
        q = self._queue
        while True:
            job = q.get()  # blocks without spinning
            job.work()

    def run(self, fn, count: int, threads: int) -> None:
        """Call ``fn(i)`` for ``i`` in ``range(count)`` on the calling thread and up to
        ``threads - 1`` workers; returns when every shard has finished (re-raising the first error)."""
        helpers = min(threads, count) - 1
        if helpers <= 0 or time.perf_counter() < self._serial_until:
            for i in range(count):
                fn(i)
            return
        self._ensure(helpers)
        job = _Job(fn, count)
        for _ in range(helpers):
            self._queue.put(job)
        t0 = time.perf_counter()
        job.work()
        if job.left:
            t1 = time.perf_counter()
            job.done.wait()
            self._judge(time.perf_counter() - t1, t1 - t0)
        if job.error is not None:
            raise job.error

    def _judge(self, waited: float, worked: float) -> None:
        """After a stall, run on the calling thread alone for a while (longer while stalls repeat)."""
        if waited > self.STALL_S and waited > 0.5 * worked:
            now = time.perf_counter()
            calm = now - self._last_stall > self.CALM_S
            self._backoff = self.MIN_BACKOFF_S if calm else min(2 * self._backoff, self.MAX_BACKOFF_S)
            self._last_stall, self._serial_until = now, now + self._backoff
            self.stalls += 1
            log.debug("shard pool: waited %.2f ms for a worker; serial for %.2f s", waited * 1e3, self._backoff)


POOL = ShardPool()

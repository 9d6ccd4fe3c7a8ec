"""The backend's thread pool: work cut into shards that whichever thread is running claims.

Numba's ``prange`` and OpenBLAS's own threads split a loop statically, one share per thread, and
the caller waits at a join for every share. When another process holds one of the cores, the
share of the thread that waits for that core arrives a scheduler time slice late (4-8 ms), so
each parallel region of a few microseconds takes milliseconds: on 2 cores with one of them busy,
a 512x512 ``prange`` loop ran 121x slower at 2 threads than at 1 (docs/numba.md).

Here a parallel call is cut into many more shards than threads, claimed one at a time from a
shared counter by the calling thread and by up to ``threads - 1`` pool workers; a worker that is
not running yet claims nothing, so the caller finishes every shard itself and only waits for the
shards a worker has already started (onnxruntime's pool works this way). The kernels the shards
run are ``nogil`` Numba functions or BLAS calls made at one BLAS thread, so the threads really run
in parallel and BLAS never starts threads of its own.

How a job reaches the workers (issue 11, session 4; docs/numba.md, "Shard pool"):

- **One job slot and a generation counter.** The caller puts the job in the slot and bumps the
  generation (an int64 in a NumPy array); a worker waits for the generation to change. A second
  caller that finds the slot taken (another session's run, a shard that itself runs a parallel
  kernel) runs its shards on its own thread: nothing ever waits for the slot.
- **A bounded spin, without the GIL.** A worker that has just finished a job polls the generation
  for ``KERNELKIT_NUMBA_SPIN_US`` microseconds (default 200; 0: never) in a ``nogil`` Numba loop
  with ``sched_yield`` between polls, so a model's next parallel kernel, tens of microseconds
  later, finds it awake; then it blocks on a condition variable. A worker whose spins keep running
  out (``SPIN_MISSES`` in a row: the jobs are far apart, or its core is taken) blocks at once, and
  spins again once a job comes within the spin time of its going to sleep. The loop (``_spin.py``,
  bounded by the cycle counter, one ``nogil`` call per spin) is built by a worker after
  ``SPIN_AFTER_JOBS`` jobs, so a first run never waits for Numba to load it.
- **A heartbeat through a run** (issue 11, session 7). Every node of a multi-thread session calls
  ``beat()``: the spin goes on until ``BEAT_IDLE_S`` after the last beat, so serial nodes between
  two parallel ones no longer put the worker to sleep, and a run's first beat wakes a sleeping one.
  No beat while a sign says the caller shares its core (a preempted job, a slow window: session 8).
- **GIL hand-offs without sleeping on the GIL.** A thread that asks for the GIL while the other
  holds it sleeps on CPython's GIL condition and wakes tens of microseconds late. A worker that sees
  a job waits ``CLAIM_AFTER_S`` in its spin before taking the GIL (the caller's first kernel has
  released it by then); a caller done with its shards polls (``_spin.wait_left``, without the GIL,
  up to ``WAIT_LEFT_S``) until the worker, back in its spin, stores the job it has left.
- **Jobs of phases** (issue 11, session 9). ``run(..., phases)``: a shard of a phase starts once
  every shard of the phase before has finished (a barrier polled without the GIL, then the phase's
  lock), so a kernel's steps in a row (Winograd's input transform, products and output transform;
  an im2col and its product) are one publication, one wake-up and one end wait; the caller's time
  at the barriers counts as waiting for the back-off signs.
- **Back-off under contention.** The caller watches each job: a helper that claimed no shard
  although the caller worked longer than ``MISS_S`` (an awake worker claims within microseconds, a
  woken one within ~0.1 ms: it had no core), ``MISSES`` jobs in a row, or longer than
  ``SHORT_MISS_S`` while workers spin, ``SHORT_MISSES`` jobs in a row, or two *stalls* within
  ``STALL_PAIR_S`` (the caller, done with every unclaimed shard, waited longer than ``STALL_S`` and
  longer than half its own share for a shard a worker had started: the worker lost its core
  mid-shard; one alone is a hiccup), or the caller itself running its shards on a shared core (its
  thread CPU time under ``PREEMPT_SHARE`` of the wall time it spent on them, ``MISSES`` jobs in a
  row: three runnable threads on two cores, where the second thread's gain is smaller than what the
  caller loses), or a worker late to ``LATE_MISSES`` jobs in a row (``LATE_S``), or the caller
  under ``WINDOW_SHARE`` of a core through a run (``WINDOW_S``, measured at the heartbeat) backs
  the pool off: for ``MIN_BACKOFF_S`` (doubling up to ``MAX_BACKOFF_S`` while signs come within
  ``CALM_S`` of the last back-off's end) every job runs on the calling thread, and
  ``config.current_threads()`` says 1 so that kernels cut their work for one thread (no shards, one
  GEMM call) and BLAS and the kernels agree on one thread count. Workers do not spin meanwhile.
- **A back-off lasts while the load does** (issue 11, session 8). When a back-off ends, the pool
  looks at the CPUs it may run on (``/proc/stat``'s idle time of the affinity CPUs, plus this
  process's own CPU time, over the back-off): with less than ``FREE_CORES`` of a core left for a
  second thread, it backs off again (doubling, up to ``MAX_BACKOFF_S``) instead of starting the
  workers, spinning them through a run and waiting for the signs to fire once more.

``trace`` (a list, or None) records every shard ``(job, shard, thread name, start, end)`` and every
job ``(job, -1, caller, published, all done, caller's shards done)`` for ``benchmarks/trace_pool.py``;
``stats`` counts jobs, back-offs and their reasons.
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
import time

import numpy as np

log = logging.getLogger("kernelkit.numba")

SPIN_ENV = "KERNELKIT_NUMBA_SPIN_US"
DEFAULT_SPIN_US = 200.0


def spin_seconds() -> float:
    """The workers' spin time from ``$KERNELKIT_NUMBA_SPIN_US`` (microseconds, >= 0; default 200)."""
    raw = os.environ.get(SPIN_ENV, "")
    try:
        us = float(raw) if raw.strip() else DEFAULT_SPIN_US
    except ValueError:
        log.warning("$%s=%r is not a number of microseconds; using %g", SPIN_ENV, raw, DEFAULT_SPIN_US)
        us = DEFAULT_SPIN_US
    return max(0.0, us) * 1e-6


_spin_fn = None
_spin_lock = threading.Lock()


def _spinner():
    """``(spin, ticks per second, wait_left)`` of the ``nogil`` polling loops (compiled, or loaded
    from the cache, by the first worker that asks; None when they cannot be built: workers then
    block without spinning). Ticks per second 0: no cycle counter, the loops count polls."""
    global _spin_fn
    if _spin_fn is None:
        with _spin_lock:
            if _spin_fn is None:
                try:
                    _spin_fn = _build_spinner()
                except Exception as exc:  # noqa: BLE001 - spinning is an optimisation only
                    log.debug("shard pool: no spin loop (%s: %s); workers block", type(exc).__name__, exc)
                    _spin_fn = False
    return _spin_fn or None


def _build_spinner():
    """``_spin.build()``: the polling loops (``_spin.py``), each one ``nogil`` call, so that a
    spinning worker never takes the GIL (one that took it between polls and then lost its core held
    up the caller for a scheduler slice: MLP 2.2x slower than at one thread on the loaded 2-core
    box); with the counter's ticks per second."""
    global _gate_fn
    from . import _spin

    built = _spin.build()
    _gate_fn = _spin.wait_count
    return built


# ``_spin.wait_count`` once a worker has built the spin loops (with them): the phases' barrier polls
# with it; None before, when a thread at a barrier sleeps on the phase's lock at once
_gate_fn = None


def proc_stat_seconds(columns: tuple[int, ...]) -> float | None:
    """Seconds the CPUs of this process's affinity spent in ``columns`` of ``/proc/stat``'s cpu lines
    since boot (4, 5: idle and iowait; 8: stolen by the hypervisor), or None where that cannot be
    read (not Linux, or a ``/proc/stat`` without a line for each of those CPUs: a container's view
    of other numbers)."""
    try:
        cpus = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        ticks, found = 0, 0
        with open("/proc/stat") as f:
            for line in f:
                if not line.startswith("cpu"):
                    break
                parts = line.split()
                if parts[0] in cpus:
                    ticks += sum(int(parts[c]) for c in columns)
                    found += 1
        return ticks / os.sysconf("SC_CLK_TCK") if found == len(cpus) else None
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _proc_stat_idle() -> float | None:
    """Seconds the CPUs of this process's affinity spent idle since boot (idle and iowait)."""
    return proc_stat_seconds((4, 5))


class _Job:
    """One parallel call: ``fn(i)`` for every shard ``i`` in ``range(count)``; with ``ends`` (the
    shard numbers where a new phase starts, ascending), no shard of a phase starts before every shard
    of the phase before it has finished (``_gate``)."""

    __slots__ = ("fn", "count", "claim", "left", "lock", "done", "error", "claimed", "serial_id", "trace",
                 "helpers", "ticket", "first", "ends", "fin", "gates", "held", "held_cpu", "held_max", "gate_limit")

    def __init__(self, fn, count: int, serial_id: int, trace, helpers: int = 0, ends: tuple = (),
                 gate_limit: tuple | None = None):
        self.fn, self.count, self.serial_id, self.trace, self.helpers = fn, count, serial_id, trace, helpers
        self.ends = ends
        # the caller's wall and CPU time at the phases' barriers, and its longest wait at one
        self.held = self.held_cpu = self.held_max = 0.0
        # (clock units of the barrier's poll, counter, units to wait after it: GATE_AFTER_S), None: no poll
        self.gate_limit = gate_limit
        if ends:
            self.fin = np.zeros(len(ends), np.int64)  # finished shards per phase (all but the last)
            self.gates = [threading.Lock() for _ in ends]  # released when the phase's last shard finishes
            for g in self.gates:
                g.acquire()
        self.claim = itertools.count().__next__  # atomic under the GIL: each index is claimed once
        self.ticket = itertools.count().__next__  # workers beyond ``helpers`` leave the job alone
        self.left = count
        self.lock = threading.Lock()
        # held until the last shard finishes (a plain lock as a one-shot signal: an Event costs
        # ~3 us to make and ~1.5 us to set, a few percent of a MobileNetV2 layer's job)
        self.done = threading.Lock()
        self.done.acquire()
        self.error: BaseException | None = None
        self.claimed = 0  # shards the workers (not the caller) claimed
        self.first = 0.0  # when the first worker came to the job (perf_counter), 0: none came

    def work(self, helper: bool) -> None:
        """Claim and run shards until none is left; count the finished ones."""
        finished = 0
        fn, count, trace = self.fn, self.count, self.trace
        if helper and not self.first:
            self.first = time.perf_counter()
        name = threading.current_thread().name if trace is not None else ""
        ends = self.ends
        p = 0
        while True:
            i = self.claim()
            if i >= count:
                break
            if ends:
                while p < len(ends) and i >= ends[p]:
                    p += 1
                if p and self.fin[p - 1] < ends[p - 1] - (ends[p - 2] if p > 1 else 0):
                    self._gate(p - 1, helper)
            if self.error is None:  # after an error the other shards are skipped (claimed, not run)
                t0 = time.perf_counter() if trace is not None else 0.0
                try:
                    fn(i)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                    if self.error is None:
                        self.error = exc
                if trace is not None:
                    trace.append((self.serial_id, i, name, t0, time.perf_counter()))
            if p < len(ends):  # a shard of a phase that another one waits for
                with self.lock:
                    self.fin[p] += 1
                    if self.fin[p] == ends[p] - (ends[p - 1] if p else 0):
                        self.gates[p].release()
            finished += 1
        if finished:
            with self.lock:
                self.left -= finished
                if helper:
                    self.claimed += finished
                if self.left == 0:
                    self.done.release()

    def _gate(self, q: int, helper: bool) -> None:
        """Wait until every shard of phase ``q`` has finished (they are all claimed: shards are claimed
        in order): a ``nogil`` poll (``_spin.wait_count``) up to the pool's ``WAIT_LEFT_S``, then sleep
        on the phase's lock. The caller's time here counts as waiting (``ShardPool._judge``)."""
        t0, c0 = time.perf_counter(), (0.0 if helper else time.thread_time())
        target = self.ends[q] - (self.ends[q - 1] if q else 0)
        gate, limit = _gate_fn, self.gate_limit
        if gate is not None and limit is not None:
            gate(self.fin, q, target, limit[0], limit[1], limit[2])
        if self.fin[q] < target:
            lock = self.gates[q]
            lock.acquire()
            lock.release()
        if not helper:
            waited = time.perf_counter() - t0
            self.held += waited
            self.held_max = max(self.held_max, waited)
            self.held_cpu += time.thread_time() - c0


class ShardPool:
    """Persistent worker threads (started on first use, never more than asked for) that help the
    calling thread through a job's shards."""

    # caller-side contention signs (module docstring); a wait at a job's end is a stall past STALL_S and past
    # STALL_SHARE of the caller's own time on its shards (run's stall_share: a job's own share)
    STALL_S = 5e-4
    STALL_SHARE = 0.5
    # a stall backs off when the one before came within STALL_PAIR_S (issue 11, session 8): on the
    # Xeon a quiet process saw 1-2 isolated stalls (a vCPU's hiccup), each of which backed the pool
    # off for 50 ms-2 s; under load they come in runs
    STALL_PAIR_S = 1.0
    MISS_S = 1e-3
    MISSES = 3
    # the caller preempted: its shards' thread CPU time below this share of their wall time, in
    # jobs where it worked at least PREEMPT_MIN_S (quiet: 0.95-1.0; a busy loop on its core: ~0.5)
    PREEMPT_SHARE, PREEMPT_MIN_S = 0.75, 3e-4
    # the back-off doubles (up to MAX_BACKOFF_S) while a sign comes within CALM_S of the end of the
    # last back-off: contention that lasts; one later than that starts again at MIN_BACKOFF_S
    MIN_BACKOFF_S, MAX_BACKOFF_S, CALM_S = 0.05, 2.0, 1.0
    # short jobs (the caller worked SHORT_MISS_S to MISS_S) that no worker helped with, in a row,
    # before the pool backs off: a spinning worker with a core claims within microseconds
    SHORT_MISS_S, SHORT_MISSES = 5e-5, 8
    # worker side: spins that ran out in a row before a worker stops spinning; the time of one poll
    # (sched_yield on an idle core, ~0.5 us) where there is no cycle counter to bound the spin
    SPIN_MISSES = 8
    POLL_S = 5e-7
    # a worker builds its spin loop (a Numba function: compiled, or loaded from the disk cache, in
    # ~0.1-0.5 s of mostly GIL-holding work) after serving this many jobs, not during a first run
    SPIN_AFTER_JOBS = 32
    # a spin kept going by heartbeats returns to Python this often, to re-check the back-off; once a
    # heartbeat came, the spin ends BEAT_IDLE_S after the last one (not spin_s): MobileNetV2's serial
    # depthwise nodes (0.3-0.4 ms) outlasted the 200 us spin, and the next 1x1 layer's job found
    # the worker asleep (45-50 us to its first shard instead of ~18 on the Xeon)
    SPIN_CAP_S = 0.02
    BEAT_IDLE_S = 1e-3
    # GIL hand-offs (issue 11, session 7): a thread that asks for the GIL while another holds it
    # sleeps on CPython's GIL condition and wakes tens of microseconds after its release (35-40 us
    # from a job's publication to the worker's first shard on the Xeon, with the worker spinning).
    # A worker that sees a job waits CLAIM_AFTER_S more (the caller's first kernel has released the
    # GIL by then); a caller done with its shards polls without the GIL, up to WAIT_LEFT_S, until
    # the worker has left the job (back in its spin: the GIL is free) instead of sleeping on a lock.
    # Not longer: a caller polling keeps its core busy, so a worker queued behind a busy process on
    # the other core is not pulled onto it as it would be onto an idle one (a stall then lasts).
    CLAIM_AFTER_S = 1e-5
    WAIT_LEFT_S = 2.5e-4
    # A thread at a phase's barrier (``run``'s phases, issue 11, session 9) polls without the GIL up to
    # WAIT_LEFT_S and, once the phase is done, GATE_AFTER_S more before taking the GIL: the thread that
    # finished the phase holds it until its next shard's kernel releases it (CLAIM_AFTER_S's reason).
    # Not measured alone on the Xeon. 0: take it at once.
    GATE_AFTER_S = 1e-5
    # The caller's share of a core through a run (issue 11, session 8): the heartbeat (``beat``, at
    # every node) measures the calling thread's CPU time against the wall time over windows of at
    # least WINDOW_S of consecutive beats (a gap over WINDOW_GAP_S between two beats, or a beat from
    # another thread, starts a new window: time between runs is not the run's). Under WINDOW_SHARE,
    # WINDOW_MISSES windows in a row, the pool backs off: the caller shares its core with another
    # runnable thread (a busy process, or our own worker spinning beside it), which the per-job
    # rules can miss where the jobs are short and the serial nodes long (MobileNetV2: 0.1-0.4 ms
    # jobs; round 7 had it at 2.7x its 1-thread time under load on the Xeon). WINDOW_S = 0: off.
    WINDOW_S, WINDOW_GAP_S, WINDOW_SHARE, WINDOW_MISSES = 0.02, 0.05, 0.75, 2
    # A worker that came to a job more than LATE_S after its publication although no worker was asleep
    # (a spinning worker with a core comes within ~20-50 us), LATE_MISSES jobs in a row: it has no
    # core; the pool backs off. LATE_S = 0: off.
    LATE_S, LATE_MISSES = 3e-4, 4
    # A back-off that ends looks whether a second thread has a core now (issue 11, session 8): the
    # cores of the affinity free for it over the back-off, (idle CPU time + this process's CPU time)
    # / wall time - 1 (the calling thread's core), under FREE_CORES: back off again. A busy process
    # on one of two CPUs: ~0; quiet: ~1 (however busy the caller was). Before, the pool came back
    # after every back-off, its worker spun through the runs on the free core while the caller shared
    # the busy one (~50 % speed) until the signs fired again: the transformer ran 1.89x its 1-thread
    # time under load on the Xeon. FREE_CORES = 0: off (every back-off ends on time).
    FREE_CORES = 0.5
    # The look covers the wall time from the back-off's start to the first job after its end. A
    # process that was idle past that end (between requests, or while other processes took their
    # turns) would read their use of the CPUs as its own load: MLP blocks of the Xeon's turns table
    # (benchmarks/turns.py, session 10) each began with a 'held' back-off of 2 s read from the
    # previous block's. After STALE_PROBE_S past the end the pool comes back without a look (a load
    # that lasts fires the signs again within a few jobs).
    STALE_PROBE_S = 0.05
    # A process that found the machine loaded (a look at a back-off's end held it, within the last HOLD_S: the
    # back-off's ``last_held``) and comes back after such an idle gap does not come back blind: it backs off again
    # with a look of its own (the calls meanwhile at one thread, as under load they would run anyway), so that it
    # stays at one thread while the load lasts. Without it, every stretch of calls after a gap (each block of
    # turns.py --mode loaded) brought the two-thread paths back: the pairs woke their helper, which spun and missed
    # its jobs beside the busy process until the pairs backed off (issue 11, session 15; docs/numba.md, "Layers
    # alone under load"). 0: off (after a gap the pool comes back without a look). On: Xeon, session 15's two calls
    # (turns.py --mode loaded, a busy process on one of the two CPUs; with pairs.MISS_WINDOW in the second), ResNet-18
    # default / this 1.11 and 0.97, ResNet-50 0.98 (call 1); with rnpair.ALONE_SERIAL too, MLP 1.26 and 1.28,
    # transformer 1.15 and 0.97, MobileNetV2 1.05 and 1.01, ResNet-50 0.94 and 1.02 (medians over 4-7 rounds); quiet
    # it never acts (no look holds): default / them 1.12 and 1.03 (ResNet-18), 1.00 (ResNet-50). Its blocks ran no
    # pair call after the first held look.
    HOLD_S = 5.0
    # no heartbeat while a sign says the caller shares its core (``beat``); False: beats go on.
    # Off: on the quiet Xeon (session 8, alternating processes, the transformer at 2 threads) one
    # preempted job hushed the beats, the worker slept and the next jobs waited for its wake-up:
    # fp32 9.66-11.58 ms with it against 7.32-10.95 without (3 pairs; 1 thread 8.81-14.76)
    HUSH_ON_SIGN = False
    _thread_time = staticmethod(time.thread_time)  # the calling thread's CPU time (tests replace it)
    _idle_time = staticmethod(_proc_stat_idle)  # idle seconds of the affinity CPUs (tests replace it)
    _process_time = staticmethod(time.process_time)  # this process's CPU time (tests replace it)

    def __init__(self, spin_s: float | None = None):
        self.spin_s = spin_seconds() if spin_s is None else spin_s
        self._cond = threading.Condition(threading.Lock())
        # [0] the generation, bumped for every job put in the slot; [1] the callers' heartbeat
        # (``beat``); [2] bumped to wake sleeping workers without a job (a run has started); [3] the
        # job a worker has last left, stored once it no longer holds the GIL (``_spin.wait_left``)
        self._gen = np.zeros(4, np.int64)
        self._can_spin = False  # a worker has its spin loop (heartbeats wake workers from then on)
        self._waiter = None  # (wait_left, its limit, counter): built with the workers' spin loop
        self._gate_limit = None  # the phases' barrier poll (``_Job.gate_limit``), built with it too
        self._waking = False  # a heartbeat's wake-up is on its way
        self._job: _Job | None = None
        self._slot = threading.Lock()  # held by the caller whose job is in the slot
        self._sleeping = 0  # workers blocked on _cond
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._serial_until = 0.0
        self._backoff = self.MIN_BACKOFF_S
        self._last_backoff = float("-inf")
        self._last_stall = float("-inf")
        # when a back-off's end last found no core free for a second thread (``FREE_CORES``: held; HOLD_S)
        self.last_held = float("-inf")
        self._missed = 0
        self._short = 0
        self._preempted = 0
        self._late = 0
        self._slow = 0  # windows in a row with the caller under WINDOW_SHARE of a core
        self._win = [0.0, 0.0, 0.0, 0]  # window start, its caller CPU time, last beat, thread id
        # (wall, idle, process CPU time) at the start of the current back-off, looked at when it ends
        # (``FREE_CORES``); None: no look pending
        self._probe: tuple[float, float, float] | None = None
        self._probing = threading.Lock()
        self._serial_ids = itertools.count(1).__next__
        self.trace: list | None = None
        self.backoff = True  # False: contention signs are counted but never back the pool off (tests)
        self.stats = {"jobs": 0, "serial_jobs": 0, "stalls": 0, "misses": 0, "preempted": 0, "backoffs": 0,
                      "busy_slot": 0, "short_misses": 0, "late": 0, "windows": 0, "slow_windows": 0, "held": 0,
                      "rehold": 0}

    @property
    def stalls(self) -> int:
        return self.stats["stalls"]

    def backed_off(self) -> bool:
        """Whether jobs run on the calling thread alone now (after a contention sign; at its end,
        again while no core is free for a second thread: ``FREE_CORES``)."""
        until = self._serial_until
        if not until:
            return False
        now = time.perf_counter()
        return now < until or (self._probe is not None and self._still_loaded(now))

    def workers_asleep(self) -> bool:
        """Whether a worker sleeps although it has its spin loop (it spins through a run once a
        heartbeat came: asleep, it was not woken yet, and a job published now finds it 50-150 us late)."""
        return bool(self._sleeping and self._can_spin)

    def has_spin_worker(self) -> bool:
        """Whether the pool has a worker with its spin loop, spinning or asleep (``workers_spinning`` or
        ``workers_asleep``): a model with pooled nodes, where a pair would be a third spinning thread."""
        return self.workers_spinning() or self.workers_asleep()

    def workers_spinning(self) -> bool:
        """Whether the pool has workers with their spin loop and none asleep now (a job published now
        finds one within ~20 us)."""
        return bool(self._workers and self._can_spin and not self._sleeping)

    def _still_loaded(self, now: float) -> bool:
        """At the end of a back-off: whether a second thread had less than ``FREE_CORES`` of a core
        through it; then the pool backs off again (``stats["held"]``)."""
        if not self._probing.acquire(blocking=False):
            return True  # another thread is looking: still backed off for it
        try:
            probe, self._probe = self._probe, None
            if probe is None:
                return now < self._serial_until
            if now - self._serial_until > self.STALE_PROBE_S:
                if self.HOLD_S > 0 and now - self.last_held < self.HOLD_S:  # loaded lately: a fresh look
                    self.stats["rehold"] += 1
                    self._back_off(f"loaded {now - self.last_held:.2f} s ago: a fresh look after an idle gap")
                    return True
                return False  # idle past the back-off's end: the window says nothing about now
            idle = self._idle_time()
            if idle is None or now <= probe[0]:
                return False
            free = (idle - probe[1] + self._process_time() - probe[2]) / (now - probe[0]) - 1.0
            if free >= self.FREE_CORES:
                return False
            self.stats["held"] += 1
            self.last_held = now
            self._back_off(f"{max(free, 0.0):.2f} of a core free for a second thread in the last back-off")
            return True
        finally:
            self._probing.release()

    def reset(self) -> None:
        """End a back-off now (tests, benchmarks)."""
        self._serial_until, self._backoff, self._missed, self._preempted = 0.0, self.MIN_BACKOFF_S, 0, 0
        self._short = self._late = self._slow = 0
        self._win[2] = 0.0
        self._probe = None
        self._last_backoff = self._last_stall = self.last_held = float("-inf")

    # -- workers ---------------------------------------------------------------------------------
    def _ensure(self, n: int) -> None:
        if os.getpid() != self._pid:  # forked child: the parent's threads did not come along
            backoff = self.backoff
            self.__init__(self.spin_s)
            self.backoff = backoff
        if len(self._workers) >= n:
            return
        with self._lock:
            while len(self._workers) < n:
                t = threading.Thread(target=self._serve, name=f"kernelkit-numba-{len(self._workers)}", daemon=True)
                t.start()
                self._workers.append(t)

    def _serve(self) -> None:
        gen, cond = self._gen, self._cond
        seen, woke = int(gen[0]), int(gen[2])
        misses, left = 0, 0
        spinner, served = None, 0
        while True:
            if spinner is None and served == self.SPIN_AFTER_JOBS and self.spin_s > 0:
                spinner = _spinner()  # only a process that keeps the pool busy builds it
                if spinner is not None:
                    spin, rate, wait = spinner
                    counter = rate > 0

                    def clock(seconds, rate=rate, counter=counter):
                        return int(seconds * rate) if counter else int(seconds / self.POLL_S) + 1

                    idle, cap, after = clock(self.spin_s), clock(self.SPIN_CAP_S), clock(self.CLAIM_AFTER_S)
                    beat_idle = clock(max(self.spin_s, self.BEAT_IDLE_S))
                    self._waiter = (wait, clock(self.WAIT_LEFT_S), counter)
                    self._gate_limit = (clock(self.WAIT_LEFT_S), counter, clock(self.GATE_AFTER_S))
                    self._can_spin = True
            if (gen[0] == seen and spinner is not None and misses < self.SPIN_MISSES
                    and time.perf_counter() >= self._serial_until and self._probe is None):
                got = spin(gen, seen, idle, cap, counter, left, after, beat_idle)
                left = 0
                if got == 2:  # the callers' heartbeat kept it going: re-check the back-off, spin on
                    continue
                misses = 0 if got else misses + 1
            if gen[0] == seen:
                if left:
                    gen[3], left = left, 0
                slept = time.perf_counter()
                with cond:
                    self._sleeping += 1
                    while gen[0] == seen and gen[2] == woke:  # re-checked after counting ourselves
                        cond.wait()
                    self._sleeping -= 1
                    self._waking = False
                    woke = int(gen[2])
                if gen[0] == seen:  # woken by a heartbeat: a run has started, spin through it
                    misses = 0
                    continue
                if time.perf_counter() - slept < self.spin_s:
                    misses = 0  # the job came within the spin time: spinning would have caught it
            seen = int(gen[0])
            job = self._job
            if job is not None and job.ticket() < job.helpers:  # the job's thread budget holds
                job.work(True)
                left = job.serial_id  # stored in gen[3] once the GIL is released (_spin, wait_left)
                served += 1

    def beat(self) -> None:
        """The callers' heartbeat, at every node of a multi-thread session's run: a spinning worker
        keeps spinning while beats come (``_spin``: until ``BEAT_IDLE_S`` after the last beat),
        and a sleeping one is woken by the first beat of a run, so that it is awake when the run's
        first parallel kernel comes (a woken worker claims ~50-150 us after the wake-up). No beat
        while the pool is backed off, and none wakes a worker that has no spin loop yet. Also the caller's
        share of a core through the run (``WINDOW_S``). Nothing while the pool has no worker (no
        parallel job has run in this process yet: the batch-1 MLP at two threads, whose products are
        all serial): no worker to keep awake, no job that a back-off would make serial (~0.3 us a
        node, and the beat's wrapper)."""
        if not self._workers:
            return
        now = time.perf_counter()
        until = self._serial_until
        if until and (now < until or (self._probe is not None and self._still_loaded(now))):
            return
        if self.HUSH_ON_SIGN and (self._preempted or self._slow):
            # a sign that the caller shares its core (a preempted job, a slow window) and no back-off
            # yet: no beat, so the worker's spin ends and its core goes idle, where the OS can move
            # the caller (a spinning worker kept the free core, the caller ran beside the busy
            # process at ~50 %); the window goes on
            if self.WINDOW_S:
                self._window(now)
            return
        gen = self._gen
        gen[1] += 1
        if self._sleeping and self._can_spin and not self._waking:
            with self._cond:
                self._waking = True
                gen[2] += 1
                self._cond.notify_all()
        if self.WINDOW_S:
            self._window(now)

    def _window(self, now: float) -> None:
        """One beat of the caller's CPU-share window (``WINDOW_S``)."""
        win = self._win
        me = threading.get_ident()
        if now - win[2] > self.WINDOW_GAP_S or win[3] != me:  # a new run, or another thread's
            win[0], win[1], win[2], win[3] = now, self._thread_time(), now, me
            return
        win[2] = now
        if now - win[0] < self.WINDOW_S:
            return
        cpu = self._thread_time()
        share = (cpu - win[1]) / (now - win[0])
        win[0], win[1] = now, cpu
        self.stats["windows"] += 1
        if share < self.WINDOW_SHARE:
            self.stats["slow_windows"] += 1
            self._slow += 1
            if self._slow >= self.WINDOW_MISSES:
                self._back_off(f"the calling thread ran {share:.0%} of the wall time in {self._slow} windows")
        else:
            self._slow = 0

    # -- callers ---------------------------------------------------------------------------------
    def run(self, fn, count: int, threads: int, phases: tuple = (), stall_share: float = STALL_SHARE) -> None:
        """Call ``fn(i)`` for ``i`` in ``range(count)`` on the calling thread and up to
        ``threads - 1`` workers; returns when every shard has finished (re-raising the first error).
        ``phases``: the shard numbers (ascending, within ``(0, count)``) where a new phase starts; a
        phase's shards start once every shard of the phase before has finished (one job for what
        were several calls in a row: a kernel's input transform, products and output transform).
        ``stall_share``: a wait at the end counts as a stall (``_judge``) past ``STALL_S`` and past this
        share of the caller's own time on its shards (1.0 for a job of two halves, rnpair.BESIDE_POOL: a
        wait that made the job slower than the caller alone)."""
        helpers = min(threads, count) - 1
        if helpers <= 0 or self.backed_off():
            self._serial(fn, count)
            return
        if not self._slot.acquire(blocking=False):  # another caller's job is in the slot
            self.stats["busy_slot"] += 1
            self._serial(fn, count)
            return
        try:
            self._ensure(helpers)
            job = _Job(fn, count, self._serial_ids(), self.trace, helpers, phases, self._gate_limit if phases else None)
            t0, c0 = time.perf_counter(), time.thread_time()
            self._job = job
            self._gen[0] += 1
            asleep = self._sleeping
            if asleep:
                with self._cond:
                    self._cond.notify(helpers)
            self.stats["jobs"] += 1
            job.work(False)
            t1, c1 = time.perf_counter(), time.thread_time()
            if job.left:
                waiter = self._waiter
                if waiter is not None and helpers == 1:  # poll without the GIL until the worker has left
                    waiter[0](self._gen, job.serial_id, waiter[1], waiter[2])
                job.done.acquire()
            t2 = time.perf_counter()
            # the caller's time at the phases' barriers is waiting, not working; a stall is one long
            # wait (at a barrier or at the end), not several short ones summed
            self._judge(job, max(t2 - t1, job.held_max), t1 - t0 - job.held, c1 - c0 - job.held_cpu, asleep,
                        job.first - t0 if job.first else None, stall_share)
            if job.trace is not None:  # the job itself: published at t0, the caller's shards done at t1, all at t2
                job.trace.append((job.serial_id, -1, threading.current_thread().name, t0, t2, t1))
        finally:
            self._job = None
            self._slot.release()
        if job.error is not None:
            raise job.error

    def _serial(self, fn, count: int) -> None:
        self.stats["serial_jobs"] += 1
        trace = self.trace
        if trace is None:
            for i in range(count):
                fn(i)
            return
        job = _Job(fn, count, self._serial_ids(), trace)
        job.work(False)
        if job.error is not None:
            raise job.error

    def _judge(self, job: _Job, waited: float, worked: float, cpu: float | None = None, asleep: int = 0,
               came: float | None = None, stall_share: float = STALL_SHARE) -> None:
        """Count the contention signs of a finished job (``worked``: the caller's wall time on its
        shards, ``cpu``: its thread CPU time meanwhile, ``asleep``: workers asleep at publication,
        ``came``: seconds from publication to the first worker's arrival, None: none came); back
        off after a stall (a wait past ``stall_share`` of ``worked``: ``run``), repeated misses (short ones
        too), workers late job after job or a caller preempted job after job."""
        if waited > self.STALL_S and waited > stall_share * worked:
            self.stats["stalls"] += 1
            now = time.perf_counter()
            if now - self._last_stall <= self.STALL_PAIR_S:
                self._back_off(f"waited {waited * 1e3:.2f} ms for a worker's shard (two stalls within "
                               f"{self.STALL_PAIR_S:g} s)")
            self._last_stall = now
        elif job.claimed == 0 and worked > self.MISS_S:
            self.stats["misses"] += 1
            self._missed += 1
            if self._missed >= self.MISSES:
                self._back_off(f"no worker claimed a shard in {self._missed} jobs")
        elif cpu is not None and worked > self.PREEMPT_MIN_S and cpu < self.PREEMPT_SHARE * worked:
            self.stats["preempted"] += 1
            self._preempted += 1
            if self._preempted >= self.MISSES:
                self._back_off(f"the calling thread ran {cpu / worked:.0%} of its shards' time in "
                               f"{self._preempted} jobs")
        elif job.claimed == 0 and worked > self.SHORT_MISS_S and self._can_spin and not asleep:
            # a short job nobody helped with although no worker was asleep: the workers spin
            # through a run (``beat``), so one with a core claims within microseconds;
            # SHORT_MISSES in a row: it has none
            self.stats["short_misses"] += 1
            self._short += 1
            if self._short >= self.SHORT_MISSES:
                self._back_off(f"no worker claimed a shard in {self._short} short jobs")
        elif (self.LATE_S and job.claimed and came is not None and came > self.LATE_S and self._can_spin
              and not asleep):
            # helped, but late although no worker was asleep: a spinning worker with a core comes
            # within tens of microseconds
            self.stats["late"] += 1
            self._late += 1
            self._preempted = 0
            if self._late >= self.LATE_MISSES:
                self._back_off(f"a worker came {came * 1e3:.2f} ms after publication in {self._late} jobs")
        else:
            self._preempted = 0
            if job.claimed:
                self._missed = self._short = self._late = 0

    def _back_off(self, why: str, seconds: float = 0.0) -> None:
        """Jobs on the calling thread alone for the doubling back-off, or for ``seconds`` where that is > 0
        (a pairs' back-off of fixed length, ``pairs.HICCUP_BACKOFF_S``: the doubling state stays as it was)."""
        if not self.backoff:
            return
        now = time.perf_counter()
        if seconds <= 0:
            calm = now - self._serial_until > self.CALM_S  # since the last back-off ended
            self._backoff = self.MIN_BACKOFF_S if calm else min(2 * self._backoff, self.MAX_BACKOFF_S)
        length = seconds if seconds > 0 else self._backoff
        self._last_backoff, self._serial_until, self._missed, self._preempted = now, now + length, 0, 0
        self._short = self._late = self._slow = 0
        idle = self._idle_time() if self.FREE_CORES else None
        self._probe = None if idle is None else (now, idle, self._process_time())
        self.stats["backoffs"] += 1
        log.debug("shard pool: %s; one thread for %.2f s", why, length)


POOL = ShardPool()

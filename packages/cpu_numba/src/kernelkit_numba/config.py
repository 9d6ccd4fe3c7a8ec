"""Every Numba flag the backend uses, in one place, and the thread-count plumbing.

Kernels are compiled with ``jit`` (serial) or ``jit_parallel`` (``prange`` loops). Flags:

- ``cache=True``: compiled machine code is stored beside the kernel modules (``__pycache__``),
  so a second process loads instead of recompiling (NUMBA_CACHE_DIR moves it). Entries are checked,
  not trusted: an unreadable one is deleted and recompiled with a warning (``cache.py``).
- ``fastmath``: only the flags that keep inf/NaN semantics (``reassoc`` lets reductions
  vectorise, ``contract`` allows FMA, ``nsz`` ignores the sign of zero). No ``nnan``/``ninf``:
  max-pooling pads with -inf and must see it.
- ``error_model="numpy"``: division by zero gives inf/NaN like NumPy instead of raising, and
  removes the check from inner loops.
- ``boundscheck=False``: indices are computed from validated shapes in Python.
- ``nogil=True``: kernels release the GIL so ``Session.run_async`` runs overlap.

Threads: kernels never use Numba's own parallel pool (``parallel=True``/``prange`` split loops
statically and collapse when a core is taken, see ``shards``). A parallel kernel is a ``nogil``
function over a range of its outer loop, and ``parallel_for`` cuts that loop into shards run by
``shards.POOL``, the calling thread included. ``jit_parallel`` is kept as the decorator of such
kernels: a ``prange`` left in one runs as a plain ``range``. The thread budget of the current call
is thread-local: ``NumbaKernel.execute`` sets it from ``Session(threads=n)`` (1 below
``SERIAL_WORK`` and inside ``serial()``); outside a session it is ``default_threads()``, the CPUs
this process may run on. While the pool is backed off after a sign that a core is taken
(``shards``), the budget stands (``KEEP_BUDGET``, on): the kernels keep their two-thread cuts and
run them on the caller, so a session's bits do not move with the host's load. BLAS is called at one thread per
shard (``blas_threads(1)``, through threadpoolctl) so that BLAS and the kernels share one notion
of how many threads run.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading

import numba
import numpy as np

from .cache import checked  # unreadable cache entries are recompiled
from .shards import POOL as _POOL
from .tiered import carry_guard, hook  # kernels compile off the calling thread (tiered start)

log = logging.getLogger("kernelkit.numba")

# A shared kernelkit cache folder ($KERNELKIT_CACHE_DIR, e.g. for a cluster's workers) holds Numba's
# compiled code too, unless NUMBA_CACHE_DIR says otherwise. Read before any kernel module is compiled.
if os.environ.get("KERNELKIT_CACHE_DIR") and not os.environ.get("NUMBA_CACHE_DIR"):
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(os.environ["KERNELKIT_CACHE_DIR"], "numba")
    numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

CACHE = True
FASTMATH = frozenset({"reassoc", "contract", "nsz"})
ERROR_MODEL = "numpy"
BOUNDSCHECK = False
NOGIL = True

# cache=CACHE is applied by ``checked`` (one CheckedCache per dispatcher; numba.njit(cache=True)
# would first build a FunctionCache of its own, probing the cache folder again)
_FLAGS = dict(fastmath=set(FASTMATH), error_model=ERROR_MODEL, boundscheck=BOUNDSCHECK, nogil=NOGIL)


def jit(fn):
    """Compile ``fn`` as a serial nopython kernel with the backend's flags."""
    return hook(checked(numba.njit(**_FLAGS)(fn), CACHE))


def jit_inline(fn):
    """A scalar helper inlined into its callers at Numba IR level: a branch on a caller's
    compile-time constant (a closure variable) then folds away before LLVM sees the loop."""
    return checked(numba.njit(inline="always", **_FLAGS)(fn), CACHE)


def jit_exact(fn):
    """A kernel without the ``contract`` flag: each float32 multiply and add rounds on its own, as
    NumPy's separate ops do (fused kernels that must equal op by op bit for bit, e.g. qgemm.to_float)."""
    return checked(numba.njit(**{**_FLAGS, "fastmath": set(FASTMATH - {"contract"})})(fn))


def jit_ordered(fn):
    """A serial kernel without ``reassoc``: its float operations keep their written order, so that an
    output rounds alike in a vectorised loop's body and its scalar remainder and in every copy of the
    kernel (a caller's module optimises its own copy of each callee again: cache.py). Winograd's input
    transform by tiles: with ``reassoc`` rnpair's copy of it rounded a tile differently by where the
    tile fell in its block (issue 11, session 13); as fast without it (the dev box, 0.95-0.99x)."""
    return hook(checked(numba.njit(**{**_FLAGS, "fastmath": set(FASTMATH - {"reassoc"})})(fn), CACHE))


_local = threading.local()  # .threads: this thread's budget for the current kernel call


def jit_parallel(fn):
    """Compile a kernel that ``parallel_for`` runs over shards of its outer loop (serial code: a
    ``prange`` in it is a plain loop)."""
    return hook(checked(numba.njit(**_FLAGS)(fn), CACHE))


def default_threads() -> int:
    """The CPUs this process may run on (``taskset``, container cpusets), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# A back-off keeps the budget (issue 11, session 18; docs/numba.md, "The first run's bits at two threads"): while
# the shard pool is backed off, ``current_threads()`` still says the call's budget, so that the kernels keep their
# choices for it (tile shapes, K chunks, shard cuts, the pairs) and only the running changes: the pool runs every
# shard on the caller (ShardPool.run's backed-off path) and a pair both halves (pairs.PairServer.usable is False
# while backed off: Pair's ``alone``, cpair's K_SOLO). A two-thread session's output then no longer depends on
# whether a back-off ran (ResNet-50 on the loaded two-core dev box: its first run paired until the pool backed
# off mid-run, its later runs all held on the one-thread kernels, three sets of bits). False: 1 while backed off
# (the one-thread session's kernels, as before). On since session 19 (docs/numba.md, "Uneven cores on the H200
# host"): under load it runs the two-thread cuts on one core, and on the H200 machine's Xeon (5 rounds, a busy loop on
# one of the two CPUs) default / KEEP_BUDGET read 1.00 (ResNet-18), 1.09 (ResNet-50), 1.01 (MobileNetV2, the
# transformer), 1.02 (the MLP): level or better, and the bits no longer move with the host's load.
KEEP_BUDGET = True


def current_threads() -> int:
    """The thread budget of this thread's current kernel call; with ``KEEP_BUDGET`` off, 1 while the shard pool is
    backed off after a sign that a core is taken (``shards``), so that kernels cut their work for one thread."""
    n = getattr(_local, "threads", None)
    if n is None:
        n = default_threads()
    return 1 if n > 1 and not KEEP_BUDGET and _POOL.backed_off() else n


def in_serial() -> bool:
    """Whether this thread's kernels run on the calling thread alone now."""
    return current_threads() == 1


@contextlib.contextmanager
def num_threads(threads: int | None):
    """Run the body with this thread's kernel thread budget at ``threads``; None: leave it."""
    was = getattr(_local, "threads", None)
    if threads:
        _local.threads = max(1, int(threads))
    try:
        yield
    finally:
        _local.threads = was


def serial(on: bool = True):
    """Within the body, this thread's kernels run on the calling thread alone."""
    return num_threads(1 if on else None)


# Parallel calls are cut into shards of at least this much work (one flop or element step per
# unit; a shard costs a few microseconds of Python to hand out) and at most SHARDS_PER_THREAD per
# thread, so that a thread that gets no core leaves only small shards to the others.
# (Measured on a quiet Xeon pinned to 2 cores: handing out a shard and joining cost tens of
# microseconds, so 2**19-unit shards, 8 per thread, made the transformer slower at 2 threads than
# at 1; GEMM tiles are larger still, since BLAS runs slower on small tiles.)
MIN_SHARD_WORK = 1 << 21
MIN_TILE_WORK = 1 << 22
SHARDS_PER_THREAD = 4
# GEMM output tiles per thread (``gemm.tile_count``, above 8 * MIN_TILE_WORK flops): each tile
# repacks its panels, so fewer than loop shards; 2 lets a worker that loses its core mid-tile
# hold up half a thread's share at most (the caller claims every tile not yet started).
TILE_SHARDS_PER_THREAD = 2


def shard_count(total: int, work: float, threads: int | None = None, unit: float | None = None) -> int:
    """How many shards a loop of ``total`` iterations and ``work`` units is cut into (shards of at
    least ``unit``, default MIN_SHARD_WORK)."""
    unit = MIN_SHARD_WORK if unit is None else unit
    if total <= 1 or work < 2 * unit:  # small work first: no thread-budget lookup (~1-2 us a call)
        return 1
    n = current_threads() if threads is None else threads
    if n <= 1:
        return 1
    return int(max(2, min(total, SHARDS_PER_THREAD * n, work // max(unit, 1))))


def parallel_for(kernel, total: int, args: tuple, work: float) -> None:
    """``kernel(*args, lo, hi)`` over shards ``[lo, hi)`` of ``range(total)`` on the shard pool
    (the caller runs shards too), or one call on this thread when the work is small."""
    count = shard_count(total, work)
    if count <= 1:
        if total > 0:
            kernel(*args, 0, total)
        return
    _POOL.run(carry_guard(lambda i: kernel(*args, i * total // count, (i + 1) * total // count)), count,
              current_threads())


def readonly(a):
    """``a`` as a read-only array (a view when it is writable). Numba compiles a separate copy of a
    kernel for read-only arguments, and model inputs and constants are read-only while
    intermediate results are not: kernels see every input read-only, so each is compiled once."""
    if isinstance(a, np.ndarray) and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def run_shards(fn, count: int) -> None:
    """``fn(i)`` for ``i`` in ``range(count)`` on the shard pool at this call's thread budget."""
    _POOL.run(carry_guard(fn), count, current_threads())


def run_phases(parts) -> None:
    """Phases of shards in one job on the shard pool (``shards.ShardPool.run``'s ``phases``): ``parts``
    is a sequence of ``(fn, count)``; ``fn(i)`` for ``i`` in ``range(count)`` of each part, a part's
    shards starting once every shard of the part before has finished. One publication, one wake-up
    of the workers and one wait at the end, where calls in a row had one each, and no Python of the
    caller's alone between them (issue 11, session 9)."""
    fns, ends, total = [], [], 0
    for fn, count in parts:
        if count > 0:
            fns.append((total, fn))
            total += count
            ends.append(total)
    if not fns:
        return
    if len(fns) == 1:
        _POOL.run(carry_guard(fns[0][1]), total, current_threads())
        return

    def shard(i):
        for start, fn in reversed(fns):
            if i >= start:
                fn(i - start)
                return

    _POOL.run(carry_guard(shard), total, current_threads(), tuple(ends[:-1]))


def phase_count(total: int, work: float, threads: int | None = None) -> int:
    """Shards of a loop that runs as one phase of a job (``run_phases``): shards of at least
    PHASE_UNIT and at most PHASE_SHARDS_PER_THREAD a thread (a shard within a job costs a claim and
    a kernel call, ~5-10 us; a job of its own cost ~50-100 us on the Xeon: ``MIN_SHARD_WORK``)."""
    if total <= 1 or work < 2 * PHASE_UNIT:
        return 1
    n = current_threads() if threads is None else threads
    if n <= 1:
        return 1
    return int(max(2, min(total, PHASE_SHARDS_PER_THREAD * n, work // PHASE_UNIT)))


PHASE_UNIT = 1 << 19
PHASE_SHARDS_PER_THREAD = 2


def guided(total: int, count: int, threads: int) -> tuple[int, ...]:
    """Bounds ``(0, b1, ..., total)`` of shards of ``range(total)`` (units of about equal work), large
    first and small last, where ``count`` equal shards were asked for: each shard takes
    ``1 / (GUIDED_SPLIT * threads)`` of what is left, at least half an equal shard (and one unit), so the
    last shards are small and the caller's wait for the other threads' last shard at the end of a
    job (60-160 us a job on the Xeon with equal shards: docs/numba.md, issue 11, session 8) shrinks.
    ``count`` equal shards where the units are too few to cut finer, or at one thread."""
    if threads <= 1 or total <= count or count <= 1 or not GUIDED_SPLIT:
        count = max(1, min(count, total))
        return tuple(i * total // count for i in range(count + 1))
    least = max(1, -(-total // (2 * count)))
    bounds, at = [0], 0
    while at < total:
        at = min(total, at + max(least, -(-(total - at) // (GUIDED_SPLIT * threads))))
        bounds.append(at)
    return tuple(bounds)


GUIDED_SPLIT = 2  # 0: equal shards


def phase_for(kernel, total: int, args: tuple, count: int):
    """``(fn, count)`` for ``run_phases``: ``kernel(*args, lo, hi)`` over shards of ``range(total)``,
    ``count`` of them cut large first and small last (``guided``: a thread at the barrier after the
    phase waits for a small last shard of the other's, not an equal one)."""
    bounds = guided(total, count, current_threads()) if count > 1 else (0, total)
    return (lambda i: kernel(*args, bounds[i], bounds[i + 1])), len(bounds) - 1


_thread_buffers = threading.local()
# Issue 11, session 15 (rate15): the thread buffers start on this many bytes (0: wherever NumPy's allocator
# puts them: 16 or 32 bytes past a cache line for large arrays, so that every 64-byte vector load of the rows
# tiles' packed pixels, Winograd's V and fgemm's A panels crossed two cache lines). Read on each call
BUFFER_ALIGN = 64


# Slabs on huge pages (issue 11, session 19; docs/numba.md, "Uneven cores on the H200 host"): > 0, aligned_empty's
# arrays of under a quarter of HUGE_SLAB bytes (the packed weights of most layers, every thread buffer; fpair's helper
# buffers too) are cut one after another from slabs of HUGE_SLAB bytes, each an anonymous mapping that starts on a
# 2 MiB boundary and is advised as transparent huge pages. On a host whose huge pages are ``madvise`` only (the H200
# machine's), NumPy advises only its arrays of 4 MiB and up, so the rest sit on 4 KiB pages whose placement, and so
# their cache sets and TLB reach, is new in each process. A slab is freed when no array cut from it is left; the tail
# of a slab that a request did not fit is not used. Read on each call. 0: NumPy's allocation (as before). Off: not
# measured (benchmarks/thp19_round.sh's ``slab`` variant, 32 MiB).
HUGE_SLAB = 0
HUGE_PAGE = 1 << 21  # the x86-64 transparent huge page (the slabs' start; fgemm's heads)
_slab: list = [None, 0]  # the current slab (a uint8 array over its mapping) and the bytes of it handed out
_slab_lock = threading.Lock()


def huge_pages(nbytes: int, align: int = HUGE_PAGE) -> np.ndarray:
    """``nbytes`` bytes (uint8) starting at a multiple of ``align`` (at least HUGE_PAGE) in a private anonymous
    mapping of whole huge pages from that start, advised as transparent huge pages where the system has them (a
    kernel without them refuses the advice: 4 KiB pages; macOS has no such advice). Needs mmap.MAP_PRIVATE (not on
    Windows)."""
    import mmap

    mem = mmap.mmap(-1, -(-nbytes // HUGE_PAGE) * HUGE_PAGE + align, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mem.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # (EINVAL)
            pass
    raw = np.frombuffer(mem, np.uint8)
    skip = -raw.ctypes.data % align
    return raw[skip:skip + nbytes]


def _slab_bytes(nbytes: int, align: int) -> np.ndarray | None:
    """``nbytes`` bytes on a multiple of ``align`` from the current slab (a new one where they do not fit), or None
    where HUGE_SLAB is off, the request is a quarter of a slab or more, or the system maps no private anonymous
    memory (Windows' mmap)."""
    import mmap

    slab = int(HUGE_SLAB)
    if slab <= 0 or 4 * (nbytes + align) > slab or not hasattr(mmap, "MAP_PRIVATE"):
        return None
    with _slab_lock:
        raw, used = _slab
        at = -(-used // align) * align
        if raw is None or at + nbytes > raw.size:
            raw, at = huge_pages(slab), 0
        _slab[0], _slab[1] = raw, at + nbytes
        return raw[at:at + nbytes]


def aligned_empty(size: int, dtype, align: int) -> np.ndarray:
    """A flat uninitialised array of ``size`` elements starting on a multiple of ``align`` bytes (0 or 1:
    np.empty's own); with HUGE_SLAB, a small one from a slab on huge pages."""
    dtype = np.dtype(dtype)
    nbytes = size * dtype.itemsize
    cut = _slab_bytes(nbytes, max(int(align), 64)) if HUGE_SLAB else None
    if cut is not None:
        return cut.view(dtype)
    if align <= 1:
        return np.empty(size, dtype)
    raw = np.empty(nbytes + align, np.uint8)
    at = (-raw.ctypes.data) % align
    return raw[at:at + nbytes].view(dtype)


def thread_buffer(name: str, size: int, dtype) -> np.ndarray:
    """The calling thread's flat work array ``name`` of ``size`` elements, kept between calls (grown
    to the largest size asked): a shard's scratch, so that a steady run allocates none. One array per
    (thread, name, dtype, BUFFER_ALIGN): use it within a shard that runs no other kernel meanwhile."""
    align = BUFFER_ALIGN
    key = (name, np.dtype(dtype), align)
    buf = _thread_buffers.__dict__.get(key)
    if buf is None or buf.size < size:
        buf = _thread_buffers.__dict__[key] = aligned_empty(size, dtype, align)
    return buf[:size]


# Below this much work (about one flop or element step per unit, ~0.3-1 ms on one core) a kernel
# runs on the calling thread alone: handing out shards and joining cost ~50-100 us a region on the
# quiet Xeon, so the transformer's 128x256x256 GEMMs (17 MFLOP, ~0.2 ms) gained nothing from two
# threads (13.2 ms at one thread, 14.0 at two with 2**23 here).
SERIAL_WORK = 1 << 25
# The nodes of a multi-thread session beat the shard pool's heartbeat (``shards.ShardPool.beat``):
# its workers spin through a run instead of sleeping between parallel kernels more than the spin
# time apart (issue 11, session 7). Read when a session binds its plan.
HEARTBEAT = True


_blas: list | None = None  # threadpoolctl controllers of the loaded BLAS libraries, found once


def _blas_controllers() -> list:
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # optional: without it BLAS keeps its own thread count
            log.debug("threadpoolctl is not installed; BLAS thread count is left as is")
            _blas = []
        else:
            _blas = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _blas


def blas_single() -> None:
    """Every loaded BLAS library at one thread, left so: the shard pool is the only parallelism.
    Setting it per call and restoring it after cost ~40 us a call once BLAS had run (OpenBLAS
    re-arms its threads), 2-3 ms of a ResNet-50 run; in a process that runs numba kernels,
    NumPy's own BLAS calls therefore run at one thread too (threadpoolctl changes it back)."""
    for lib in _blas_controllers():
        if lib.get_num_threads() != 1:
            log.debug("numba backend: %s set to one thread", lib.prefix)
            lib.set_num_threads(1)


@contextlib.contextmanager
def blas_threads(threads: int | None):
    """Run the body with every loaded BLAS library's thread count at ``threads`` (process-wide),
    restored after; None: leave them."""
    if not threads:
        yield
        return
    n = max(1, int(threads))
    changed = []
    for lib in _blas_controllers():
        was = lib.get_num_threads()
        if was != n:
            lib.set_num_threads(n)
            changed.append((lib, was))
    try:
        yield
    finally:
        for lib, was in changed:
            lib.set_num_threads(was)

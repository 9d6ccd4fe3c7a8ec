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

Threads: every ``prange`` kernel is compiled twice from one function (``jit_parallel`` returns a
``Twin``): a parallel version on Numba's OpenMP pool and a serial one where ``prange`` is a plain
loop. A call runs the serial one inside ``serial()``, which ``NumbaKernel.execute`` enters for calls
below ``SERIAL_WORK`` and for ``Session(threads=1)``: small calls then wake no thread and change no
thread count (switching Numba's count and waking its pool cost ~30 us a call, more than most of a
transformer's elementwise ops take). ``num_threads(n)`` sets Numba's thread count (thread-local) for
parallel calls when ``Session(threads=n)`` asks for fewer than the pool has; ``blas_threads(n)`` sets
the BLAS thread count (process-wide, through threadpoolctl) around the kernels that call BLAS, and
restores it after.

Numba's pool (threading layer "omp" here; TBB where installed) and NumPy's BLAS pool both busy-wait
after a region by default and then steal the cores the other one needs (measured on the 2-core CI
machine: ResNet-18 at 2 threads took 1.3 s per run with active waiting, 35-40 ms with passive), so
this module asks OpenMP to sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the user set a policy. Being
an environment variable it applies to the whole process, and only if no OpenMP runtime has started.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import types

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when libgomp starts: before any kernel runs

import numba  # noqa: E402

from .cache import checked  # noqa: E402  (unreadable cache entries are recompiled)

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

_FLAGS = dict(cache=CACHE, fastmath=set(FASTMATH), error_model=ERROR_MODEL, boundscheck=BOUNDSCHECK,
              nogil=NOGIL)


def jit(fn):
    """Compile ``fn`` as a serial nopython kernel with the backend's flags."""
    return checked(numba.njit(**_FLAGS)(fn))


def jit_inline(fn):
    """A scalar helper inlined into its callers at Numba IR level: a branch on a caller's
    compile-time constant (a closure variable) then folds away before LLVM sees the loop."""
    return checked(numba.njit(inline="always", **_FLAGS)(fn))


_local = threading.local()  # .serial: calls in this thread take the serial twin


class Twin:
    """One kernel function compiled twice, lazily per signature: ``parallel`` (``prange`` loops on
    Numba's pool) and ``serial`` (``prange`` as ``range``). Calling the twin picks by ``serial()``.

    The serial copy is a distinct Python function (qualname ``<name>_serial``) because Numba's disk
    cache keys entries by function and signature, not by the ``parallel`` flag."""

    def __init__(self, fn):
        copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                                  fn.__closure__)
        copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__ + "_serial", fn.__module__, fn.__doc__
        self.parallel = checked(numba.njit(parallel=True, **_FLAGS)(fn))
        self.serial = checked(numba.njit(**_FLAGS)(copy))
        self.__name__, self.__qualname__, self.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        self.__module__, self.__wrapped__ = fn.__module__, fn

    def __call__(self, *args):
        return (self.serial if in_serial() else self.parallel)(*args)

    @property
    def dispatchers(self) -> tuple:
        return self.parallel, self.serial


def jit_parallel(fn) -> Twin:
    """Compile ``fn`` as a nopython kernel whose ``prange`` loops run on Numba's thread pool, with a
    serial twin for small calls (see ``serial``)."""
    return Twin(fn)


def in_serial() -> bool:
    """Whether this thread's ``jit_parallel`` calls take the serial twin now."""
    return getattr(_local, "serial", False)


@contextlib.contextmanager
def serial(on: bool = True):
    """Within the body, this thread's ``jit_parallel`` kernels run their serial version."""
    was = in_serial()
    _local.serial = on
    try:
        yield
    finally:
        _local.serial = was


# Below this much work (about one flop or element-step per unit) a kernel runs on one thread,
# BLAS included: waking a second thread costs more than it saves, and on a loaded machine a woken
# thread may wait a whole scheduler slice for a core (a 128x256x256 SGEMM took 24 ms with
# OpenBLAS's 2 threads and 0.2 ms with one there). 2**25 ~ 3e7 flops ~ 0.3 ms on one core.
SERIAL_WORK = 1 << 25
BLAS_SERIAL_WORK = 1 << 20


def max_threads() -> int:
    return int(numba.config.NUMBA_NUM_THREADS)


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


@contextlib.contextmanager
def num_threads(threads: int | None):
    """Run the body with Numba's thread count set to ``threads`` (thread-local); None, or the
    pool's size already: leave it."""
    n = None if not threads else max(1, min(int(threads), max_threads()))
    before = None
    if n is not None:
        try:
            before = numba.get_num_threads()
            if before != n:
                numba.set_num_threads(n)
            else:
                before = None
        except (RuntimeError, ValueError) as exc:  # threading layer unavailable: run as configured
            log.debug("cannot set numba thread count to %s: %s", threads, exc)
            before = None
    try:
        yield
    finally:
        if before is not None:
            numba.set_num_threads(before)


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

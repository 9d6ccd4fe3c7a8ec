"""Every Numba flag the backend uses, in one place, and the thread-count plumbing.

Kernels are compiled with ``jit`` (serial) or ``jit_parallel`` (``prange`` loops). Flags:

- ``cache=True``: compiled machine code is stored beside the kernel modules (``__pycache__``),
  so a second process loads instead of recompiling (NUMBA_CACHE_DIR moves it).
- ``fastmath``: only the flags that keep inf/NaN semantics (``reassoc`` lets reductions
  vectorise, ``contract`` allows FMA, ``nsz`` ignores the sign of zero). No ``nnan``/``ninf``:
  max-pooling pads with -inf and must see it.
- ``error_model="numpy"``: division by zero gives inf/NaN like NumPy instead of raising, and
  removes the check from inner loops.
- ``boundscheck=False``: indices are computed from validated shapes in Python.
- ``nogil=True``: kernels release the GIL so ``Session.run_async`` runs overlap.

Threads: Numba's parallel loops run on its OpenMP pool (threading layer "omp" here; TBB where
installed), GEMM-shaped work on NumPy's BLAS pool. Both pools busy-wait after a region by
default and then steal the cores the other one needs (measured on the 2-core CI machine: ResNet-18
at 2 threads took 1.3 s per run with active waiting, 35-40 ms with passive), so this module asks
OpenMP to sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the user set a policy. Being an environment
variable it applies to the whole process, and only if no OpenMP runtime has started yet.
``num_threads(n)`` (used around every class kernel's ``execute`` when ``Session(threads=n)`` is
given, and with n=1 for calls below ``SERIAL_WORK``) sets Numba's thread count (thread-local) and
the BLAS thread count (process-wide, through threadpoolctl).
"""
from __future__ import annotations

import contextlib
import logging
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when libgomp starts: before any kernel runs

import numba  # noqa: E402

log = logging.getLogger("kernelkit.numba")

CACHE = True
FASTMATH = frozenset({"reassoc", "contract", "nsz"})
ERROR_MODEL = "numpy"
BOUNDSCHECK = False
NOGIL = True

_FLAGS = dict(cache=CACHE, fastmath=set(FASTMATH), error_model=ERROR_MODEL, boundscheck=BOUNDSCHECK,
              nogil=NOGIL)


def jit(fn):
    """Compile ``fn`` as a serial nopython kernel with the backend's flags."""
    return numba.njit(**_FLAGS)(fn)


def jit_parallel(fn):
    """Compile ``fn`` as a nopython kernel whose ``prange`` loops run on Numba's thread pool."""
    return numba.njit(parallel=True, **_FLAGS)(fn)


# Below this much work (about one flop or element-step per unit) a kernel runs on one thread,
# BLAS included: waking a second thread costs more than it saves, and on a loaded machine a woken
# thread may wait a whole scheduler slice for a core. 2**25 ~ 3e7 flops ~ 0.3 ms on one core.
SERIAL_WORK = 1 << 25


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
    """Run the body with Numba's and BLAS's thread counts set to ``threads``; None: leave them."""
    if not threads:
        yield
        return
    n = max(1, min(int(threads), max_threads()))
    try:
        before = numba.get_num_threads()
        numba.set_num_threads(n)
    except (RuntimeError, ValueError) as exc:  # threading layer unavailable: run as configured
        log.debug("cannot set numba thread count to %s: %s", threads, exc)
        before = None
    blas = [(lib, lib.get_num_threads()) for lib in _blas_controllers()]
    for lib, was in blas:
        if was != n:
            lib.set_num_threads(n)
    try:
        yield
    finally:
        if before is not None:
            numba.set_num_threads(before)
        for lib, was in blas:
            if was != n:
                lib.set_num_threads(was)

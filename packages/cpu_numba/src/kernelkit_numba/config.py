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
"""
from __future__ import annotations

import contextlib
import logging

import numba

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


def max_threads() -> int:
    return int(numba.config.NUMBA_NUM_THREADS)


@contextlib.contextmanager
def num_threads(threads: int | None):
    """Run the body with Numba's thread count (thread-local) set to ``threads``; None: leave it."""
    if not threads:
        yield
        return
    try:
        before = numba.get_num_threads()
        numba.set_num_threads(max(1, min(int(threads), max_threads())))
    except (RuntimeError, ValueError) as exc:  # threading layer unavailable: run as configured
        log.debug("cannot set numba thread count to %s: %s", threads, exc)
        yield
        return
    try:
        yield
    finally:
        numba.set_num_threads(before)

"""Numba's disk cache, checked rather than trusted.

Numba reads its cache (``*.nbi`` index and ``*.nbc`` data files, pickles) the first time a kernel is
called with a signature. A file that a crash, a full disk or a concurrent writer left truncated or
garbled makes that call raise (``UnpicklingError``, ``EOFError``, ``UnicodeDecodeError``, ...) in
every later process, since nothing ever rewrites it. :class:`CheckedCache` replaces the cache of
each kernelkit dispatcher: a load that fails for any reason deletes the function's index and data
files, warns once per process, and returns "not cached", so Numba compiles the kernel and writes a
fresh entry. A save that fails costs only speed and is logged.

Numba keys an entry on the kernel's own bytecode and its file's time stamp, not on the helpers it
inlines from other modules (an epilogue, a typed index, a constant): editing ``epilogue.py`` would
leave ``conv.py``'s cached code in use. The index key therefore also carries a fingerprint of every
source file of this package, so any change to the package recompiles its kernels. A closure compiled
once per variant (ftile's drivers) is keyed on its variant's name (``CLOSURE_KEY``) rather than on a
pickle of its cells, which differs in every process where a cell holds an intrinsic.

The cache folder must be writable only by the user (it holds pickles, which this module does not make
safe to read from someone else); ``NUMBA_CACHE_DIR`` moves it.
"""
from __future__ import annotations

import glob
import hashlib
import logging
import os
import threading
import warnings
from functools import cache
from pathlib import Path

from numba.core.caching import FunctionCache

log = logging.getLogger("kernelkit.numba.cache")

_warned = False
_lock = threading.Lock()


def _warn_once(message: str) -> None:
    global _warned
    log.warning(message)
    with _lock:
        if _warned:
            return
        _warned = True
    warnings.warn(message, RuntimeWarning, stacklevel=4)


@cache
def package_fingerprint() -> str:
    """SHA-256 over the names and contents of this package's ``.py`` files (computed once)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


# A closure's cache key: Numba hashes a pickle of the closure's cells, which for cells that pickle
# differently in every process (an intrinsic carries a random id) is a new key each time: the entry
# is never found, and every process appends another. A closure kernelkit compiles per variant names
# its variant in this attribute instead (a str that, with the package's sources, fixes its code).
CLOSURE_KEY = "_kernelkit_cache_key"


class CheckedCache(FunctionCache):
    """``FunctionCache`` whose unreadable entries are discarded and recompiled, keyed also on the
    package's sources (see the module doc)."""

    def _index_key(self, sig, codegen):
        key = getattr(self._py_func, CLOSURE_KEY, None)
        if key is None:
            return (*super()._index_key(sig, codegen), package_fingerprint())
        digest = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
        return (sig, codegen.magic_tuple(), (digest, hashlib.sha256(key.encode()).hexdigest()),
                package_fingerprint())

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as exc:  # noqa: BLE001 - any failure to read the cache means "not cached"
            removed = self.discard()
            _warn_once(f"numba cache entry of {self._name} in {self._cache_path} is unreadable "
                       f"({type(exc).__name__}: {str(exc)[:120]}); removed {removed} file(s), recompiling")
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs speed only
            log.warning("cannot write the numba cache of %s in %s: %s: %s", self._name, self._cache_path,
                        type(exc).__name__, exc)

    def discard(self) -> int:
        """Delete this function's index and data files; returns how many were removed."""
        base = os.path.join(self._cache_path, self._impl.filename_base)
        removed = 0
        for path in [base + ".nbi"] + glob.glob(glob.escape(base) + ".*.nbc"):
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cannot remove the bad numba cache file %s: %s", path, exc)
        return removed


class LazyCache:
    """A dispatcher's :class:`CheckedCache`, made when the dispatcher first compiles or loads. Making
    one finds the cache folder and checks it is writable (a folder made and a temporary file written
    and removed per kernel): ~0.5 ms a dispatcher, at import, for the ~120 kernels of this package,
    most of which a given model never calls."""

    __slots__ = ("_py_func", "_made")

    def __init__(self, py_func):
        self._py_func = py_func
        self._made = None

    def made(self) -> CheckedCache:
        """The CheckedCache (made now if it was not)."""
        if self._made is None:
            with _lock:
                if self._made is None:
                    self._made = CheckedCache(self._py_func)
        return self._made

    def __getattr__(self, name):  # load_overload, save_overload, flush, cache_path, discard, ...
        return getattr(self.made(), name)


def checked(dispatcher, enabled: bool = True):
    """Give ``dispatcher`` (from ``numba.njit``) a :class:`CheckedCache` (made on its first use:
    :class:`LazyCache`) when ``enabled`` (a plain function, as ``njit`` gives under
    NUMBA_DISABLE_JIT=1, is left alone); returns it."""
    if enabled and hasattr(dispatcher, "enable_caching"):
        dispatcher._cache = LazyCache(dispatcher.py_func)
    return dispatcher

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

The key also carries the values a kernel's code was built from and that its source does not fix
(:func:`baked`): the plain values (bool, int, float, str, tuples of them) of the module globals its
code reads (Numba freezes a global's value into the code when it compiles), of its closure's cells
(what a builder such as ftile's, rnpair's or fdirect's captured), and the same of every function,
kernel and intrinsic those reach. A module switch that a test or an A/B run (``turns.py --variant
LABEL=kernels.X.Y=V``) sets therefore gets code compiled for its value, where the name alone
(``CLOSURE_KEY``) let a process load the code another value compiled.

A kernel's compiled code is self-contained (:class:`SelfContainedLibrary`): Numba links a copy of every
callee into the caller's module, optimises the whole module again, and exports the copies as weak
symbols, which the JIT's linker binds to a definition of the same name already loaded in the process,
if any. A process that compiles a caller has compiled its callees first, so the caller ran the callees'
own code; a process that loads the caller from this cache usually has not, so it ran the copies, which
the second optimisation (fastmath: ``reassoc``, ``contract``) may have made round differently: the
results depended on what the process had compiled or loaded before (rnpair's half, issue 11, session 13).
The copies are therefore made local to the caller's object after optimisation: the compiling and the
loading process run the same machine code, and a copy never binds to another function that carries the
same mangled name (the names number functions per process).

The names themselves are made from the entry's key (:func:`derived_uid`). Numba names a function
``qualname[abi:vN](argument types)``, N a counter of the functions the process compiled, and it looks a
compiled function's C entry points up by name in one table per process (``pairs.function_address``: the
pair halves' addresses): where two entries that different processes wrote define the same name (the same
closure's qualname and types, built from other values, at the same count: ftile's 8-row and 12-row rows
drivers, fpair's halves of two products), a lookup made after both were loaded found the one loaded last.
A kernel whose entry this module keys takes N from a hash of that key instead, so entries of different
code carry different names, whichever process wrote them (and a process never gives a name twice: an N it
already gave or loaded falls back to the counter).

The cache folder must be writable only by the user (it holds pickles, which this module does not make
safe to read from someone else); ``NUMBA_CACHE_DIR`` moves it.
"""
from __future__ import annotations

import glob
import hashlib
import logging
import os
import threading
import types
import warnings
from functools import cache
from pathlib import Path

import llvmlite.binding as ll
import numpy as np
from numba.core.caching import FunctionCache
from numba.core.codegen import JITCodeLibrary

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


_PLAIN = (bool, int, float, complex, str, bytes, type(None), np.generic)


@cache
def _names(code) -> tuple:
    """The names ``code`` (and the code nested in it) loads: globals, and attributes (a module's switch
    read as ``module.NAME``), in order, once each."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_names(const))
    return tuple(dict.fromkeys(names))


def _ours(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("kernelkit_numba")


def _function_of(obj):
    """The Python function behind a kernel (its ``py_func``), an intrinsic (its typing function) or a
    cached or wrapped function; None for anything else."""
    for attr in ("py_func", "_defn", "__wrapped__"):
        inner = getattr(obj, attr, None)
        if inner is not None:
            return _function_of(inner) or inner
    return obj if isinstance(obj, types.FunctionType) else None


def _feed(digest, value, seen: set) -> None:
    """Add ``value`` to ``digest``: a plain value (or a tuple or frozenset of them) by value, a function,
    kernel or intrinsic of this package by its name, its cells and the globals its code reads (each
    once), anything else (a module, a mutable container, a lock, a foreign function) by its type."""
    if isinstance(value, _PLAIN):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
        return
    if isinstance(value, tuple):
        digest.update(b"(")
        for item in value:
            _feed(digest, item, seen)
        digest.update(b")")
        return
    if isinstance(value, frozenset):
        digest.update(repr(sorted(repr(v) for v in value)).encode())
        return
    fn = _function_of(value)
    if fn is None or not _ours(fn):
        digest.update(f"<{type(value).__module__}.{type(value).__qualname__}>".encode())
        return
    digest.update(f"{fn.__module__}.{fn.__qualname__}".encode())
    if id(fn) in seen:
        return
    seen.add(id(fn))
    for cell in fn.__closure__ or ():
        try:
            _feed(digest, cell.cell_contents, seen)
        except ValueError:  # an empty cell
            digest.update(b"<empty>")
    env = fn.__globals__
    names = _names(fn.__code__)
    for name in names:
        if name not in env:
            continue
        value = env[name]
        if isinstance(value, types.ModuleType):  # module.NAME: every name the code loads that it has
            if value.__name__.startswith("kernelkit_numba"):
                for attr in names:
                    if attr in value.__dict__:
                        digest.update(f"{name}.{attr}=".encode())
                        _feed(digest, value.__dict__[attr], seen)
            continue
        digest.update(f"{name}=".encode())
        _feed(digest, value, seen)


def baked(py_func) -> str:
    """SHA-256 over the values the code of ``py_func`` (a kernel's function) is built from beyond its
    source: see the module doc. Computed on each load and save of a kernel (the bytecode scans are
    cached)."""
    digest = hashlib.sha256()
    _feed(digest, py_func, set())
    return digest.hexdigest()


def _reads(fn, memo: dict) -> frozenset:
    """The (module, name) pairs of module globals that ``fn``'s code (nested code included) reads, directly
    or through the functions, kernels and cached builders of this package it reaches by a global name."""
    if id(fn) in memo:
        return memo[id(fn)] or frozenset()
    memo[id(fn)] = None  # a cycle: what the outer call collects
    out: set = set()
    env, names = fn.__globals__, _names(fn.__code__)

    def visit(module: str, name: str, value) -> None:
        out.add((module, name))
        inner = _function_of(value)
        if inner is not None and _ours(inner):
            out.update(_reads(inner, memo))

    for name in names:
        if name not in env:
            continue
        value = env[name]
        if isinstance(value, types.ModuleType):
            if value.__name__.startswith("kernelkit_numba"):
                for attr in names:
                    if attr in value.__dict__:
                        visit(value.__name__, attr, value.__dict__[attr])
            continue
        visit(fn.__module__, name, value)
    memo[id(fn)] = frozenset(out)
    return memo[id(fn)]


def built_once_readers(module: str, name: str) -> list[str]:
    """The builders and kernels of this package that a process makes once and whose code reads the module
    constant ``module.name`` (``kernelkit_numba.kernels.ftile``, ``ROWS_TILE_MAJOR``), directly or through
    the functions it calls: the kernels (Numba freezes a global into the code it compiles, once a signature),
    the ``functools.cache`` builders and ftile's ``_built_once`` ones (their result is kept per arguments,
    not per the constants they read). A constant set in a live process after those ran reaches none of
    their products: a benchmark that switches it inside one process (nodes_ab.py) would measure the code
    built first (``turns.py --variant`` gives each value a process). Imported modules of this package only."""
    import sys

    memo: dict = {}
    found = []
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("kernelkit_numba") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            once = hasattr(value, "py_func") or hasattr(value, "cache_clear") or hasattr(value, "__wrapped__")
            fn = _function_of(value) if once else None
            if fn is None or not _ours(fn) or fn.__module__ != mod_name:
                continue
            if (module, name) in _reads(fn, memo):
                found.append(f"{mod_name}.{attr}")
    return sorted(set(found))


# A closure's cache key: Numba hashes a pickle of the closure's cells, which for cells that pickle
# differently in every process (an intrinsic carries a random id) is a new key each time: the entry
# is never found, and every process appends another. A closure kernelkit compiles per variant names
# its variant in this attribute instead (a str that, with the package's sources, fixes its code).
CLOSURE_KEY = "_kernelkit_cache_key"


# the Itanium-mangled namespace of this package's functions (``_ZN15kernelkit_numba...``)
_OURS = "15kernelkit_numba"


class SelfContainedLibrary(JITCodeLibrary):
    """Numba's JIT code library whose linked-in copies of this package's functions are made local
    (``internal``) once the module is optimised, so that the caller's object file calls its own copies
    wherever it is compiled or loaded (see the module doc). The optimised code is Numba's: only the
    symbols' binding changes."""

    def _optimize_final_module(self):
        super()._optimize_final_module()
        for fn in self._final_module.functions:
            if not fn.is_declaration and fn.linkage == ll.Linkage.linkonce_odr and _OURS in fn.name:
                fn.linkage = "internal"


_installed: list = []


def self_contained() -> bool:
    """Make Numba's CPU code generator build :class:`SelfContainedLibrary` libraries and name the kernels
    this module keys after their keys (:func:`derived_uid`; once a process, before the first kernel of this
    package compiles or loads: ``LazyCache.made``); whether the libraries are self-contained."""
    if not _installed:
        with _lock:
            if not _installed:
                from numba.core.registry import cpu_target

                gen = cpu_target.target_context.codegen()
                if issubclass(SelfContainedLibrary, type(gen)._library_class):
                    gen._library_class = SelfContainedLibrary
                _name_after_keys()
                _installed.append(gen._library_class is SelfContainedLibrary)
    return _installed[0]


# -- function names from the entry's key ----------------------------------------------------------------
_UID_BITS = 62  # N in [2**62, 2**63): never one of Numba's counter's (1, 2, ...)
_naming = threading.local()  # .pending: [(py_func, N)] for the compiles a cache miss is about to start
_given: set = set()  # the derived N this process compiled or loaded names under


def derived_uid(key) -> int:
    """The N of the names of a kernel compiled for cache index ``key`` (a hash of its ``repr``: the
    signature, the CPU, the code and everything else the key holds)."""
    digest = hashlib.sha256(repr(key).encode()).digest()
    return (1 << _UID_BITS) | (int.from_bytes(digest[:8], "little") & ((1 << _UID_BITS) - 1))


def _name_after_keys() -> None:
    """Wrap Numba's ``FunctionIdentity.from_function`` (where a compile takes its N from the process's
    counter): the function a cache miss of this module's registered takes that N instead (once)."""
    from numba.core.bytecode import FunctionIdentity

    made = FunctionIdentity.from_function.__func__
    if getattr(made, "_kernelkit", False):
        return

    def from_function(cls, pyfunc):
        ident = made(cls, pyfunc)
        pending = getattr(_naming, "pending", None)
        for i in range(len(pending or ()) - 1, -1, -1):
            if pending[i][0] is ident.func:
                uid = pending.pop(i)[1]
                if uid not in _given:
                    ident.unique_id, ident.unique_name = uid, f"{ident.func_qualname}${uid}"
                    _given.add(uid)
                break
        return ident

    from_function._kernelkit = True
    FunctionIdentity.from_function = classmethod(from_function)


def _will_compile(py_func, key) -> None:
    """A cache miss of ``py_func`` under ``key``: its compile, next, names its functions after the key."""
    pending = _naming.__dict__.setdefault("pending", [])
    pending[:] = [p for p in pending if p[0] is not py_func][-8:]  # a miss that did not compile leaves no trace
    pending.append((py_func, derived_uid(key)))


class CheckedCache(FunctionCache):
    """``FunctionCache`` whose unreadable entries are discarded and recompiled, keyed also on the
    package's sources (see the module doc)."""

    def _index_key(self, sig, codegen):
        key = getattr(self._py_func, CLOSURE_KEY, None)
        if key is None:
            return (*super()._index_key(sig, codegen), package_fingerprint(), baked(self._py_func))
        digest = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
        return (sig, codegen.magic_tuple(), (digest, hashlib.sha256(key.encode()).hexdigest()),
                package_fingerprint(), baked(self._py_func))

    def load_overload(self, sig, target_context):
        try:
            cres = super().load_overload(sig, target_context)
        except Exception as exc:  # noqa: BLE001 - any failure to read the cache means "not cached"
            removed = self.discard()
            _warn_once(f"numba cache entry of {self._name} in {self._cache_path} is unreadable "
                       f"({type(exc).__name__}: {str(exc)[:120]}); removed {removed} file(s), recompiling")
            cres = None
        if cres is None:  # Numba compiles it next: under names made from the key
            try:
                key = self._index_key(sig, target_context.codegen())
            except Exception:  # noqa: BLE001 - no key (a cell that does not pickle): the counter's N
                key = None
            if key is not None:
                _will_compile(self._py_func, key)
        elif (getattr(cres.fndesc, "uid", None) or 0) >> _UID_BITS:
            _given.add(cres.fndesc.uid)
        return cres

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
            self_contained()
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

"""Backend discovery through the ``kernelkit.backends`` entry-point group.

Each entry point names a callable (``initialize``) that only registers kernels and devices. A
backend that fails to load is a logged warning, never a crash. Backends load on first need:
``load_backends(names=[...])`` loads some, and a Session that names its vendors loads only the
backends named like them (``selected``; an op or a device none of them provides still loads the
others), so that a numba session never imports the OpenCL backend (issue 11, warm start).
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import re
import threading
import warnings
from importlib.metadata import distributions, entry_points

log = logging.getLogger("kernelkit.backends")

GROUP = "kernelkit.backends"
BUILTIN_VENDORS = ("reference",)  # vendors of core's own kernels: no backend to load
_loaded: dict[str, str] = {}  # backend name -> "ok" or the error text
_lock = threading.RLock()
_done = False
_eps: tuple | None = None  # (entry_points function, its backends): scanned once (~20 ms of metadata)
# The backends that a load without names loads in this context (a Session build that names its
# vendors: ``selected``); None: every installed backend.
_selection: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("kernelkit_backends", default=None)


def _entry_points() -> list:
    global _eps
    if _eps is None or _eps[0] is not entry_points:  # a test that swaps entry_points sees its own
        _eps = (entry_points, list(entry_points(group=GROUP)))
    return _eps[1]


def backend_names() -> list[str]:
    """The names of the installed backends' entry points (nothing is imported)."""
    return [ep.name for ep in _entry_points()]


def load_backends(force: bool = False, names=None) -> dict[str, str]:
    """Load installed backends once each; returns name -> status ("ok" or the failure) of those
    loaded so far. ``names``: only the backends of these entry-point names (unknown names are
    ignored; the others load at a later call without names), so that e.g. a numba session does not
    import the OpenCL backend. Without names: every installed backend, or inside ``selected(...)``
    (a Session build that names its vendors) the selected ones."""
    global _done
    if names is None:
        names = _selection.get()
    from . import deferred

    if deferred.request() is None and deferred.pending():  # asked for outside a build that may defer
        deferred.finish(None if names is None else set(names))
    with _lock:
        if names is None:
            if _done and not force:
                return dict(_loaded)
            _done = True
            eps = _entry_points()
        else:
            wanted = set(names)
            if not force and wanted <= _loaded.keys():
                return dict(_loaded)
            eps = [ep for ep in _entry_points() if ep.name in wanted]
        for ep in eps:
            if ep.name in _loaded and not force:
                continue
            try:
                init = ep.load()
                rest = init()
                if callable(rest):  # a deferred backend (kernelkit.deferred): the rest loads later
                    if deferred.request() is None:
                        rest()
                    else:
                        deferred.defer(ep.name, rest)
                _loaded[ep.name] = "ok"
                log.debug("loaded backend %s (%s)", ep.name, ep.value)
            except Exception as exc:  # a broken plugin must not take the runtime down
                _loaded[ep.name] = f"{type(exc).__name__}: {exc}"
                msg = f"kernelkit backend {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
                log.warning(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
        return dict(_loaded)


def load_all_backends() -> dict[str, str]:
    """Every installed backend, whatever ``selected`` says (a lookup that found nothing in the
    selected ones: an op or a device that another backend may declare)."""
    return load_backends(names=backend_names())


def names_for_vendors(vendors) -> tuple[str, ...] | None:
    """The backends a session of these ``vendors`` needs: the entry points named like its vendors
    (core's built-in vendors need none); None (every backend) when ``vendors`` is None or names a
    vendor that no entry point is named after (a plugin may register it under another name)."""
    if vendors is None:
        return None
    known = set(backend_names())
    wanted = tuple(v for v in vendors if v not in BUILTIN_VENDORS)
    return wanted if all(v in known for v in wanted) else None


@contextlib.contextmanager
def selected(names):
    """Within the body, ``load_backends()`` without names loads only ``names`` (None: every one)."""
    token = _selection.set(None if names is None else tuple(names))
    try:
        yield
    finally:
        _selection.reset(token)


_session_hooks: list = []  # (fn, whether it takes the session's KernelScope)


def register_session_hook(fn) -> None:
    """Register ``fn(device, options, scope)``, called at the start of every Session build (before
    kernel selection) with the session's device name, options and ``KernelScope``, so that a backend
    can act on its own options, e.g. load the custom kernels a session names: kernels it registers
    with ``scope.register_kernel`` are seen by that session only. A hook of two parameters
    ``fn(device, options)`` gets no scope. Registering a function twice is a no-op."""
    try:
        params = inspect.signature(fn).parameters.values()
        takes_scope = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) >= 3 or any(
            p.kind is p.VAR_POSITIONAL for p in params)
    except (TypeError, ValueError):
        takes_scope = False
    with _lock:
        if all(f is not fn for f, _ in _session_hooks):
            _session_hooks.append((fn, takes_scope))


def run_session_hooks(device: str, options: dict, scope=None) -> None:
    load_backends()
    for fn, takes_scope in list(_session_hooks):
        if takes_scope:
            fn(device, options, scope)
        else:
            fn(device, options)


_settle_hooks: list = []  # fn(timeout): waits for a backend's background work


def register_settle_hook(fn) -> None:
    """Register ``fn(timeout)``, which blocks until background work that earlier runs started has
    ended (kernelkit_numba: kernels compiling off-thread while reference kernels stand in, its
    tiered start). Benchmarks call ``settle()`` after the first run, so that the timed runs see the
    finished kernels. Registering a function twice is a no-op."""
    with _lock:
        if fn not in _settle_hooks:
            _settle_hooks.append(fn)


def settle(timeout: float | None = None) -> None:
    """Wait for sessions upgrading in the background (``kernelkit.deferred``), then call every
    settle hook (see ``register_settle_hook``)."""
    from . import deferred

    deferred.wait(timeout)
    for fn in list(_settle_hooks):
        fn(timeout)


def installed_packages() -> list[tuple[str, str, list[str]]]:
    """``(distribution, version, backend entry-point names)`` for kernelkit itself and every installed
    distribution that depends on it or plugs into a ``kernelkit.*`` entry-point group; kernelkit
    first, then by name. Reads package metadata only: nothing is imported."""
    found: dict[str, tuple[str, str, list[str]]] = {}
    for dist in distributions():
        name = dist.metadata["Name"] or ""
        key = re.sub(r"[-_.]+", "-", name).lower()
        backends = sorted(ep.name for ep in dist.entry_points if ep.group == GROUP)
        plugs = any(ep.group.startswith("kernelkit.") for ep in dist.entry_points)
        requires = any(_req_name(r) == "kernelkit" for r in dist.requires or ())
        if key == "kernelkit" or plugs or requires:
            found.setdefault(key, (name, dist.version, backends))
    return sorted(found.values(), key=lambda t: (t[0].lower() != "kernelkit", t[0].lower()))


def _req_name(requirement: str) -> str:
    """The normalised project name of a requirement string (PEP 503)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""

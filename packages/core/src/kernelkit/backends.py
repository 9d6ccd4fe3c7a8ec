"""Backend discovery through the ``kernelkit.backends`` entry-point group.

Each entry point names a callable (``initialize``) that only registers kernels and devices. A
backend that fails to load is a logged warning, never a crash.
"""
from __future__ import annotations

import inspect
import logging
import re
import threading
import warnings
from importlib.metadata import distributions, entry_points

log = logging.getLogger("kernelkit.backends")

GROUP = "kernelkit.backends"
_loaded: dict[str, str] = {}  # backend name -> "ok" or the error text
_lock = threading.RLock()
_done = False


def load_backends(force: bool = False) -> dict[str, str]:
    """Load every installed backend once; returns name -> status ("ok" or the failure)."""
    global _done
    with _lock:
        if _done and not force:
            return dict(_loaded)
        _done = True
        for ep in entry_points(group=GROUP):
            if ep.name in _loaded and not force:
                continue
            try:
                init = ep.load()
                init()
                _loaded[ep.name] = "ok"
                log.debug("loaded backend %s (%s)", ep.name, ep.value)
            except Exception as exc:  # a broken plugin must not take the runtime down
                _loaded[ep.name] = f"{type(exc).__name__}: {exc}"
                msg = f"kernelkit backend {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
                log.warning(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
        return dict(_loaded)


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
    """Call every settle hook (see ``register_settle_hook``)."""
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

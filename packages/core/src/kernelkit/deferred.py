"""Deferred backends: a Session that starts on the kernels already loaded while a backend finishes
loading in the background (issue 11, session 7).

A backend whose import is slow (kernelkit_numba: importing Numba and building ~130 dispatchers,
0.2-0.3 s of a warm-cache first call whose target is 0.3 s above the steady state) may, when a
Session build allows it, register only its light part and hand back the rest as a *finisher*
(its ``initialize`` returns a callable; ``request()`` tells it whether the build allows that). The
build then selects among the kernels already registered (the reference kernels: the session
accepts them), and an :class:`Upgrade` thread, once the model's thread is idle (its first run
over, or ``MAX_DELAY_S`` after the build when no run came), runs the finishers, builds the same
session again with every kernel registered, runs it once on a copy of the first run's feeds
(``warming()``: the backend compiles or loads its kernels there, off the model's thread), and
swaps the new plan into the session. Results before the swap come from the reference kernels,
after it from the backend's; both agree within ``kernelkit.testing.TOLERANCES``, as the tiered
start's stand-ins do.

Anything that asks for a backend outside such a build (``load_backends``, ``registry.kernels``,
another Session that does not allow deferring) finishes it first, on its own thread. ``wait()``
blocks until every upgrade has swapped (``kernelkit.backends.settle`` and the numba backend's
``wait_compiled`` call it).
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np

log = logging.getLogger("kernelkit.deferred")

IDLE_S = 0.01  # an upgrade starts once no run has been in flight for this long after the first ended
MAX_DELAY_S = 0.5  # ... or this long after the build when no run came (or the first run ended)

# (device, vendors, options) of the Session build that allows deferring (None: none does)
_allowed: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("kernelkit_deferred", default=None)
_lock = threading.RLock()
_finish_lock = threading.RLock()  # one finisher at a time (imports); others wait for it
_finishing: set = set()  # backends whose finisher runs now (a nested load on that thread skips them)
_changed = threading.Condition(_lock)
_pending: dict[str, Callable] = {}  # backend name -> its finisher, not run yet
_upgrades: set = set()  # Upgrades not swapped yet
_warm_hooks: list = []  # fn(on: bool): the calling thread is (not) warming a session up


def request() -> tuple | None:
    """For a backend's ``initialize``: ``(device, vendors, options)`` of the Session build that
    allows it to defer its heavy part (return a finisher), or None: load everything now."""
    return _allowed.get()


@contextlib.contextmanager
def allowing(allow: bool, device: str, vendors, options: dict):
    """The body (a Session build) allows backends to defer (``allow``) or not."""
    token = _allowed.set((device, vendors, dict(options or {})) if allow else None)
    try:
        yield
    finally:
        _allowed.reset(token)


def defer(name: str, finisher: Callable) -> None:
    """Record backend ``name``'s finisher (``kernelkit.backends.load_backends`` does, when its
    ``initialize`` returned one)."""
    with _lock:
        _pending[name] = finisher


def pending() -> list[str]:
    """Backends whose finisher has not run."""
    with _lock:
        return sorted(_pending)


def finish(names=None) -> None:
    """Run the finishers of ``names`` (None: every pending backend) on this thread, once each. A
    finisher that fails is logged as a failed backend load is (the kernels it did not register are
    simply not selected)."""
    with _finish_lock:
        with _lock:
            todo = [(n, f) for n, f in _pending.items() if (names is None or n in names) and n not in _finishing]
            _finishing.update(n for n, _ in todo)
        for name, finisher in todo:
            try:
                finisher()
            except Exception as exc:  # noqa: BLE001 - as a backend that fails to load: a warning
                log.warning("deferred backend %s failed to finish loading: %s: %s", name, type(exc).__name__, exc)
            finally:
                with _lock:
                    _pending.pop(name, None)
                    _finishing.discard(name)


def register_warm_hook(fn) -> None:
    """Register ``fn(on)``, called on the upgrade thread with True before the warm-up run and False
    after: a backend that compiles off the model's thread (numba's tiered start) compiles right
    there instead. Registering a function twice is a no-op."""
    with _lock:
        if fn not in _warm_hooks:
            _warm_hooks.append(fn)


@contextlib.contextmanager
def warming():
    """The body runs a session once to warm it up (the warm hooks are told)."""
    hooks = list(_warm_hooks)
    for fn in hooks:
        fn(True)
    try:
        yield
    finally:
        for fn in hooks:
            fn(False)


def wait(timeout: float | None = None) -> bool:
    """Block until every upgrade of this process has swapped (True), or ``timeout`` seconds passed
    (False). (A forked child's copies of its parent's upgrades restart at their session's next run.)"""
    pid = os.getpid()
    with _changed:
        return _changed.wait_for(lambda: not any(u.pid == pid for u in _upgrades), timeout)


class Upgrade:
    """The background rebuild of one session built while backends were deferred (module doc).
    ``rebuild(session)`` returns the new session (built with every backend loaded); ``swap(session,
    new)`` moves its plan into the old one. The session is held weakly: one dropped before its
    upgrade starts is not rebuilt."""

    def __init__(self, session, rebuild: Callable, swap: Callable):
        self._session = weakref.ref(session)
        self._rebuild, self._swap = rebuild, swap
        self._state = threading.Condition(threading.Lock())
        self._built = time.perf_counter()
        self._running = 0
        self._runs = 0
        self._last_end = 0.0
        self.feeds: dict | None = None
        self.done = threading.Event()
        self._start()

    def _start(self) -> None:
        self.pid = os.getpid()
        with _lock:
            _upgrades.add(self)
        threading.Thread(target=self._serve, name="kernelkit-upgrade", daemon=True).start()

    def run_started(self, feeds: dict) -> None:
        """A run of the session starts (the model's thread); the first one's feeds are kept (copies)."""
        if self.pid != os.getpid() and not self.done.is_set():  # a forked child: the thread stayed behind
            self._state = threading.Condition(threading.Lock())
            self._running = self._runs = 0
            self._built = time.perf_counter()
            self._start()
        with self._state:
            self._running += 1
            if self.feeds is None:
                self.feeds = {k: _frozen(v) for k, v in feeds.items()}

    def run_ended(self) -> None:
        with self._state:
            self._running -= 1
            self._runs += 1
            self._last_end = time.perf_counter()
            self._state.notify_all()

    def _await_idle(self) -> None:
        """Until no run is in flight and (the first run ended IDLE_S ago, or no run came within
        MAX_DELAY_S of the build); at most MAX_DELAY_S after the first run ended."""
        with self._state:
            while True:
                now = time.perf_counter()
                if self._running == 0 and self._runs == 0 and now - self._built >= MAX_DELAY_S:
                    return
                if self._runs and (now - self._last_end >= MAX_DELAY_S or
                                   (self._running == 0 and now - self._last_end >= IDLE_S)):
                    return
                self._state.wait(IDLE_S / 2)

    def _serve(self) -> None:
        try:
            self._await_idle()
            finish()
            session = self._session()
            if session is None:
                return
            new = self._rebuild(session)
            feeds = self.feeds
            if feeds is not None:
                try:
                    with warming():
                        new.run(None, feeds)
                except Exception as exc:  # noqa: BLE001 - the nodes then load on their first calls
                    log.debug("warm-up run of the upgraded session failed: %s: %s", type(exc).__name__, exc)
            self._swap(session, new)
        except Exception as exc:  # noqa: BLE001 - the session keeps the kernels it started with
            log.warning("session upgrade failed (the session keeps its first kernels): %s: %s",
                        type(exc).__name__, exc)
        finally:
            self.feeds = None
            self.done.set()
            with _changed:
                _upgrades.discard(self)
                _changed.notify_all()


def _frozen(a):
    copy = np.array(a, copy=True)
    copy.flags.writeable = False
    return copy

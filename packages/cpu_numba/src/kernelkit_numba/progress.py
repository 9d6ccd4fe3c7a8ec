"""A progress line on stderr while Numba compiles kernels (core's ``kernelkit.progress``: shown only
when stderr is a terminal and output is not quieted).

A first run with an empty cache compiles every kernel the model uses (seconds); without a word on
screen that looks like a hang. ``install()`` (called by the first kernel execution) registers a
listener for Numba's ``numba:compile`` event, which fires only for real compilations (a kernel
loaded from the disk cache fires none). Each outermost compilation is one spinner task,

    kernelkit-numba: compiling conv._im2col (3 compiled)

which disappears when that compilation ends (callees compiled on the way count, but keep the line).
"""
from __future__ import annotations

import threading

from .cache import CLOSURE_KEY

_installed = False
_lock = threading.Lock()


class _Line:
    """The numba:compile listener (``numba.core.event.Listener``), built in ``install``. ``task`` is
    core's ``progress.task`` (a context manager factory)."""

    def __init__(self, task):
        self.task, self.depth, self.count, self.open = task, 0, 0, None

    def on_start(self, event):
        self.depth += 1
        self.count += 1
        if self.depth == 1:
            dispatcher = event.data.get("dispatcher")
            fn = getattr(dispatcher, "py_func", dispatcher)
            module = getattr(fn, "__module__", "") or ""
            if not module.startswith("kernelkit_numba"):  # a user's own Numba function: not ours to report
                return
            # a variant's driver (ftile.py's closures) by its variant: "ftile.rows.avx512"
            name = getattr(fn, CLOSURE_KEY, None) or \
                f"{module.removeprefix('kernelkit_numba.kernels.')}.{fn.__qualname__}"
            self.open = self.task(f"kernelkit-numba: compiling {name} ({self.count - 1} compiled)")
            self.open.__enter__()

    def on_end(self, event):
        self.depth -= 1
        if self.depth == 0 and self.open is not None:
            opened, self.open = self.open, None
            opened.__exit__(None, None, None)


def install() -> None:
    """Register the compile listener once per process, when a progress display could be shown."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        _installed = True
        from kernelkit import progress

        if not progress.enabled():
            return
        from numba.core import event

        listener = type("CompileProgress", (_Line, event.Listener), {})(progress.task)
        event.register("numba:compile", listener)

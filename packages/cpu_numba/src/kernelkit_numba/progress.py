"""A progress line on stderr while Numba compiles kernels, when stderr is a terminal.

A first run with an empty cache compiles every kernel the model uses (seconds); without a word on
screen that looks like a hang. ``install()`` (called by the first kernel execution) registers a
listener for Numba's ``numba:compile`` event, which fires only for real compilations (a kernel
loaded from the disk cache fires none), and shows one line, rewritten in place and erased when the
outermost compilation ends:

    kernelkit-numba: compiling kernels.conv._im2col (3 compiled, 1.2 s)
"""
from __future__ import annotations

import threading
import time

_installed = False
_lock = threading.Lock()


class _Line:
    """The numba:compile listener (``numba.core.event.Listener``), built in ``install``."""

    def __init__(self, console):
        self.console, self.depth, self.count, self.t0 = console, 0, 0, 0.0

    def on_start(self, event):
        if self.depth == 0 and self.count == 0:
            self.t0 = time.perf_counter()
        self.depth += 1
        self.count += 1
        dispatcher = event.data.get("dispatcher")
        fn = getattr(dispatcher, "py_func", dispatcher)
        name = f"{fn.__module__.removeprefix('kernelkit_numba.')}.{fn.__qualname__}" if fn is not None else "?"
        self._write(f"kernelkit-numba: compiling {name} ({self.count - 1} compiled, "
                    f"{time.perf_counter() - self.t0:.1f} s)")

    def on_end(self, event):
        self.depth -= 1
        if self.depth == 0:
            self._write("")

    def _write(self, text: str) -> None:
        width = max(20, self.console.width - 1)
        self.console.file.write("\r\x1b[2K" + text[:width])
        self.console.file.flush()


def install() -> None:
    """Register the progress line once per process, if stderr is a terminal."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        _installed = True
        from rich.console import Console

        console = Console(stderr=True)
        if not console.is_terminal:
            return
        from numba.core import event

        listener = type("CompileProgress", (_Line, event.Listener), {})(console)
        event.register("numba:compile", listener)

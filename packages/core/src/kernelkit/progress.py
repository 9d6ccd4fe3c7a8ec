"""Progress on long work (kernel compilation, OpenCL builds and tuning, model conversion, benchmark
runs): a rich progress bar or spinner on stderr, shown only when stderr is a terminal.

    from kernelkit import progress

    with progress.task("first run: compiling kernels"):      # a spinner (no total)
        sess.run(None, feeds)
    with progress.task("benchmark", total=100) as advance:   # a bar
        for _ in range(100):
            ...
            advance()

Any package may call it (core, numba, opencl, the CLI). Nested tasks share one display. Nothing is
shown when stderr is not a terminal, under ``progress.set_quiet(True)`` (the CLI's ``--quiet``), or
with ``$KERNELKIT_QUIET`` set to a non-empty value other than ``0``.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_quiet = False
_display = None  # the shared rich Progress while at least one task is open
_open = 0


def set_quiet(quiet: bool = True) -> None:
    """Silence (True) or re-enable (False) all progress output of this process."""
    global _quiet
    _quiet = bool(quiet)


def enabled() -> bool:
    """Whether a task would be shown now: not quiet and stderr is a terminal."""
    if _quiet or os.environ.get("KERNELKIT_QUIET", "0") not in ("", "0"):
        return False
    stream = sys.stderr
    return bool(getattr(stream, "isatty", None) and stream.isatty())


def _noop(n: float = 1) -> None:
    return None


@contextmanager
def task(description: str, total: float | None = None) -> Iterator[Callable[[float], None]]:
    """Show ``description`` while the block runs (a bar if ``total`` is given, else a spinner);
    yields ``advance(n=1)``. The task disappears when the block ends."""
    global _display, _open
    if not enabled():
        yield _noop
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with _lock:
        if _display is None:
            _display = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            _display.start()
        _open += 1
        display = _display
        task_id = display.add_task(description, total=total)
    try:
        yield lambda n=1: display.advance(task_id, n)
    finally:
        with _lock:
            display.remove_task(task_id)
            _open -= 1
            if _open == 0:
                display.stop()
                _display = None


def iterate(items, description: str, total: float | None = None):
    """``items`` one by one while a bar of ``description`` advances (``total``: ``len(items)``)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    with task(description, total) as advance:
        for item in items:
            yield item
            advance()

"""kernelkit's Numba CPU backend: kernels for device "cpu", vendor "numba".

``initialize`` (the ``kernelkit.backends`` entry point) only imports the kernel modules (every
public module of ``kernels/``, found with ``kernelkit.discovery``), whose ``register_kernel``
decorators register them; nothing is compiled until a kernel first runs
(compiled code is cached on disk, see ``config``). Kernels compile off the model's thread while
the node runs its reference kernel (``tiered``; ``$KERNELKIT_NUMBA_START=eager`` turns it off).
"""
from __future__ import annotations


def initialize():
    """Register this backend's kernels with kernelkit (entry point). In a Session build that allows
    it (``kernelkit.deferred``: a CPU session that accepts reference kernels) and starts tiered,
    only the hooks are registered and the kernels' import (Numba's with it, 0.2-0.3 s) is returned
    as the finisher, run in the background once the model's first run is over."""
    from kernelkit import deferred
    from kernelkit.backends import register_session_hook, register_settle_hook

    from . import tiered

    register_session_hook(tiered.check_options)  # a bad numba_start option fails the build
    register_settle_hook(tiered.wait)  # benchmarks wait for kernels compiling in the background
    deferred.register_warm_hook(tiered.warming)  # an upgrade's warm-up run compiles where it runs
    asked = deferred.request()
    if asked is not None and tiered.may_defer(*asked):
        tiered.blas_single()  # the reference kernels stand in: BLAS at one thread, as for stand-ins
        return _import_kernels
    _import_kernels()
    return None


def _import_kernels() -> None:
    from kernelkit.discovery import import_submodules

    import_submodules(f"{__name__}.kernels")


def wait_compiled(timeout: float | None = None) -> bool:
    """Block until the kernels being compiled in the background (tiered start) are ready; False if
    ``timeout`` seconds passed first. Call it after a first run before timing steady-state speed."""
    from . import tiered

    return tiered.wait(timeout)


def cache_info() -> dict:
    """Where compiled kernels are cached and how many index files are there (``kernelkit bench --json``)."""
    import os
    from pathlib import Path

    from . import config

    folder = Path(os.environ.get("NUMBA_CACHE_DIR") or Path(__file__).parent)
    index = list(folder.rglob("*.nbi")) if folder.exists() else []
    return {"enabled": bool(config.CACHE), "dir": str(folder), "index_files": len(index)}

"""The three disk caches an OpenCL session touches, made safe for read-only homes (containers, CI).

- kernelkit's program cache and tuning file (``programs.cache_root()``): a folder that cannot be
  written costs speed only (builds are kept in memory); one warning says so.
- pyopencl's invoker cache (a pytools persistent dict in platformdirs' user cache dir ``pytools``,
  created when the first kernel's arguments are set): if that folder cannot be written, pyopencl's
  caching is turned off (``PYOPENCL_NO_CACHE``) for this process, with a warning; kernelkit's own
  program cache never goes through pyopencl's.
- PoCL's kernel cache (``$POCL_CACHE_DIR``, default ``$XDG_CACHE_HOME/pocl``): PoCL lists no device
  at all when it cannot create it, so it is pointed at ``<kernelkit cache>/pocl`` (or a temporary
  folder) when the default cannot be written and the variable is unset.

:func:`prepare` runs once per process, before the first platform query.
"""
from __future__ import annotations

import logging
import os
import tempfile
import threading
import warnings
from pathlib import Path

from .programs import cache_root

log = logging.getLogger("kernelkit.opencl.caches")

_done = False
_lock = threading.Lock()


def writable(folder: Path) -> bool:
    """Whether files can be created in ``folder`` (created if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError:
        return False


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _user_cache() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg else Path.home() / ".cache"


def prepare(cl) -> None:
    """Check the caches once (see the module doc); ``cl`` is the imported pyopencl module."""
    global _done
    with _lock:
        if _done:
            return
        _done = True
    root = cache_root()
    root_ok = writable(root)
    if not root_ok:
        _warn(f"kernelkit's cache folder {root} cannot be written: OpenCL programs and tuned parameters "
              f"are kept in memory only (set KERNELKIT_CACHE_DIR to a writable folder to keep them)")
    if not getattr(cl, "_PYOPENCL_NO_CACHE", True):
        import platformdirs

        folder = Path(platformdirs.user_cache_dir("pytools", "pytools"))
        if not writable(folder):
            cl._PYOPENCL_NO_CACHE = True  # read by pyopencl.invoker at import and at every call
            _warn(f"pyopencl's cache folder {folder} cannot be written: pyopencl's caching is off")
    if "POCL_CACHE_DIR" not in os.environ and not writable(_user_cache() / "pocl"):
        target = root / "pocl"
        if not (root_ok and writable(target)):
            target = Path(tempfile.mkdtemp(prefix="kernelkit-pocl-"))
        os.environ["POCL_CACHE_DIR"] = str(target)  # read by PoCL when it first lists its devices
        log.info("PoCL's default cache folder cannot be written; POCL_CACHE_DIR=%s", target)

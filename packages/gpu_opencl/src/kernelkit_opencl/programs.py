"""Building OpenCL programs, with a cache in memory and on disk.

A program is ``source`` specialized by ``-D`` defines plus extra build options. The key is a hash
of the source, the full option string, the device name, the driver version and the platform
version (pyopencl's cache.py key idea), so a driver update rebuilds. On disk
(``$KERNELKIT_CACHE_DIR`` or the platformdirs user cache dir, ``opencl/programs/``) each entry is
a small header (magic, the key, a SHA-256 of the binary) followed by the device binary; writes go
through a temporary file and ``os.replace`` under a file lock. An entry that is corrupt, truncated
or made for another key is rebuilt with a warning.

``KERNELKIT_DUMP_KERNELS=dir`` writes every program built, with all its defines, as ``dir/<label>_<key>.cl``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from kernelkit import KernelBuildError, progress

log = logging.getLogger("kernelkit.opencl.programs")

MAGIC = b"KKCLPRG1\n"
ENV_CACHE = "KERNELKIT_CACHE_DIR"
ENV_DUMP = "KERNELKIT_DUMP_KERNELS"


def cache_root() -> Path:
    """kernelkit's cache folder: ``$KERNELKIT_CACHE_DIR`` or platformdirs' user cache dir."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("kernelkit", appauthor=False))


def format_define(value) -> str:
    """A define's value as OpenCL C text (floats keep full precision and an ``f`` suffix)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value!r}f" if value == value and abs(value) != float("inf") else (
            "NAN" if value != value else ("INFINITY" if value > 0 else "-INFINITY"))
    return str(value)


def build_options(defines: dict, options=()) -> str:
    parts = [f"-D{k}={format_define(v)}" for k, v in sorted(defines.items())]
    return " ".join(parts + list(options))


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class ProgramCache:
    """Built programs of one context/device, in memory and on disk. ``hits``/``misses``/``rebuilt``
    count disk lookups (for tests and the cold/warm build report)."""

    def __init__(self, context, device):
        self.context = context
        self.device = device
        self._memory: dict[str, object] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = self.rebuilt = self.built = 0
        self._pending: dict[str, object] = {}  # key -> Future of a background build (submit)
        self._pool = None
        plat = device.platform
        self._identity = "\n".join((device.name, device.driver_version, plat.name, plat.version))

    def key(self, source: str, options: str) -> str:
        h = hashlib.sha256()
        for part in (source, options, self._identity):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def folder(self) -> Path:
        return cache_root() / "opencl" / "programs"

    def get(self, source: str, defines: dict, options=(), label: str = "program"):
        """The built ``cl.Program`` for ``source`` with ``defines`` and ``options``."""
        opts = build_options(defines, options)
        key = self.key(source, opts)
        with self._lock:
            prg = self._memory.get(key)
        if prg is not None:
            return prg
        prg = self._load(key, opts, label)
        if prg is None:
            prg = self._build(source, opts, label, key)
        with self._lock:
            return self._memory.setdefault(key, prg)

    def cached(self, source: str, defines: dict, options=()) -> bool:
        """Whether the program is built in memory or has a disk entry (then ``get`` only loads)."""
        key = self.key(source, build_options(defines, options))
        with self._lock:
            if key in self._memory:
                return True
        return (self.folder() / f"{key}.bin").exists()

    def submit(self, source: str, defines: dict, options=(), label: str = "program"):
        """``get`` on a thread pool: a Future of the program. OpenCL compilers release the GIL, so
        the programs a first run needs compile in parallel (cold start); one build per key."""
        key = self.key(source, build_options(defines, options))
        with self._lock:
            fut = self._pending.get(key)
            if fut is None:
                if self._pool is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._pool = ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, 16),
                                                    thread_name_prefix="kernelkit-build")
                fut = self._pending[key] = self._pool.submit(self.get, source, defines, options, label)
        return fut

    # -- disk ------------------------------------------------------------------------------------
    def _load(self, key: str, opts: str, label: str):
        import pyopencl as cl

        path = self.folder() / f"{key}.bin"
        try:
            blob = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        problem = None
        try:
            if not blob.startswith(MAGIC):
                raise ValueError("bad magic")
            header, _, binary = blob[len(MAGIC):].partition(b"\n")
            meta = json.loads(header)
            if meta.get("key") != key:
                raise ValueError("entry belongs to another key")
            if meta.get("sha256") != hashlib.sha256(binary).hexdigest() or len(binary) != meta.get("size"):
                raise ValueError("checksum mismatch")
            prg = cl.Program(self.context, [self.device], [binary])
            prg.build(opts, devices=[self.device])
        except Exception as exc:  # corrupt, truncated, foreign or unloadable: rebuild it
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            self.hits += 1
            return prg
        self.rebuilt += 1
        msg = f"OpenCL program cache entry {path} for {label} is unusable ({problem}); rebuilding it"
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        return None

    def _store(self, key: str, binary: bytes) -> None:
        from filelock import FileLock

        folder = self.folder()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            header = json.dumps({"key": key, "sha256": hashlib.sha256(binary).hexdigest(), "size": len(binary),
                                 "device": self.device.name}).encode()
            with FileLock(str(folder / f"{key}.lock")):
                atomic_write(folder / f"{key}.bin", MAGIC + header + b"\n" + binary)
        except OSError as exc:  # a read-only cache folder costs speed, never correctness
            log.warning("cannot write the OpenCL program cache in %s: %s", folder, exc)

    # -- building --------------------------------------------------------------------------------
    def _build(self, source: str, opts: str, label: str, key: str):
        import pyopencl as cl

        self._dump(source, opts, label, key)
        prg = cl.Program(cl._cl._Program(self.context, source))  # bypass pyopencl's own cache
        try:
            with progress.task(f"OpenCL build: {label}"):
                prg.build(opts, devices=[self.device])
        except cl.Error as exc:
            try:
                build_log = prg._prg.get_build_info(self.device, cl.program_build_info.LOG)
            except Exception:  # noqa: BLE001 - the exception text is the log of last resort
                build_log = ""
            raise KernelBuildError(
                f"OpenCL build of {label} failed on device {self.device.name!r} "
                f"(options: {opts or 'none'}):\n{build_log.strip() or exc}") from exc
        log.debug("built %s (%s)", label, opts)
        self._progress(label)
        try:
            binary = prg.get_info(cl.program_info.BINARIES)[0]
        except cl.Error:
            binary = b""
        if binary:
            self._store(key, bytes(binary))
        return prg

    def _progress(self, label: str) -> None:
        """One self-overwriting line on a terminal while programs compile (cold start)."""
        with self._lock:
            self.built += 1
            count = self.built
        if sys.stderr.isatty():
            sys.stderr.write(f"\rkernelkit: compiled {count} OpenCL program(s), last {label[:40]:<40}")
            sys.stderr.flush()

    @staticmethod
    def _dump(source: str, opts: str, label: str, key: str) -> None:
        folder = os.environ.get(ENV_DUMP)
        if not folder:
            return
        lines = [f"// kernelkit OpenCL program {label}", f"// build options: {opts or '(none)'}"]
        for part in opts.split():
            if part.startswith("-D"):
                name, _, value = part[2:].partition("=")
                lines.append(f"#define {name} {value}")
        text = "\n".join(lines) + "\n" + source
        try:
            atomic_write(Path(folder) / f"{label}_{key[:16]}.cl", text.encode())
        except OSError as exc:
            log.warning("KERNELKIT_DUMP_KERNELS: cannot write to %s: %s", folder, exc)

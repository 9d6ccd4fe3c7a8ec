"""Sessions that travel between processes.

A :class:`~kernelkit.Session` pickles as a *recipe*: its model (the path it was built from, or the
model's ``.kkm`` bytes) plus the arguments it was built with. Kernels, device buffers and compiled
code never travel. On the receiving side the recipe becomes a :class:`LazySession`, a ``Session``
that builds itself on first use, so shipping a session to a Ray actor, a Dask worker or a
multiprocessing pool costs one model transfer and one build per process, and the build happens
where the work runs. A rebuilt session whose ``threads`` was left as ``None`` takes the worker's CPU
allotment (:func:`cpu_allotment`), never every core of the host.

No pickle is used for the model itself: it travels as kernelkit's own checksummed ``.kkm`` bytes.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .ir import Model
from .session import Session

log = logging.getLogger("kernelkit.portable")

_builds = 0                       # sessions this process built from a recipe (see build_count)
_builds_lock = threading.Lock()


def model_to_bytes(model: Model) -> bytes:
    """``model`` as the bytes of a ``.kkm`` file (see :mod:`kernelkit.io`)."""
    from .io import save

    with tempfile.TemporaryDirectory(prefix="kernelkit-") as tmp:
        path = Path(tmp) / "model.kkm"
        save(model, path)
        return path.read_bytes()


def model_from_bytes(data: bytes) -> Model:
    """The model in ``data`` (``.kkm`` bytes), validated like a file. Its weights are read-only views
    of a private temporary file, unlinked at once (the mapping keeps it alive)."""
    from .io import load

    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ConfigError(f"model bytes must be bytes, got {type(data).__name__}")
    fd, name = tempfile.mkstemp(prefix="kernelkit-", suffix=".kkm")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return load(name)
    finally:
        try:
            os.unlink(name)
        except OSError:  # pragma: no cover - Windows keeps a mapped file; the OS cleans temp later
            pass


@dataclass(frozen=True)
class SessionRecipe:
    """What a session is rebuilt from: exactly one of ``path`` (a model file every worker can read)
    or ``model_bytes`` (``.kkm`` bytes), plus the ``Session`` keyword arguments."""

    path: str | None = None
    model_bytes: bytes | None = None
    kwargs: dict = field(default_factory=dict)

    @classmethod
    def of(cls, model, *, embed: bool = False, **kwargs) -> SessionRecipe:
        """A recipe for ``model`` (a ``Model``, ``.kkm`` bytes, or a path). ``embed=True`` reads a
        path's model into the recipe, for workers that do not share the file system."""
        if isinstance(model, Model):
            return cls(model_bytes=model_to_bytes(model), kwargs=kwargs)
        if isinstance(model, (bytes, bytearray, memoryview)):
            return cls(model_bytes=bytes(model), kwargs=kwargs)
        if isinstance(model, (str, os.PathLike)):
            path = Path(model).resolve()
            if embed:
                from .loaders import load_model

                return cls(model_bytes=model_to_bytes(load_model(path)), kwargs=kwargs)
            return cls(path=str(path), kwargs=kwargs)
        raise ConfigError(f"model must be a Model, .kkm bytes or a path, got {type(model).__name__}")

    @property
    def digest(self) -> str:
        """A key for "the same session": the model (path or content) and the arguments."""
        h = hashlib.sha256(self.path.encode() if self.path is not None else self.model_bytes)
        h.update(repr(sorted(self.kwargs.items())).encode())
        return h.hexdigest()

    def model(self):
        """The model argument for ``Session``: the path, or the model decoded from the bytes."""
        return self.path if self.path is not None else model_from_bytes(self.model_bytes)

    def build(self):
        """A built ``Session`` in this process. ``threads=None`` becomes :func:`cpu_allotment`."""
        kwargs = dict(self.kwargs)
        if kwargs.get("threads") is None:
            kwargs["threads"] = cpu_allotment()
        sess = Session(self.model(), **kwargs)
        _count_build()
        return sess


def _count_build() -> None:
    global _builds
    with _builds_lock:
        _builds += 1


def build_count() -> int:
    """How many sessions this process has built from recipes (unpickled sessions, integration
    workers): tests and benchmarks use it to prove one build per worker."""
    return _builds


def recipe_of(session) -> SessionRecipe:
    """The recipe a built ``Session`` pickles as (see ``Session.__reduce__``)."""
    source, kwargs = session._recipe_args
    return SessionRecipe.of(source, **kwargs)


def _rebuild(recipe: SessionRecipe):
    return LazySession(recipe)


class LazySession(Session):
    """A ``Session`` from a :class:`SessionRecipe` that builds itself on first use (any attribute a
    built session has: ``run``, ``get_inputs``, ``plan``...). Thread-safe: one build. It pickles as
    its recipe again, built or not."""

    def __init__(self, recipe: SessionRecipe):  # deliberately not Session.__init__: that is the build
        self.__dict__["_lazy_recipe"] = recipe
        self.__dict__["_lazy_lock"] = threading.Lock()
        self.__dict__["_lazy_state"] = "new"

    @property
    def built(self) -> bool:
        """Whether this process has built the session yet."""
        return self.__dict__.get("_lazy_state") == "built"

    def __getattr__(self, name):  # only reached for attributes the instance does not have yet
        d = self.__dict__
        if name.startswith("_lazy") or d.get("_lazy_state") != "new" or "_lazy_recipe" not in d:
            raise AttributeError(name)
        self._lazy_build()
        return object.__getattribute__(self, name)

    def _lazy_build(self) -> None:
        d = self.__dict__
        with d["_lazy_lock"]:
            if d["_lazy_state"] != "new":
                return
            recipe: SessionRecipe = d["_lazy_recipe"]
            kwargs = dict(recipe.kwargs)
            if kwargs.get("threads") is None:
                kwargs["threads"] = cpu_allotment()
            d["_lazy_state"] = "building"
            try:
                Session.__init__(self, recipe.model(), **kwargs)
            except BaseException:
                d["_lazy_state"] = "new"
                raise
            d["_lazy_state"] = "built"
            _count_build()
            log.debug("built a session from a recipe (%s, threads=%s)", recipe.digest[:12], kwargs["threads"])

    def __reduce__(self):
        return _rebuild, (self.__dict__["_lazy_recipe"],)


def cpu_allotment() -> int:
    """The number of CPUs this process may use: the CPUs a Ray task/actor was given (``num_cpus``),
    the threads of the Dask worker it runs in, else the CPU quota of its cgroup and its CPU affinity,
    whichever is smallest. Never every core of a host the process shares."""
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
                if cpus:
                    return max(1, int(cpus))
        except Exception:  # noqa: BLE001 - not inside a Ray worker: fall through
            pass
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker

            return max(1, int(get_worker().state.nthreads))
        except Exception:  # noqa: BLE001 - not inside a Dask worker
            pass
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no affinity API (macOS, Windows)
        n = os.cpu_count() or 1
    quota = _cgroup_cpus()
    return max(1, min(n, quota) if quota else n)


def _cgroup_cpus() -> int | None:
    """CPUs allowed by a cgroup v2 (``cpu.max``) or v1 (``cfs_quota_us``) quota, rounded up."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            return max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:
            return max(1, -(-quota // period))
    except (OSError, ValueError):
        pass
    return None

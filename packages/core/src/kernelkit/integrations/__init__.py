"""Running kernelkit inside other engines: Ray Data (:mod:`.ray`), Dask (:mod:`.dask`) and the
``kernelkit batch`` driver (:mod:`.batch`). Nothing here imports Ray or Dask until used.

The pieces they share:

- a :class:`~kernelkit.SessionRecipe` travels to the workers (model path or ``.kkm`` bytes plus the
  session's arguments); each worker process builds one session from it (:func:`worker_session`);
- a worker's session takes the worker's CPU allotment as its thread count
  (:func:`kernelkit.cpu_allotment`), never every core of the host;
- a shared cache folder (``cache_dir=`` or ``$KERNELKIT_CACHE_DIR``) lets workers reuse compiled Numba
  code, built OpenCL programs and tuned parameters instead of each compiling its own
  (:func:`use_cache_dir`).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from ..backends import settle
from ..errors import ConfigError, InputError
from ..portable import SessionRecipe, cpu_allotment

ENV_CACHE = "KERNELKIT_CACHE_DIR"

_sessions: dict[str, object] = {}
_sessions_lock = threading.Lock()


def use_cache_dir(path) -> Path:
    """Point this process's kernel caches at ``path`` (Numba's compiled code in ``path/numba``,
    OpenCL programs and tuning under ``path/opencl``). Numba reads it when its backend first loads,
    so call this before the first session of the process (the integrations do, in each worker)."""
    folder = Path(path).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[ENV_CACHE] = str(folder)
    return folder


def worker_session(recipe: SessionRecipe, cache_dir=None, warmup: bool = True, batch: int = 1):
    """This process's session for ``recipe``: built and warmed up on the first call (a run on
    synthetic inputs of ``batch`` rows, then waiting until kernels compiling in the background are
    ready, so a worker's batches run on compiled kernels from the first), the same object afterwards.
    Give ``batch`` the rows of the batches the worker will run: the first run at a new batch size
    plans and touches that size's memory and loads the kernels only larger batches take (ResNet-18
    numba, batch 16 after a warm-up at batch 1: 1.2-2.4 s instead of 0.45 s), which a worker with
    few batches otherwise pays inside its work. ``cache_dir`` is applied before the build (see
    :func:`use_cache_dir`)."""
    key = recipe.digest
    with _sessions_lock:
        sess = _sessions.get(key)
        if sess is None:
            if cache_dir is not None:
                use_cache_dir(cache_dir)
            sess = recipe.build()
            if warmup:
                sess.run(None, synthetic_feeds(sess, batch=max(1, int(batch))))
                settle()  # a worker serves many batches: wait for background compiles (tiered start) now
            _sessions[key] = sess
    return sess


def synthetic_feeds(sess, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for ``sess``: symbolic dims become ``batch`` (first axis) or 1."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in sess.get_inputs():
        shape = tuple(d if isinstance(d, int) else (batch if i == 0 else 1) for i, d in enumerate(arg.shape))
        dtype = np.dtype(arg.type)
        if dtype.kind == "f":
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[arg.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            feeds[arg.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def feeds_from_batch(sess, batch: dict, input_map: dict | None = None) -> dict[str, np.ndarray]:
    """The session's feeds from a batch (a dict of column -> array): column names are the model's
    input names unless ``input_map`` maps input name -> column. Ray hands tensor columns as arrays of
    arrays (object dtype) when rows differ in shape; those are stacked."""
    feeds = {}
    for arg in sess.get_inputs():
        column = (input_map or {}).get(arg.name, arg.name)
        if column not in batch:
            raise InputError(f"batch has no column {column!r} for model input {arg.name!r} "
                             f"(columns: {', '.join(map(str, batch))})")
        value = batch[column]
        if isinstance(value, np.ndarray) and value.dtype == object:
            value = np.stack(list(value))
        feeds[arg.name] = np.ascontiguousarray(value, dtype=np.dtype(arg.type))
    return feeds


def check_workers(workers) -> int:
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 4096:
        raise ConfigError(f"workers must be an int in 1..4096, got {workers!r:.40}")
    return workers


__all__ = ["cpu_allotment", "feeds_from_batch", "synthetic_feeds", "use_cache_dir", "worker_session"]

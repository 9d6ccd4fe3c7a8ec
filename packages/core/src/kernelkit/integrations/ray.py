"""Ray Data: ``Dataset.map_batches`` with one kernelkit session per actor.

    import ray
    from kernelkit.integrations.ray import KernelkitPredictor, predict

    ds = ray.data.from_numpy(images).rename_columns({"data": "x"})
    out = predict(ds, "resnet18.kkm", batch_size=32, concurrency=2, num_cpus=1)

``KernelkitPredictor`` is the callable class Ray runs in an actor pool: ``__init__`` builds and warms
up the session once per actor (threads = the actor's ``num_cpus``), ``__call__`` maps a batch
(``dict[str, np.ndarray]``, Ray's ``"numpy"`` batch format) to the model's outputs. Ray is imported
only by :func:`predict`.
"""
from __future__ import annotations

import os

import numpy as np

from ..portable import SessionRecipe, build_count
from . import feeds_from_batch, worker_session


class KernelkitPredictor:
    """Runs a model on Ray Data batches. ``model``: a path every node can read, ``.kkm`` bytes or a
    :class:`~kernelkit.SessionRecipe`; ``input_map``: model input name -> column (default: same
    names); ``keep_columns``: columns copied from the batch to the result; ``annotate=True`` adds a
    ``kernelkit_worker`` column (``pid:session id:builds in this process``) to prove one session per
    actor; ``warmup_batch``: the rows of the warm-up run (give the batches' size, so that the first
    real batch does not pay for a new batch size). Other keyword arguments go to ``Session``
    (``device``, ``vendors``, ``threads``, ...)."""

    def __init__(self, model, *, input_map: dict | None = None, output_names=None, keep_columns=(),
                 cache_dir=None, annotate: bool = False, warmup_batch: int = 1, **session_kwargs):
        recipe = model if isinstance(model, SessionRecipe) else SessionRecipe.of(model, **session_kwargs)
        self.session = worker_session(recipe, cache_dir=cache_dir, warmup=True, batch=warmup_batch)
        self.input_map = dict(input_map or {})
        self.output_names = list(output_names) if output_names else [o.name for o in self.session.get_outputs()]
        self.keep_columns = tuple(keep_columns)
        self.annotate = annotate

    def __call__(self, batch: dict) -> dict:
        feeds = feeds_from_batch(self.session, batch, self.input_map)
        outputs = self.session.run(self.output_names, feeds)
        result = {name: out for name, out in zip(self.output_names, outputs)}
        for column in self.keep_columns:
            result[column] = batch[column]
        if self.annotate:
            rows = len(next(iter(feeds.values())))
            result["kernelkit_worker"] = np.array([f"{os.getpid()}:{id(self.session)}:{build_count()}"] * rows)
        return result


def predict(dataset, model, *, batch_size: int = 32, concurrency: int = 1, num_cpus: float = 1,
            num_gpus: float = 0, embed: bool = True, **predictor_kwargs):
    """``dataset.map_batches`` over a pool of ``concurrency`` actors, each with ``num_cpus`` CPUs (its
    session's threads) and ``num_gpus`` GPUs. ``embed=True`` sends the model's bytes (multi-node
    clusters need no shared file system); ``embed=False`` sends a path. Returns the lazy Dataset."""
    session_keys = ("device", "vendors", "fallback", "threads", "profile", "passes", "options", "stub_ops")
    session_kwargs = {k: predictor_kwargs.pop(k) for k in session_keys if k in predictor_kwargs}
    recipe = model if isinstance(model, SessionRecipe) else SessionRecipe.of(model, embed=embed, **session_kwargs)
    predictor_kwargs.setdefault("warmup_batch", batch_size)
    return dataset.map_batches(KernelkitPredictor, fn_constructor_args=(recipe,),
                               fn_constructor_kwargs=predictor_kwargs, batch_size=batch_size,
                               batch_format="numpy", concurrency=concurrency, num_cpus=num_cpus,
                               num_gpus=num_gpus)

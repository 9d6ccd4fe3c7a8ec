"""Dask: map a model over a dask array's blocks or a dask dataframe's partitions, with one kernelkit
session per worker process (built on the worker's first task, reused by the rest).

    import dask.array as da
    from kernelkit.integrations.dask import map_blocks

    images = da.from_array(array, chunks=(32, 3, 224, 224))
    logits = map_blocks(images, "resnet18.kkm").compute()

The model travels once per worker: as a path (``embed=False``) or as ``.kkm`` bytes inside one shared
graph key (``embed=True``, the default; no shared file system needed). Dask is imported only here.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..portable import SessionRecipe
from . import worker_session

_SESSION_KEYS = ("device", "vendors", "fallback", "threads", "profile", "passes", "options", "stub_ops")


def _recipe(model, embed: bool, kwargs: dict) -> SessionRecipe:
    if isinstance(model, SessionRecipe):
        return model
    return SessionRecipe.of(model, embed=embed, **{k: kwargs.pop(k) for k in _SESSION_KEYS if k in kwargs})


def _output_tail(recipe: SessionRecipe, output_name: str | None, sample_shape: tuple):
    """(output name, per-sample output shape, dtype) from the model's shape inference on one sample
    of ``sample_shape``, computed in the driver without building a session."""
    from ..loaders import load_model
    from ..shape import infer_shapes

    model = load_model(recipe.path) if recipe.path is not None else recipe.model()
    graph = model.copy().graph
    [name_in] = graph.inputs if len(graph.inputs) == 1 else [None]
    if name_in is None:
        raise ConfigError(f"map_blocks runs single-input models; this one has {len(graph.inputs)} inputs")
    spec = graph.values[name_in].spec
    graph.values[name_in].spec = type(spec)(shape=(1, *sample_shape), dtype=spec.dtype)
    infer_shapes(graph)
    name_out = output_name or graph.outputs[0]
    if name_out not in graph.outputs:
        raise ConfigError(f"model has no output {name_out!r} (outputs: {', '.join(graph.outputs)})")
    out = graph.values[name_out].spec
    if not all(isinstance(d, int) for d in out.shape[1:]):
        raise ConfigError(f"output {name_out!r} has shape {out.shape}: map_blocks needs static dims after the batch")
    return name_in, name_out, tuple(out.shape[1:]), np.dtype(out.dtype)


def _run_block(block, recipe, cache_dir, input_name, output_name):
    sess = worker_session(recipe, cache_dir=cache_dir, batch=max(1, len(block)))  # warm-up at this batch size
    feed = np.ascontiguousarray(block, dtype=np.dtype(sess.get_inputs()[0].type))
    return sess.run([output_name], {input_name: feed})[0]


def map_blocks(array, model, *, output_name: str | None = None, embed: bool = True, cache_dir=None, **kwargs):
    """The model's output for every sample (axis 0) of the dask array ``array``: a dask array chunked
    like ``array`` along axis 0. Keyword arguments go to ``Session``."""
    import dask
    import dask.array as da

    recipe = _recipe(model, embed, kwargs)
    if kwargs:
        raise ConfigError(f"unknown arguments: {', '.join(kwargs)}")
    name_in, name_out, tail, dtype = _output_tail(recipe, output_name, tuple(array.shape[1:]))
    if any(len(c) > 1 for c in array.chunks[1:]):
        array = array.rechunk({i: -1 for i in range(1, array.ndim)})
    shared = dask.delayed(recipe, pure=True)
    run = dask.delayed(_run_block, pure=True)
    parts = [da.from_delayed(run(block, shared, cache_dir, name_in, name_out), shape=(rows, *tail), dtype=dtype)
             for block, rows in zip(array.to_delayed().ravel(), array.chunks[0])]
    return da.concatenate(parts, axis=0)


def _run_partition(frame, recipe, cache_dir, input_name, columns, output_name, out_columns):
    import pandas as pd

    sess = worker_session(recipe, cache_dir=cache_dir, batch=max(1, len(frame)))  # warm-up at this batch size
    feed = np.ascontiguousarray(frame[list(columns)].to_numpy(), dtype=np.dtype(sess.get_inputs()[0].type))
    out = sess.run([output_name], {input_name: feed})[0].reshape(len(frame), -1)
    return pd.DataFrame(out, index=frame.index, columns=out_columns)


def map_partitions(frame, model, columns, *, output_name: str | None = None, embed: bool = True,
                   cache_dir=None, **kwargs):
    """Run a model whose single input is ``(N, len(columns))`` over the rows of the dask dataframe
    ``frame``: returns a dask dataframe with one column per output element (``<output>_<i>``)."""
    import dask
    import pandas as pd

    recipe = _recipe(model, embed, kwargs)
    if kwargs:
        raise ConfigError(f"unknown arguments: {', '.join(kwargs)}")
    columns = list(columns)
    name_in, name_out, tail, dtype = _output_tail(recipe, output_name, (len(columns),))
    out_columns = [f"{name_out}_{i}" for i in range(int(np.prod(tail, dtype=np.int64)))]
    meta = pd.DataFrame({c: np.empty(0, dtype) for c in out_columns})
    shared = dask.delayed(recipe, pure=True)
    return frame.map_partitions(_run_partition, shared, cache_dir, name_in, columns, name_out, out_columns,
                                meta=meta)

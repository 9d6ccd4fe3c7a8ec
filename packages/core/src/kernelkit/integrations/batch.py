"""``kernelkit batch``: run a model over a folder of ``.npy``/``.npz`` files or a Parquet file of
tensors, on this machine's processes, a Ray cluster or a Dask cluster.

Work is cut into items (one per input file, or ``batch_size`` rows of the Parquet file); each worker
process builds one session from the recipe and writes one output file per item:

- ``IN/a.npy`` (single-input models) or ``IN/a.npz`` (arrays named as the model's inputs)
  -> ``OUT/a.npz`` with one array per model output. An array whose rank is one less than the input's
  is one sample (a batch axis is added, and removed again from the outputs);
- ``IN.parquet``: one row per sample, one column per model input holding the sample's values as a
  (nested or flat) list; the sample shape is the input's shape after its batch dim, which must be
  static -> ``OUT/part-00000.parquet`` ... with one column per output (flat lists).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import progress
from ..errors import ConfigError, InputError
from ..portable import SessionRecipe, build_count, cpu_allotment
from ..untrusted import open_regular, read_npy, read_npy_header, read_npz
from . import check_workers, worker_session

ENGINES = ("local", "ray", "dask")


@dataclass(frozen=True)
class WorkItem:
    source: str          # the input file
    kind: str            # "npy", "npz" or "parquet"
    start: int = 0       # parquet: first row
    stop: int = 0        # parquet: one past the last row
    index: int = 0       # parquet: the part number

    @property
    def label(self) -> str:
        name = Path(self.source).name
        return f"{name}[{self.start}:{self.stop}]" if self.kind == "parquet" else name


def plan_items(inputs, batch_size: int = 32) -> list[WorkItem]:
    """The work items for ``inputs`` (a folder of .npy/.npz files, or a .parquet file)."""
    path = Path(inputs)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz") and p.is_file())
        if not files:
            raise InputError(f"{path}: no .npy or .npz files in the folder")
        return [WorkItem(str(p), p.suffix[1:]) for p in files]
    if path.suffix == ".parquet" and path.is_file():
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(path).metadata.num_rows
        return [WorkItem(str(path), "parquet", s, min(s + batch_size, rows), i)
                for i, s in enumerate(range(0, rows, batch_size))]
    raise InputError(f"{path}: --input must be a folder of .npy/.npz files or a .parquet file")


def _feeds_from_file(sess, item: WorkItem) -> tuple[dict, bool]:
    inputs = sess.get_inputs()
    if item.kind == "npy":
        if len(inputs) != 1:
            raise InputError(f"{item.source}: a .npy file feeds single-input models; this one has "
                             f"{len(inputs)} inputs (use .npz)")
        try:  # regular files only, headers checked against the data before allocating
            with open_regular(item.source) as fh:
                arrays = {inputs[0].name: read_npy(fh, str(item.source))}
        except (OSError, ValueError) as exc:
            raise InputError(f"{item.source}: cannot read: {exc}") from exc
    else:
        try:
            arrays = read_npz(item.source, str(item.source))
        except (OSError, ValueError) as exc:
            raise InputError(f"{item.source}: cannot read: {exc}") from exc
    feeds, single = {}, False
    for arg in inputs:
        if arg.name not in arrays:
            raise InputError(f"{item.source}: no array named {arg.name!r} (has: {', '.join(arrays)})")
        a = arrays[arg.name]
        if a.ndim == len(arg.shape) - 1:
            a, single = a[None], True
        feeds[arg.name] = np.ascontiguousarray(a, dtype=np.dtype(arg.type))
    return feeds, single


def _feeds_from_parquet(sess, item: WorkItem) -> dict:
    import pyarrow.parquet as pq

    table = pq.read_table(item.source, columns=[a.name for a in sess.get_inputs()])
    table = table.slice(item.start, item.stop - item.start)
    feeds = {}
    for arg in sess.get_inputs():
        tail = tuple(arg.shape[1:])
        if not all(isinstance(d, int) for d in tail):
            raise InputError(f"{item.source}: input {arg.name!r} has shape {arg.shape}: Parquet rows need static "
                             "dims after the batch dim")
        values = np.asarray(table.column(arg.name).to_pylist(), dtype=np.dtype(arg.type))
        feeds[arg.name] = np.ascontiguousarray(values.reshape((len(table), *tail)))
    return feeds


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def process_item(item: WorkItem, recipe: SessionRecipe, output: str, cache_dir=None) -> dict:
    """Run one work item in this process's session and write its output file."""
    sess = worker_session(recipe, cache_dir=cache_dir)
    names = [o.name for o in sess.get_outputs()]
    out_dir = Path(output)
    t0 = time.perf_counter()
    if item.kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        feeds = _feeds_from_parquet(sess, item)
        t1 = time.perf_counter()
        outs = sess.run(names, feeds)
        run_s = time.perf_counter() - t1
        rows = len(next(iter(feeds.values())))
        table = pa.table({n: [o.reshape(-1) for o in out.reshape(rows, -1)] for n, out in zip(names, outs)})
        target = out_dir / f"part-{item.index:05d}.parquet"
        _atomic(target, lambda p: pq.write_table(table, p))
    else:
        feeds, single = _feeds_from_file(sess, item)
        t1 = time.perf_counter()
        outs = sess.run(names, feeds)
        run_s = time.perf_counter() - t1
        rows = len(next(iter(feeds.values())))
        target = out_dir / f"{Path(item.source).stem}.npz"
        result = {n: (o[0] if single else o) for n, o in zip(names, outs)}
        _atomic(target, lambda p: np.savez(open(p, "wb"), **result))
    return {"item": item.label, "rows": rows, "seconds": time.perf_counter() - t0, "run_seconds": run_s,
            "output": str(target),
            "worker": f"{os.getpid()}:{id(sess)}", "builds": build_count()}


def run_batch(model, inputs, output, *, engine: str = "local", workers: int = 1, threads: int | None = None,
              batch_size: int = 32, cache_dir=None, address: str | None = None, quiet: bool = False,
              embed: bool | None = None, **session_kwargs) -> dict:
    """Run ``model`` over ``inputs`` into the folder ``output`` with ``workers`` worker processes of
    ``threads`` threads each (default: this machine's CPU allotment split between the workers).
    ``engine``: ``"local"`` (a process pool here), ``"ray"`` or ``"dask"`` (a local cluster of
    ``workers`` processes, or the cluster at ``address``). Returns a summary dict; ``seconds``
    counts from the moment the engine is up (cluster started, workers' sessions built) to the last
    result."""
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r:.40}")
    workers = check_workers(workers)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r:.40}")
    threads = threads or max(1, cpu_allotment() // workers)
    items = plan_items(inputs, batch_size)
    Path(output).mkdir(parents=True, exist_ok=True)
    recipe = SessionRecipe.of(model, embed=bool(embed if embed is not None else address), threads=threads,
                              **session_kwargs)
    t0 = time.perf_counter()
    runner = {"local": _run_local, "ray": _run_ray, "dask": _run_dask}[engine]
    results = []
    show = nullcontext(lambda n=1: None) if quiet else progress.task(f"{engine} x{workers}", total=len(items))
    with show as advance:
        for result in runner(items, recipe, str(output), cache_dir, workers, threads, address):
            if result is None:  # the engine is up (cluster started, workers created): time from here
                t0 = time.perf_counter()
                continue
            results.append(result)
            last = time.perf_counter()  # the clock stops at the last result, not after the engine's shutdown
            advance()
    seconds = (last - t0) if results else 0.0
    rows = sum(r["rows"] for r in results)
    return {"engine": engine, "workers": workers, "threads": threads, "items": len(results), "rows": rows,
            "seconds": seconds, "busy_seconds": sum(r["seconds"] for r in results),
            "run_seconds": sum(r.get("run_seconds", 0.0) for r in results),
            "rows_per_s": rows / seconds if seconds else 0.0,
            "sessions": len({r["worker"] for r in results}),
            "builds_per_worker": max((r["builds"] for r in results), default=0),
            "outputs": sorted(r["output"] for r in results)}


def _ready(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _init_worker(recipe, cache_dir, batch=1):  # a local worker builds its session before taking work
    worker_session(recipe, cache_dir=cache_dir, batch=batch)


def _warm_batch(items: list[WorkItem]) -> int:
    """The rows of the first work item (a .npy file's leading dim, read from its header; a Parquet
    slice's rows), which the workers warm up at; 1 where that is not known cheaply."""
    if not items:
        return 1
    item = items[0]
    if item.kind == "parquet":
        return max(1, item.stop - item.start)
    if item.kind == "npy":
        try:
            with open_regular(item.source) as fh:
                shape, _ = read_npy_header(fh, str(item.source))
        except (OSError, ValueError):
            return 1  # the item itself reports what is wrong with it
        return int(shape[0]) if len(shape) > 1 and isinstance(shape[0], int) and 0 < shape[0] <= 4096 else 1
    return 1


def _run_local(items, recipe, output, cache_dir, workers, threads, address):
    batch = _warm_batch(items)
    if workers == 1:
        worker_session(recipe, cache_dir=cache_dir, batch=batch)
        yield None
        for item in items:
            yield process_item(item, recipe, output, cache_dir)
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # no fork after threads (Numba, OpenMP, BLAS pools)
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(recipe, cache_dir, batch)) as pool:
        # processes start on demand and a process takes work only once its initializer has built its
        # session: keep `workers` short tasks outstanding until every process has answered one, so
        # that no worker is still starting (or compiling) when the clock starts
        seen: set[int] = set()
        while len(seen) < workers:
            seen.update(pool.map(_ready, [0.05] * workers))
        yield None
        futures = [pool.submit(process_item, item, recipe, output, cache_dir) for item in items]
        for future in as_completed(futures):
            yield future.result()


class _RayWorker:
    def __init__(self, recipe, output, cache_dir, batch=1):
        self.recipe, self.output, self.cache_dir = recipe, output, cache_dir
        worker_session(recipe, cache_dir=cache_dir, batch=batch)

    def process(self, item):
        return process_item(item, self.recipe, self.output, self.cache_dir)


def _ray_pipelined(ray, actors, items, depth: int = 2):
    """Results of ``items`` run on ``actors``, each actor kept ``depth`` items deep: the next item is
    queued on an actor while it runs the current one, so no actor waits for the driver's round trip
    between items (one at a time, as ``ray.util.ActorPool`` hands them out, measured 70-180 ms of
    idle time per item on 2 cores shared with Ray's own processes)."""
    todo = iter(items)
    owner = {}
    for actor in actors:
        for _ in range(depth):
            item = next(todo, None)
            if item is None:
                break
            owner[actor.process.remote(item)] = actor
    while owner:
        done, _ = ray.wait(list(owner), num_returns=1)
        actor = owner.pop(done[0])
        item = next(todo, None)
        if item is not None:
            owner[actor.process.remote(item)] = actor
        yield ray.get(done[0])


def _run_ray(items, recipe, output, cache_dir, workers, threads, address):
    import ray

    started = not ray.is_initialized()
    if started:
        # A cluster started here runs its workers at normal priority: Ray's default (nice 15) leaves
        # them below its own daemons and the driver, which share the same cores on one machine.
        local = {} if address else {"num_cpus": workers * threads, "_system_config": {"worker_niceness": 0}}
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 **local)
    try:
        actor = ray.remote(num_cpus=threads)(_RayWorker)
        batch = _warm_batch(items)
        actors = [actor.remote(recipe, output, cache_dir, batch) for _ in range(workers)]
        ray.get([a.__ray_ready__.remote() for a in actors])  # sessions built and warm
        yield None
        yield from _ray_pipelined(ray, actors, items)
    finally:
        if started:
            ray.shutdown()


def _run_dask(items, recipe, output, cache_dir, workers, threads, address):
    from distributed import Client, LocalCluster
    from distributed import as_completed as dask_completed

    cluster = None if address else LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                                                dashboard_address=None)
    with Client(address or cluster) as client:
        shared = client.scatter(recipe, broadcast=True)
        # each worker process builds its session now, warmed up at the items' batch size
        client.run(worker_session, recipe, cache_dir, True, _warm_batch(items))
        yield None
        futures = [client.submit(process_item, item, shared, output, cache_dir, pure=False) for item in items]
        for future in dask_completed(futures):
            yield future.result()
    if cluster is not None:
        cluster.close()


def main_summary(summary: dict) -> str:
    """The one-line summary ``kernelkit batch`` prints."""
    return (f"{summary['rows']} samples in {summary['items']} items, {summary['seconds']:.2f} s "
            f"({summary['rows_per_s']:.1f}/s) on {summary['engine']}: {summary['workers']} workers x "
            f"{summary['threads']} threads, {summary['sessions']} sessions")


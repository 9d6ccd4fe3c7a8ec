"""Scale-out (kernelkit.integrations): Ray Data on a local Ray cluster, Dask on a LocalCluster of
processes, the `kernelkit batch` driver on every engine, and kernel caches shared by workers.

Every result is compared with one session of the same model in this process; sessions are counted
per worker (one build each)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close

ray = pytest.importorskip("ray")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

ROWS = 24


def _model(channels=3):
    rng = np.random.default_rng(0)
    g = kk.GraphBuilder("small_cnn")
    x = g.input("x", ("N", channels, 8, 8), "float32")
    w = g.constant(rng.standard_normal((4, channels, 3, 3)).astype(np.float32))
    y = g.op("Relu", g.op("Conv", x, w, pads=(1, 1, 1, 1)))
    g.output(g.op("Flatten", g.op("GlobalAveragePool", y), name="y"))
    return g.build()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("scaleout") / "m.kkm"
    kk.save(_model(), path)
    return path


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(1).standard_normal((ROWS, 3, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def expected(model_path, images):
    return kk.Session(model_path, vendors=["reference"]).run(None, {"x": images})[0]


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_data_map_batches_one_session_per_actor(ray_cluster, model_path, images, expected):
    from kernelkit.integrations.ray import predict

    ds = ray.data.from_numpy(images).rename_columns({"data": "x"})
    out = predict(ds, model_path, batch_size=4, concurrency=2, num_cpus=1, annotate=True,
                  vendors=["reference"]).take_all()
    got = np.stack([row["y"] for row in out])
    order = np.argsort([row["y"][0] for row in out])  # Ray may reorder rows: compare as sets of rows
    assert_close(got[order], expected[np.argsort(expected[:, 0])])
    workers = {row["kernelkit_worker"] for row in out}
    sessions = {w.rsplit(":", 1)[0] for w in workers}
    assert len(sessions) <= 2 and all(w.endswith(":1") for w in workers), workers  # one build per actor
    assert len(out) == ROWS


def test_dask_array_map_blocks_on_a_local_process_cluster(model_path, images, expected):
    import dask.array as da
    from distributed import Client, LocalCluster
    from kernelkit.integrations.dask import map_blocks

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        arr = da.from_array(images, chunks=(4, 3, 8, 8))
        result = map_blocks(arr, model_path, vendors=["reference"])
        assert result.shape == expected.shape and result.chunks[0] == (4,) * 6
        assert_close(result.compute(), expected)
        # each worker process built exactly one session, whatever number of blocks it ran
        builds = client.run(lambda: __import__("kernelkit").portable.build_count())
        assert sorted(builds.values()) in ([1, 1], [0, 1]), builds
        threads = client.run(lambda: [s.threads for s in __import__("kernelkit.integrations",
                                                                     fromlist=["_sessions"])._sessions.values()])
        assert all(t == [1] for t in threads.values() if t), threads  # the worker's nthreads, not the host's


def test_dask_dataframe_map_partitions(images):
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster
    from kernelkit.integrations.dask import map_partitions

    rng = np.random.default_rng(2)
    g = kk.GraphBuilder("mlp")
    x = g.input("x", ("N", 5), "float32")
    w = g.constant(rng.standard_normal((5, 2)).astype(np.float32))
    g.output(g.op("Sigmoid", g.op("MatMul", x, w), name="p"))
    model = g.build()
    frame = pd.DataFrame(rng.standard_normal((40, 5)).astype(np.float32), columns=list("abcde"))
    want = kk.Session(model, vendors=["reference"]).run(None, {"x": frame.to_numpy()})[0]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster):
        got = map_partitions(dd.from_pandas(frame, npartitions=4), model, list("abcde")).compute()
    assert list(got.columns) == ["p_0", "p_1"]
    assert_close(got.to_numpy(), want)


@pytest.mark.parametrize("engine,workers", [("local", 1), ("local", 2), ("dask", 2), ("ray", 2)])
def test_kernelkit_batch_over_a_folder_of_npy_files(tmp_path, model_path, images, expected, engine, workers):
    if engine == "ray" and ray.is_initialized():
        ray.shutdown()  # the driver starts (and stops) its own local cluster
    src = tmp_path / "in"
    src.mkdir()
    for i in range(0, ROWS, 6):
        np.save(src / f"part{i:02d}.npy", images[i:i + 6])
    np.save(src / "single.npy", images[0])  # one sample without a batch axis
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "kernelkit.cli", "batch", str(model_path), "--input", str(src),
                           "--output", str(out), "--engine", engine, "--workers", str(workers), "--threads", "1",
                           "--vendors", "reference"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{ROWS + 1} samples in 5 items" in proc.stdout and f"{workers} workers x 1 threads" in proc.stdout
    for i in range(0, ROWS, 6):
        assert_close(np.load(out / f"part{i:02d}.npz")["y"], expected[i:i + 6])
    assert_close(np.load(out / "single.npz")["y"], expected[0])


def test_kernelkit_batch_over_a_parquet_file(tmp_path, model_path, images, expected):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from kernelkit.integrations.batch import run_batch

    pq.write_table(pa.table({"x": [img.tolist() for img in images]}), tmp_path / "in.parquet")
    summary = run_batch(model_path, tmp_path / "in.parquet", tmp_path / "out", batch_size=10, quiet=True,
                        vendors=["reference"])
    assert summary["items"] == 3 and summary["rows"] == ROWS
    parts = [pq.read_table(p) for p in sorted((tmp_path / "out").glob("part-*.parquet"))]
    got = np.concatenate([np.asarray(t.column("y").to_pylist(), np.float32) for t in parts])
    assert_close(got, expected)


def test_batch_refuses_bad_arguments_with_typed_errors(tmp_path, model_path):
    from kernelkit.integrations.batch import run_batch

    with pytest.raises(kk.InputError, match="no .npy or .npz"):
        run_batch(model_path, tmp_path, tmp_path / "o")
    with pytest.raises(kk.ConfigError, match="engine"):
        run_batch(model_path, tmp_path, tmp_path / "o", engine="spark")
    with pytest.raises(kk.ConfigError, match="workers"):
        run_batch(model_path, tmp_path, tmp_path / "o", workers=0)


CACHE_PROBE = r"""
import json, sys, time
from kernelkit.integrations import use_cache_dir, worker_session
from kernelkit.portable import SessionRecipe
use_cache_dir(sys.argv[1])
t0 = time.perf_counter()
device = "gpu" if sys.argv[3] == "opencl" else "cpu"
sess = worker_session(SessionRecipe.of(sys.argv[2], device=device, vendors=[sys.argv[3]],
                                       threads=1, options={"opencl_device": "pocl"}))
placement = sorted(set(map(tuple, sess.placement().values())))
print(json.dumps({"seconds": time.perf_counter() - t0, "placement": placement}))
"""


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("vendor", ["numba", "opencl"])
def test_a_second_worker_reuses_the_shared_kernel_cache(tmp_path, model_path, vendor):
    """Worker 1 compiles into the shared cache folder; worker 2 (a new process) compiles nothing:
    it writes no cache file and rewrites none."""
    pytest.importorskip(f"kernelkit_{vendor}")
    cache = tmp_path / "cache"
    env = dict(os.environ, KERNELKIT_OPENCL_DEVICE="pocl")
    env.pop("NUMBA_CACHE_DIR", None)

    def worker():
        proc = subprocess.run([sys.executable, "-c", CACHE_PROBE, str(cache), str(model_path), vendor],
                              capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = worker()
    assert [kind for kind in first["placement"] if kind[1] == vendor], first  # the Conv at least
    written = _files(cache)
    sub = "numba" if vendor == "numba" else "opencl"
    assert any(name.startswith(sub) for name in written), sorted(written)[:10]
    second = worker()
    assert _files(cache) == written  # nothing compiled, nothing rewritten
    assert second["placement"] == first["placement"]


def test_workers_warm_up_at_the_batch_size_of_the_work(tmp_path, model_path):
    """A worker's warm-up runs at the rows of the first work item (a new batch size's first run
    costs a worker with few items 1-2 s of its work otherwise, docs/scale-out.md): a .npy batch's
    leading dim, a Parquet slice's rows, 1 for a single sample or what cannot be read cheaply; a
    session warmed up at such a batch answers as a fresh one."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from kernelkit.integrations import worker_session
    from kernelkit.integrations.batch import _warm_batch, plan_items
    from kernelkit.portable import SessionRecipe

    rng = np.random.default_rng(5)
    folder = tmp_path / "npy"
    folder.mkdir()
    np.save(folder / "a.npy", rng.standard_normal((6, 3, 8, 8)).astype(np.float32))
    assert _warm_batch(plan_items(folder, 4)) == 6
    single = tmp_path / "single"
    single.mkdir()
    np.save(single / "a.npy", rng.standard_normal(7).astype(np.float32))
    assert _warm_batch(plan_items(single, 4)) == 1
    table = pa.table({"x": [rng.standard_normal(3 * 8 * 8).astype(np.float32) for _ in range(10)]})
    pq.write_table(table, tmp_path / "t.parquet")
    assert _warm_batch(plan_items(tmp_path / "t.parquet", 4)) == 4
    assert _warm_batch([]) == 1

    sess = worker_session(SessionRecipe.of(model_path, vendors=["reference"], threads=1), batch=6)
    x = rng.standard_normal((6, 3, 8, 8)).astype(np.float32)
    (got,) = sess.run(None, {"x": x})
    (want,) = kk.Session(kk.load(model_path), vendors=["reference"]).run(None, {"x": x})
    assert_close(got, want)


class _Echo:
    def process(self, item):
        import time
        time.sleep(0.01 * (item % 3))
        return (item, id(self))


def test_ray_driver_keeps_every_actor_two_items_deep_and_returns_each_item_once(ray_cluster):
    from kernelkit.integrations.batch import _ray_pipelined

    actors = [ray.remote(num_cpus=1)(_Echo).remote() for _ in range(2)]
    got = list(_ray_pipelined(ray, actors, list(range(11))))
    assert sorted(item for item, _ in got) == list(range(11))
    assert len({actor for _, actor in got}) == 2
    assert list(_ray_pipelined(ray, actors, [])) == []


def test_batch_clock_stops_at_the_last_result_not_at_the_engines_shutdown(tmp_path, model_path, images,
                                                                          monkeypatch):
    import time

    from kernelkit.integrations import batch

    def slow_to_stop(items, recipe, output, cache_dir, workers, threads, address):
        yield None  # the engine is up
        try:
            for item in items:
                yield {"item": item.label, "rows": 6, "seconds": 0.0, "output": "x", "worker": "w", "builds": 1}
        finally:
            time.sleep(0.6)  # a cluster's shutdown: not part of the throughput

    monkeypatch.setattr(batch, "_run_local", slow_to_stop)
    src = tmp_path / "in"
    src.mkdir()
    for i in range(0, ROWS, 6):
        np.save(src / f"part{i:02d}.npy", images[i:i + 6])
    summary = batch.run_batch(model_path, src, tmp_path / "out", quiet=True)
    assert summary["items"] == 4 and summary["rows"] == ROWS
    assert summary["seconds"] < 0.3 and summary["rows_per_s"] > ROWS / 0.3

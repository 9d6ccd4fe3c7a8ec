"""Scale-out throughput: ResNet-18 over N images with 1 and 2 workers x 1 thread, on the local
process pool, a local Ray cluster and a Dask LocalCluster (`kernelkit batch`'s engines).

    python benchmarks/scaleout.py [IMAGES=256] [BATCH=16] [VENDOR=numba] [ENGINES=local,ray,dask]

Each configuration runs twice on the same input folder; the table reports the second (warm kernel
cache) run: throughput, the ratio 2 workers / 1 worker, and the overhead per batch (wall time per
item minus the time a worker spent reading, running and writing it). Throughput counts from the
first item handed out to the last result; "wall" adds the cluster's start and stop.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
from kernelkit.integrations import use_cache_dir, worker_session
from kernelkit.portable import SessionRecipe
use_cache_dir(sys.argv[1])
worker_session(SessionRecipe.of(sys.argv[2], vendors=[sys.argv[3]], threads=1))
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def cache_reuse(model: Path, cache: Path, vendor: str) -> tuple[float, float]:
    """Seconds to a first result (import, build, warm-up run) for a first worker process on an empty
    shared cache folder, then for a second worker process on the folder the first one filled."""
    import json
    import subprocess

    def worker() -> float:
        out = subprocess.run([sys.executable, "-c", PROBE, str(cache), str(model), vendor], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])["seconds"]

    return worker(), worker()


def main() -> None:
    from kernelkit.integrations.batch import run_batch
    from kernelkit_converters.onnx import convert
    from models import zoo

    images = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    vendor = sys.argv[3] if len(sys.argv) > 3 else "numba"
    engines = sys.argv[4].split(",") if len(sys.argv) > 4 else ["local", "ray", "dask"]
    tmp = Path(tempfile.mkdtemp(prefix="kk-scaleout-"))
    import kernelkit as kk

    kk.save(convert(zoo.resnet(18)), tmp / "resnet18.kkm")
    src = tmp / "in"
    src.mkdir()
    rng = np.random.default_rng(0)
    for i in range(0, images, batch):
        np.save(src / f"b{i:05d}.npy", rng.standard_normal((min(batch, images - i), 3, 224, 224)).astype(np.float32))
    first, second = cache_reuse(tmp / "resnet18.kkm", tmp / "fresh-cache", vendor)
    rows = []
    for engine in engines:
        for workers in (1, 2):
            figures = []
            for attempt in range(2):
                t0 = time.perf_counter()
                s = run_batch(tmp / "resnet18.kkm", src, tmp / f"out-{engine}-{workers}-{attempt}", engine=engine,
                              workers=workers, threads=1, quiet=True, vendors=[vendor], cache_dir=tmp / "cache")
                wall = time.perf_counter() - t0
                figures.append((s, wall))
            s, wall = figures[1]
            overhead = (s["seconds"] * workers - s["busy_seconds"]) / s["items"] * 1e3
            rows.append((engine, workers, s["rows_per_s"], overhead, wall, s["items"], s["sessions"]))
            print(f"{engine} x{workers}: {s['rows_per_s']:.1f} img/s ({s['seconds']:.1f} s work, {wall:.1f} s wall)",
                  flush=True)
    base = {row[0]: row[2] for row in rows if row[1] == 1}
    print(f"\nResNet-18, {images} images in batches of {batch}, vendor {vendor}, 1 thread per worker")
    print("| engine | workers | img/s | 2w/1w | overhead ms/batch | wall s (with start) | items | sessions |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for engine, workers, rate, overhead, wall, items, sessions in rows:
        ratio = f"{rate / base[engine]:.2f}" if workers == 2 else ""
        print(f"| {engine} | {workers} | {rate:.1f} | {ratio} | {overhead:.1f} | {wall:.1f} | {items} | {sessions} |")
    print(f"\nshared cache, time to a first result: first worker (empty cache) {first:.1f} s, "
          f"second worker (filled by the first) {second:.1f} s")


if __name__ == "__main__":
    main()

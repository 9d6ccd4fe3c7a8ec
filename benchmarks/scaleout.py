"""Scale-out throughput: ResNet-18 over N images with 1 and 2 workers x 1 thread, on the local
process pool, a local Ray cluster and a Dask LocalCluster (`kernelkit batch`'s engines).

    python benchmarks/scaleout.py [IMAGES=256] [BATCH=16] [VENDOR=numba]

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


def main() -> None:
    from kernelkit.integrations.batch import run_batch
    from kernelkit_converters.onnx import convert
    from models import zoo

    images = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    vendor = sys.argv[3] if len(sys.argv) > 3 else "numba"
    tmp = Path(tempfile.mkdtemp(prefix="kk-scaleout-"))
    import kernelkit as kk

    kk.save(convert(zoo.resnet(18)), tmp / "resnet18.kkm")
    src = tmp / "in"
    src.mkdir()
    rng = np.random.default_rng(0)
    for i in range(0, images, batch):
        np.save(src / f"b{i:05d}.npy", rng.standard_normal((min(batch, images - i), 3, 224, 224)).astype(np.float32))
    rows = []
    for engine in ("local", "ray", "dask"):
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


if __name__ == "__main__":
    main()

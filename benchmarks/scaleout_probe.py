"""Where a second worker process costs a first one time: ResNet-18 in P processes at once, each
a 1-thread session running the same batch, per-op-type time alone (P=1) and side by side (P=2).

    python benchmarks/scaleout_probe.py [BATCH=8] [RUNS=6] [VENDOR=numba] [MODEL=resnet18]

Each process builds its session, warms it up (numba kernels compiled eagerly), waits at a barrier
for the others, then times RUNS runs with ``profile=True``; the table sums the nodes' host time per
op type (median run) and gives the ratio side-by-side / alone: the ops whose time grows are the
ones that share something (L3, memory bandwidth) with the other process. Last line: the
throughput ratio P=2 / P=1 of the pure runs (no file I/O, no scheduling).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _worker(model_path: str, batch: int, runs: int, vendor: str, barrier, queue, cpu: int | None) -> None:
    os.environ["KERNELKIT_NUMBA_START"] = "eager"
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    import kernelkit as kk

    sess = kk.Session(kk.load(model_path), vendors=[vendor], threads=1, profile=True)
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    name = sess.graph.inputs[0]
    for _ in range(2):
        sess.run(None, {name: x})
    kk.backends.settle()
    sess.run(None, {name: x})
    barrier.wait()
    per_run, walls = [], []
    for _ in range(runs):
        sess.reset_profile()
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        walls.append(time.perf_counter() - t0)
        ops: dict[str, float] = defaultdict(float)
        for row in sess.profile():
            ops[row["op"]] += row["total_ms"]
        per_run.append(dict(ops))
    queue.put((walls, per_run))


def measure(model_path: str, batch: int, runs: int, vendor: str, procs: int, pin: bool):
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(procs), ctx.Queue()
    cpus = sorted(os.sched_getaffinity(0)) if pin and hasattr(os, "sched_getaffinity") else []
    ps = [ctx.Process(target=_worker, args=(model_path, batch, runs, vendor, barrier, queue,
                                            cpus[i % len(cpus)] if cpus else None)) for i in range(procs)]
    for p in ps:
        p.start()
    results = [queue.get() for _ in ps]
    for p in ps:
        p.join()
    walls = np.median([np.median(w) for w, _ in results])
    ops: dict[str, list[float]] = defaultdict(list)
    for _, per_run in results:
        for run in per_run:
            for op, ms in run.items():
                ops[op].append(ms)
    return walls, {op: float(np.median(v)) for op, v in ops.items()}


def main() -> None:
    import tempfile

    import kernelkit as kk
    from kernelkit_converters.onnx import convert
    from models import zoo

    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    vendor = sys.argv[3] if len(sys.argv) > 3 else "numba"
    model = sys.argv[4] if len(sys.argv) > 4 else "resnet18"
    path = Path(tempfile.mkdtemp(prefix="kk-probe-")) / f"{model}.kkm"
    kk.save(convert(zoo.resnet(int(model.removeprefix("resnet")))), path)
    pin = os.environ.get("KK_PROBE_PIN", "1") != "0"  # 0: leave the processes to the OS scheduler
    alone_wall, alone = measure(str(path), batch, runs, vendor, 1, pin=pin)
    pair_wall, pair = measure(str(path), batch, runs, vendor, 2, pin=pin)
    print(f"\n{model} batch {batch}, vendor {vendor}, 1 thread per process, median of {runs} runs, "
          f"{'pinned' if pin else 'not pinned'}")
    print("| op | alone ms | side by side ms | ratio |\n|---|---:|---:|---:|")
    for op in sorted(alone, key=lambda o: -alone[o]):
        print(f"| {op} | {alone[op]:.2f} | {pair.get(op, 0.0):.2f} | {pair.get(op, 0.0) / max(alone[op], 1e-9):.2f} |")
    print(f"| run (wall) | {alone_wall * 1e3:.1f} | {pair_wall * 1e3:.1f} | {pair_wall / alone_wall:.2f} |")
    print(f"throughput 2 processes / 1: {2 * alone_wall / pair_wall:.2f}")


if __name__ == "__main__":
    main()

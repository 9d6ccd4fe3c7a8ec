"""Per node of a quantized model (as benchmarks/quantized.py makes it): kernelkit numba int8 at one
thread against two-thread sessions built under other settings, run in turns in one process, with
the shard pool's jobs attributed to the nodes (docs/quantization.md, "MobileNetV2 int8 at two
threads (issue 16, session 8)").

    OPENBLAS_NUM_THREADS=1 taskset -c 0,1 python benchmarks/trace_quantized.py mobilenet_v2 [--runs 30]
        [--variants 1t,2t,2t-hb0,2t-cw0,2t-cw0-hb0] [--gap-ms 3] [--top 30] [--json FILE]

Variants (each its own session; a setting is held while the session is built and while it runs):
``1t`` and ``2t`` as shipped, ``-serial`` with ``config.SERIAL_WORK`` infinite (every node on the
calling thread: only the pool's heartbeat, and a worker it keeps spinning, remain), ``-hb0`` with
``config.HEARTBEAT`` off, ``-cw<F>`` with ``qconv.INT8_CONV_WORK`` = F (the weight of an integer
convolution's operation in ``config.SERIAL_WORK`` units; 0: every QLinearConv on the calling thread;
the default 0.5: from 2**26 operations on the pool). Each run is preceded by
``--gap-ms`` of sleep (a worker kept spinning by the previous run has stopped by then), so no run
meets another session's worker. Printed: per node the median ms of each variant, sorted by the
difference 2t - 1t, the pool jobs a 2t run publishes in the node and how many a worker helped with;
then one JSON line per variant (median and best wall time of a run, node sum, jobs and helped jobs
per run, the pool's back-offs).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernelkit  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_numba import config, shards  # noqa: E402
from kernelkit_numba.kernels import qconv  # noqa: E402
from trace_nodes import attribute  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_quantized", Path(__file__).parent / "quantized.py")
qbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qbench)


def _settings(variant: str) -> tuple[int, list]:
    """(threads, [(module, attribute, value)] to hold) of a variant name."""
    threads = int(variant.split("t", 1)[0])
    held = []
    for part in variant.split("-")[1:]:
        if part == "serial":
            held.append((config, "SERIAL_WORK", float("inf")))
        elif part == "hb0":
            held.append((config, "HEARTBEAT", False))
        elif part.startswith("cw"):
            held.append((qconv, "INT8_CONV_WORK", float(part[2:])))
        else:
            raise SystemExit(f"unknown variant part {part!r} in {variant!r}")
    return threads, held


@contextlib.contextmanager
def holding(held: list):
    was = [(m, k, getattr(m, k)) for m, k, _ in held]
    for m, k, v in held:
        setattr(m, k, v)
    try:
        yield
    finally:
        for m, k, v in was:
            setattr(m, k, v)


def _shard_split(events: list, trace: list, into: dict) -> None:
    """Add each job's shard seconds on the caller and on the workers to ``into[node][0:2]``."""
    import bisect

    spans = sorted((t0, t0 + dt, name) for name, t0, dt, *_ in events)
    starts = [sp[0] for sp in spans]
    callers = {r[0]: (r[2], r[3]) for r in trace if r[1] < 0}
    for r in trace:
        if r[1] < 0 or r[0] not in callers:
            continue
        caller, pub = callers[r[0]]
        i = bisect.bisect_right(starts, pub) - 1
        node = spans[i][2] if i >= 0 and pub <= spans[i][1] else None
        into[node][0 if r[2] == caller else 1] += r[4] - r[3]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", nargs="?", default="mobilenet_v2", choices=sorted(qbench.MODES))
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=30, help="runs of each session first (the pool's spin loop "
                   "is built after 32 jobs)")
    p.add_argument("--variants", default="1t,2t,2t-hb0,2t-cw0,2t-cw0-hb0")
    p.add_argument("--gap-ms", type=float, default=3.0)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--small", action="store_true")
    p.add_argument("--json", help="write every node's figures there")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        proto, path = qbench.quantized_model(args.model, args.small, Path(tmp), not qbench._has_vnni())
        model = convert(path)
    feed = {"x": qbench._inputs(proto, 1, 0)}
    sessions = {}
    for v in variants:
        threads, held = _settings(v)
        with holding(held):
            sessions[v] = kernelkit.Session(model, threads=threads, profile=True, options={"numba_start": "eager"})
    gap = args.gap_ms * 1e-3

    def one(v, trace):
        threads, held = _settings(v)
        time.sleep(gap)
        sess = sessions[v]
        sess.reset_profile()
        shards.POOL.trace = [] if trace else None
        with holding(held):
            t0 = time.perf_counter()
            sess.run(None, feed)
            wall = time.perf_counter() - t0
        got = shards.POOL.trace
        shards.POOL.trace = None
        return wall, sess.profile_events(), got

    for _ in range(args.warmup):
        for v in variants:
            one(v, False)
    print(json.dumps({"warm": True, "worker_spin_loop": shards.POOL._can_spin, "stats": shards.POOL.stats}),
          flush=True)
    shards.POOL.reset()
    before = dict(shards.POOL.stats)
    per = {v: collections.defaultdict(list) for v in variants}
    walls = {v: [] for v in variants}
    jobs = {v: collections.defaultdict(lambda: [0, 0]) for v in variants}  # node: [jobs, helped]
    # node: [caller's shard seconds, worker's shard seconds, caller's wait, wake-ups (s)] of the jobs
    split = {v: collections.defaultdict(lambda: [0.0, 0.0, 0.0, []]) for v in variants}
    order = list(variants)
    for r in range(args.runs):
        for v in (order if r % 2 == 0 else order[::-1]):
            wall, events, trace = one(v, True)
            walls[v].append(wall * 1e3)
            for name, _, dt, *_ in events:
                per[v][name].append(dt * 1e3)
            for node, d in attribute(events, trace).items():
                jobs[v][node][0] += d["jobs"]
                jobs[v][node][1] += d["helped"]
                split[v][node][2] += d["caller_wait"]
                split[v][node][3] += d["wake"]
            _shard_split(events, trace, split[v])
    ops = {row["node"]: row["op"] for row in sessions[variants[0]].profile()}
    med = {v: {n: statistics.median(t) for n, t in per[v].items()} for v in variants}
    base, other = variants[0], (variants[1] if len(variants) > 1 else variants[0])
    nodes = sorted(med[base], key=lambda n: -(med[other].get(n, 0.0) - med[base][n]))
    head = f"{'node':<34} {'op':<16}" + "".join(f" {v[:13]:>13}" for v in variants) + \
        f" {'diff':>7} {'jobs':>5} {'help':>5}"
    print(head)
    for n in nodes[:args.top]:
        j = jobs[other].get(n, [0, 0])
        print(f"{n[:34]:<34} {ops.get(n, '?')[:16]:<16}" + "".join(f" {med[v].get(n, 0.0):13.4f}" for v in variants)
              + f" {med[other].get(n, 0.0) - med[base][n]:7.4f} {j[0] / args.runs:5.1f} {j[1] / args.runs:5.1f}")
    by_op = {v: collections.defaultdict(float) for v in variants}
    for v in variants:
        for n, t in med[v].items():
            by_op[v][ops.get(n, "?")] += t
    print("per op (sum of node medians, ms):")
    for op in sorted(by_op[base], key=lambda o: -by_op[base][o]):
        print(f"  {op:<24}" + "".join(f" {v}={by_op[v][op]:.3f}" for v in variants))
    for v in variants[1:]:
        pooled = sorted((n for n in split[v] if n is not None and jobs[v][n][0]), key=lambda n: -jobs[v][n][0])
        if pooled:
            print(f"{v}: nodes with jobs (per run: jobs, caller's shards ms, worker's shards ms, caller's wait ms, "
                  f"median wake-up us; node median 1t / {v} ms)")
        for n in pooled:
            c, w, wait, wake = split[v][n]
            wk = f"{statistics.median(wake) * 1e6:.0f}" if wake else "-"
            print(f"  {n[:34]:<34} {jobs[v][n][0] / args.runs:4.1f} {c / args.runs * 1e3:7.3f} "
                  f"{w / args.runs * 1e3:7.3f} {wait / args.runs * 1e3:7.3f} "
                  f"{wk:>6}   {med[base].get(n, 0.0):.3f} / {med[v].get(n, 0.0):.3f}")
    stats = {k: shards.POOL.stats[k] - before.get(k, 0) for k in shards.POOL.stats}
    for v in variants:
        print(json.dumps({"variant": v, "wall_median_ms": round(statistics.median(walls[v]), 3),
                          "wall_best_ms": round(min(walls[v]), 3), "node_sum_ms": round(sum(med[v].values()), 3),
                          "nodes": len(med[v]), "jobs_per_run": sum(j[0] for j in jobs[v].values()) / args.runs,
                          "helped_per_run": sum(j[1] for j in jobs[v].values()) / args.runs}))
    print(json.dumps({"pool": stats}))
    if args.json:
        Path(args.json).write_text(json.dumps({"variants": variants, "ops": ops, "median": med,
                                               "walls": walls, "jobs": {v: dict(jobs[v]) for v in variants},
                                               "pool": stats}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

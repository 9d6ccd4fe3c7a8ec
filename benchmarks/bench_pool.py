"""The shard pool's cost per job (docs/numba.md, "Shard pool (issue 11, session 4)").

A job is 8 calls of a ``nogil`` Numba kernel over slices of a float32 array (32 multiply-adds an
element: ~10 us, ~80 us, ~0.6 ms a job at one thread on the AMD box), as ``config.parallel_for``
hands out. Each pool variant runs the same jobs at 1 and 2 threads, back to back and with a gap
of Python work between jobs (a model's serial nodes between two parallel kernels), in
interleaved blocks in one process, quiet and with a busy-loop process pinned to one of the two
CPUs (``taskset -c 0 python -c 'while 1: pass'``). Variants: ``new`` (this checkout's
``shards.ShardPool``), ``nospin`` (the same with ``KERNELKIT_NUMBA_SPIN_US=0``) and, with
``--old REF``, the ``shards.py`` of a git revision (e.g. ``main``), loaded from ``git show``.
Prints one JSON line per (load, variant, job, threads) and a table of median microseconds per
job (with the gap: the gap's own time, ``gap_us``, included)::

    python benchmarks/bench_pool.py [--old main] [--cpus 0,1] [--blocks 15] [--loads quiet,loaded]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _timing import busy_core, old_shards_file

_CHILD = r"""
import importlib.util, json, os, statistics, sys, time, types
import numpy as np, numba
from threadpoolctl import threadpool_limits
threadpool_limits(1, user_api="blas")
old_file, blocks, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from kernelkit_numba import shards
variants = {"new": shards.ShardPool(), "nospin": shards.ShardPool(0.0)}
if old_file:
    spec = importlib.util.spec_from_file_location("kernelkit_numba._old_shards", old_file)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "kernelkit_numba"
    spec.loader.exec_module(mod)
    variants["old"] = mod.ShardPool()

@numba.njit(nogil=True, fastmath=True)
def madd(x, y, lo, hi):  # 32 multiply-adds an element: compute-bound, L2-resident
    for i in range(lo, hi):
        v = x[i]
        a = v
        for _ in range(32):
            a = a * v + 0.5
        y[i] = a

JOBS = {"tiny 8x256": (8, 1 << 11), "small 8x2K": (8, 1 << 14), "mid 8x16K": (8, 1 << 17)}
arrays = {k: (np.ones(n, np.float32), np.empty(n, np.float32)) for k, (s, n) in JOBS.items()}
gap = np.ones(256, np.float32)
def make(job):
    shards_n, n = JOBS[job]
    x, y = arrays[job]
    return lambda i: madd(x, y, i * n // shards_n, (i + 1) * n // shards_n), shards_n
for pool in variants.values():  # workers started, kernels compiled
    for job in JOBS:
        fn, s = make(job)
        pool.run(fn, s, 2)
times = {}
for b in range(blocks):
    for name, pool in variants.items():
        for job in JOBS:
            fn, s = make(job)
            for threads in (1, 2):
                for gapped in (False, True):
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        pool.run(fn, s, threads)
                        if gapped:  # ~30 us of Python: a model's small nodes between two kernels
                            for _ in range(20):
                                gap.sum()
                    dt = (time.perf_counter() - t0) / calls
                    times.setdefault((name, job, threads, gapped), []).append(dt)
gapcost = []
for _ in range(200):
    t0 = time.perf_counter()
    for _ in range(20):
        gap.sum()
    gapcost.append(time.perf_counter() - t0)
g = statistics.median(gapcost)
for (name, job, threads, gapped), ts in times.items():
    med = statistics.median(ts)
    stats = dict(getattr(variants[name], "stats", {}))
    print(json.dumps({"variant": name, "job": job, "threads": threads, "gap": gapped, "us": round(med * 1e6, 1),
                      "gap_us": round(g * 1e6, 1) if gapped else 0.0, "stats": stats}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", default="", help="git revision whose shards.py is the 'old' variant")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--blocks", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--loads", default="quiet,loaded")
    args = ap.parse_args()
    cpus = [int(c) for c in args.cpus.split(",")]
    old_file = old_shards_file(args.old)
    rows = []
    for load in args.loads.split(","):
        with busy_core(cpus[0], load == "loaded"):
            out = subprocess.run([sys.executable, "-c", _CHILD, old_file, str(args.blocks), str(args.calls)],
                                 preexec_fn=lambda: os.sched_setaffinity(0, set(cpus)), check=True,
                                 capture_output=True, text=True, timeout=1200).stdout
        for line in out.strip().splitlines():
            row = {"load": load, **json.loads(line)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    variants = sorted({r["variant"] for r in rows})
    print(f"\n| load | job | gap | threads | {' | '.join(variants)} |")
    print("|---|---|---|---:|" + "---:|" * len(variants))
    keys = sorted({(r["load"], r["job"], r["gap"], r["threads"]) for r in rows}, key=lambda k: (k[0] != "quiet", k[1:]))
    for k in keys:
        cells = [next((f"{r['us']:.1f}" for r in rows if (r["load"], r["job"], r["gap"], r["threads"]) == k
                       and r["variant"] == v), "") for v in variants]
        print(f"| {k[0]} | {k[1]} | {'yes' if k[2] else 'no'} | {k[3]} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()

"""The shard pool on whole models: numba at one thread against numba at the default thread count
(every CPU the process may use), the same with the workers' spin off (``default-nospin``),
and, with ``--old REF``, the default thread count on the
``shards.py`` of a git revision, all in one process with blocks of runs interleaved, quiet and
with a busy loop pinned to the first CPU (docs/numba.md, "Shard pool (issue 11, session 4)").
Prints per (load, model) the median of the block medians (ms) and the ratios to numba 1t::

    python benchmarks/bench_pool_models.py [models] [--old main] [--blocks 9] [--runs 5] [--loads quiet,loaded]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _timing import busy_core, old_shards_file

_CHILD = r"""
import importlib.util, json, os, statistics, sys, time
sys.path.insert(0, sys.argv[1])
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit
from kernelkit_numba import config, shards
from test_bench_numba import model_case
name, old_file, blocks, runs = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
pools = {"new": shards.POOL, "nospin": shards.ShardPool(0.0)}
if old_file:
    spec = importlib.util.spec_from_file_location("kernelkit_numba._old_shards", old_file)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "kernelkit_numba"
    spec.loader.exec_module(mod)
    old = mod.ShardPool()
    old.backed_off = lambda: False  # the old pool kept its back-off to itself
    pools["old"] = old
_, model, feed, _ = model_case(name)
sessions = {"1t": (kernelkit.Session(model, vendors=["numba", "reference"], threads=1), "new")}
sessions["default"] = (kernelkit.Session(model, vendors=["numba", "reference"]), "new")
sessions["default-nospin"] = (kernelkit.Session(model, vendors=["numba", "reference"]), "nospin")
if old_file:
    sessions["default-old"] = (kernelkit.Session(model, vendors=["numba", "reference"]), "old")
for sess, pool in sessions.values():
    config._POOL = pools[pool]
    for _ in range(3):
        sess.run(None, feed)
times = {k: [] for k in sessions}
for b in range(blocks):
    for k, (sess, pool) in sessions.items():
        config._POOL = pools[pool]
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(None, feed)
            ts.append(time.perf_counter() - t0)
        times[k].append(statistics.median(ts))
config._POOL = shards.POOL
print(json.dumps({k: round(statistics.median(v) * 1e3, 2) for k, v in times.items()}
                 | {"pool": shards.POOL.stats}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="?", default="resnet18,resnet50,mobilenetv2,transformer,mlp")
    ap.add_argument("--old", default="")
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--blocks", type=int, default=9)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loads", default="quiet,loaded")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    cpus = [int(c) for c in args.cpus.split(",")]
    old_file = old_shards_file(args.old)
    rows = []
    for load in args.loads.split(","):
        for model in args.models.split(","):
            with busy_core(cpus[0], load == "loaded"):
                out = subprocess.run([sys.executable, "-c", _CHILD, here, model, old_file, str(args.blocks),
                                      str(args.runs)], preexec_fn=lambda: os.sched_setaffinity(0, set(cpus)),
                                     check=True, capture_output=True, text=True, timeout=1800).stdout
            row = {"load": load, "model": model, **json.loads(out.strip().splitlines()[-1])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    cols = [c for c in ("1t", "default", "default-nospin", "default-old") if c in rows[0]]
    print(f"\n| load | model | {' | '.join(c + ' ms' for c in cols)} | "
          + " | ".join(f"{c} / 1t" for c in cols[1:]) + " |")
    print("|---|---|" + "---:|" * (2 * len(cols) - 1))
    for r in rows:
        cells = [f"{r[c]:.2f}" for c in cols] + [f"{r[c] / r['1t']:.2f}" for c in cols[1:]]
        print(f"| {r['load']} | {r['model']} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()

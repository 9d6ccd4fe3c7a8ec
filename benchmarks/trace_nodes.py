"""Which nodes of a model gain from the second thread, and why not (docs/numba.md, "Two threads,
again (issue 11, session 7)").

Two profiled sessions of a benchmark model (``test_bench_numba.BUILDERS``), one at 1 thread and
one at ``--threads`` (2), run alternately after warm-up; the shard pool's trace of the 2-thread
runs is attributed to the nodes by time. Per node (best time over the runs, ms): 1t, 2t, their
ratio, the pool jobs the node published, the jobs the worker helped, the shards each thread ran,
the worker's wake-up delay (publication to its first shard) and the serial calls (below the
minimum work, or backed off). The summary splits a 2-thread run into nodes with jobs, nodes
without, and the time between nodes (Python in the executor)::

    python benchmarks/trace_nodes.py [model] [--threads 2] [--runs 10] [--cpus 0,1] [--top 25]
        [--no-backoff] [--json]

``--no-backoff`` counts the pool's contention signs but never backs off (on a loaded box, where the
back-off would hide the structure). The two sessions share the caches (docs/numba.md, session 5):
read the 1t/2t ratio per node, not the absolute figures.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def attribute(events: list, trace: list) -> dict:
    """Per node name: jobs, helped jobs, caller/worker shards, wake-up delays (s), serial calls of the
    pool's ``trace`` whose publication time falls inside the node's events ``(node, t0, dt, ...)``."""
    spans = sorted((t0, t0 + dt, name) for name, t0, dt, *_ in events)
    starts = [s[0] for s in spans]
    import bisect

    def node_at(t):
        i = bisect.bisect_right(starts, t) - 1
        return spans[i][2] if i >= 0 and t <= spans[i][1] else None

    jobs = {r[0]: r for r in trace if r[1] < 0}
    shards = collections.defaultdict(list)
    for r in trace:
        if r[1] >= 0:
            shards[r[0]].append(r)
    out = collections.defaultdict(lambda: {"jobs": 0, "helped": 0, "caller_shards": 0, "worker_shards": 0,
                                           "wake": [], "serial": 0, "caller_wait": 0.0})
    for jid, rows in shards.items():
        if jid in jobs:
            _, _, caller, pub, done, caller_done = jobs[jid]
            node = node_at(pub)
            d = out[node]
            d["jobs"] += 1
            d["caller_wait"] += done - caller_done
            mine = [r for r in rows if r[2] == caller]
            theirs = [r for r in rows if r[2] != caller]
            d["caller_shards"] += len(mine)
            d["worker_shards"] += len(theirs)
            if theirs:
                d["helped"] += 1
                d["wake"].append(min(r[3] for r in theirs) - pub)
        else:
            node = node_at(min(r[3] for r in rows))
            out[node]["serial"] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="mobilenetv2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--no-backoff", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    import kernelkit
    from kernelkit_numba import shards
    from test_bench_numba import model_case

    if args.no_backoff:
        shards.POOL.backoff = False
    _, model, feed, _ = model_case(args.model)
    s1 = kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True)
    s2 = kernelkit.Session(model, vendors=["numba", "reference"], threads=args.threads, profile=True)
    for _ in range(3):
        s1.run(None, feed)
        s2.run(None, feed)
    s1.reset_profile()
    s2.reset_profile()
    before = dict(shards.POOL.stats)
    best1, best2 = collections.defaultdict(lambda: float("inf")), collections.defaultdict(lambda: float("inf"))
    walls = {1: [], 2: []}
    trace_all: list = []
    for _ in range(args.runs):
        for n, sess, best in ((1, s1, best1), (2, s2, best2)):
            sess.reset_profile()
            if n == 2:
                shards.POOL.trace = []
            t0 = time.perf_counter()
            sess.run(None, feed)
            walls[n].append(time.perf_counter() - t0)
            events = sess.profile_events()
            for name, _, dt, *_ in events:
                best[name] = min(best[name], dt)
            if n == 2:
                trace_all.append((events, shards.POOL.trace))
                shards.POOL.trace = None
    ops = {row["node"]: row["op"] for row in s2.profile()}
    per = collections.defaultdict(lambda: {"jobs": 0, "helped": 0, "caller_shards": 0, "worker_shards": 0,
                                           "wake": [], "serial": 0, "caller_wait": 0.0})
    for events, trace in trace_all:
        for node, d in attribute(events, trace).items():
            p = per[node]
            for k in ("jobs", "helped", "caller_shards", "worker_shards", "serial", "caller_wait"):
                p[k] += d[k]
            p["wake"] += d["wake"]
    runs = args.runs
    rows = []
    for node in best2:
        p = per.get(node, {"jobs": 0, "helped": 0, "caller_shards": 0, "worker_shards": 0, "wake": [],
                           "serial": 0, "caller_wait": 0.0})
        rows.append({"node": node, "op": ops.get(node, "?"), "t1_ms": best1[node] * 1e3, "t2_ms": best2[node] * 1e3,
                     "jobs": p["jobs"] / runs, "helped": p["helped"] / runs,
                     "shards_caller": p["caller_shards"] / runs, "shards_worker": p["worker_shards"] / runs,
                     "wake_us": statistics.median(p["wake"]) * 1e6 if p["wake"] else None,
                     "serial": p["serial"] / runs, "caller_wait_us": p["caller_wait"] / runs * 1e6})
    sum1 = sum(r["t1_ms"] for r in rows)
    sum2 = sum(r["t2_ms"] for r in rows)
    par = [r for r in rows if r["jobs"] > 0]
    summary = {
        "model": args.model, "wall_1t_ms": round(min(walls[1]) * 1e3, 2), "wall_2t_ms": round(min(walls[2]) * 1e3, 2),
        "wall_1t_median_ms": round(statistics.median(walls[1]) * 1e3, 2),
        "wall_2t_median_ms": round(statistics.median(walls[2]) * 1e3, 2),
        "nodes": len(rows), "node_sum_1t_ms": round(sum1, 2), "node_sum_2t_ms": round(sum2, 2),
        "nodes_with_jobs": len(par), "with_jobs_1t_ms": round(sum(r["t1_ms"] for r in par), 2),
        "with_jobs_2t_ms": round(sum(r["t2_ms"] for r in par), 2),
        "without_jobs_2t_ms": round(sum(r["t2_ms"] for r in rows if r["jobs"] == 0), 2),
        "between_nodes_2t_ms": round(min(walls[2]) * 1e3 - sum2, 2),
        "jobs_per_run": round(sum(r["jobs"] for r in rows), 1),
        "helped_per_run": round(sum(r["helped"] for r in rows), 1),
        "pool": {k: v - before.get(k, 0) for k, v in shards.POOL.stats.items()},
    }
    if args.json:
        print(json.dumps({"summary": summary, "nodes": rows}))
        return
    rows.sort(key=lambda r: -r["t1_ms"])
    print(f"{'node':<28} {'op':<14} {'1t ms':>7} {'2t ms':>7} {'1t/2t':>6} {'jobs':>5} {'help':>5} "
          f"{'sh C':>5} {'sh W':>5} {'wake us':>8} {'serial':>6}")
    for r in rows[:args.top]:
        wake = f"{r['wake_us']:.0f}" if r["wake_us"] is not None else "-"
        print(f"{r['node'][:28]:<28} {r['op'][:14]:<14} {r['t1_ms']:7.3f} {r['t2_ms']:7.3f} "
              f"{r['t1_ms'] / max(r['t2_ms'], 1e-9):6.2f} {r['jobs']:5.1f} {r['helped']:5.1f} "
              f"{r['shards_caller']:5.1f} {r['shards_worker']:5.1f} {wake:>8} {r['serial']:6.1f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

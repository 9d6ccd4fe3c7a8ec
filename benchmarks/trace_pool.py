"""Who ran which shard of a model's parallel kernels, and how long anyone waited (docs/numba.md,
"Shard pool (issue 11, session 4)").

Runs a benchmark model (``test_bench_numba.BUILDERS``) on the numba kernels at the given thread
count with ``shards.POOL.trace`` on, after warm-up runs, and prints per thread the shards and the
time it ran them, per job the helpers' wake-up delay (publication to a worker's first shard), the
caller's wait at the end (its last shard done to the job done), stalls and back-offs; ``--loaded``
runs a busy loop pinned to the first CPU meanwhile::

    python benchmarks/trace_pool.py [model] [--threads 2] [--runs 5] [--cpus 0,1] [--loaded] [--jobs 8]

(``--jobs N`` also prints the first N jobs shard by shard.)
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def summarize(trace: list, show_jobs: int = 0) -> dict:
    jobs = {r[0]: r for r in trace if r[1] < 0}
    shards = collections.defaultdict(list)
    for r in trace:
        if r[1] >= 0:
            shards[r[0]].append(r)
    per_thread = collections.defaultdict(lambda: [0, 0.0])
    for rows in shards.values():
        for _, _, name, t0, t1 in rows:
            per_thread[name][0] += 1
            per_thread[name][1] += t1 - t0
    wake, waits, helped = [], [], 0
    for jid, (_, _, caller, pub, done, caller_done) in jobs.items():
        waits.append(done - caller_done)
        helper_starts = [r[3] for r in shards[jid] if r[2] != caller]
        if helper_starts:
            helped += 1
            wake.append(min(helper_starts) - pub)
    out = {
        "jobs": len(jobs), "serial_calls": len({k for k in shards if k not in jobs}), "jobs_helped": helped,
        "threads": {k: {"shards": n, "busy_ms": round(t * 1e3, 2)} for k, (n, t) in sorted(per_thread.items())},
        "wake_us_median": round(statistics.median(wake) * 1e6, 1) if wake else None,
        "wake_us_max": round(max(wake) * 1e6, 1) if wake else None,
        "caller_wait_us_median": round(statistics.median(waits) * 1e6, 1) if waits else None,
        "caller_wait_ms_total": round(sum(waits) * 1e3, 3),
        "caller_wait_us_max": round(max(waits) * 1e6, 1) if waits else None,
    }
    for jid in sorted(jobs)[:show_jobs]:
        _, _, caller, pub, done, _ = jobs[jid]
        line = ", ".join(f"{r[1]}:{'C' if r[2] == caller else r[2][-1]}@{(r[3] - pub) * 1e6:.0f}"
                         f"+{(r[4] - r[3]) * 1e6:.0f}" for r in sorted(shards[jid], key=lambda r: r[3]))
        print(f"job {jid}: {(done - pub) * 1e6:.0f} us  [shard:thread@start+us] {line}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="resnet18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--loaded", action="store_true")
    ap.add_argument("--jobs", type=int, default=0)
    args = ap.parse_args()
    cpus = [int(c) for c in args.cpus.split(",")]
    os.sched_setaffinity(0, set(cpus))
    busy = None
    if args.loaded:
        busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"],
                                preexec_fn=lambda: os.sched_setaffinity(0, {cpus[0]}))
    try:
        os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
        import kernelkit
        from kernelkit_numba import shards
        from test_bench_numba import model_case

        _, model, feed, _ = model_case(args.model)
        sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=args.threads)
        for _ in range(3):
            sess.run(None, feed)
        shards.POOL.trace = []
        before = dict(shards.POOL.stats)
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            sess.run(None, feed)
            times.append(time.perf_counter() - t0)
        trace, shards.POOL.trace = shards.POOL.trace, None
        result = summarize(trace, args.jobs)
        result.update(model=args.model, load="loaded" if args.loaded else "quiet", threads_budget=args.threads,
                      run_ms_median=round(statistics.median(times) * 1e3, 2),
                      pool={k: v - before.get(k, 0) for k, v in shards.POOL.stats.items()})
        print(json.dumps(result))
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


if __name__ == "__main__":
    main()

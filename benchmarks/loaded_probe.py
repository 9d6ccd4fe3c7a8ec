"""Where the calling thread runs under load: numba's 1-thread session against the default, each in its
own process, with a busy loop pinned to the first CPU of this process's affinity, processes taking
turns. Per run the child records the wall time, the calling thread's CPU time, the CPU it was on at
the run's end (``/proc/thread-self/stat``), its involuntary context switches, and the pool's
counters; per process it prints the medians and the share of runs that ended on the busy CPU.

    taskset -c 0,1 python benchmarks/loaded_probe.py resnet18,transformer [--runs 60] [--repeats 3]
        [--variant LABEL=runtime[:pin][:held][:nobeat]]

``pin``: the calling thread pinned to the CPUs other than the busy one (is the caller's place the
cost?); ``held``: the pool backed off for the whole process after the warm-up runs (the default's
serial path without the pool's comings and goings); ``nobeat``: ``config.HEARTBEAT`` off. Linux
only (``/proc``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[5])
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
name, runtime, runs, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
from test_bench_numba import kernelkit_session, model_case
from kernelkit_numba import shards

busy = int(os.environ["KK_PROBE_BUSY"])


def where():
    with open("/proc/thread-self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[36])  # field 39 of stat(5): the CPU last run on


def switches():
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("nonvoluntary_ctxt_switches"):
                return int(line.split()[1])
    return 0


_, model, feed, _ = model_case(name)
if "nobeat" in flags:
    from kernelkit_numba import config
    config.HEARTBEAT = False
if runtime == "numba":  # the default thread count
    import kernelkit
    sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
else:
    sess = kernelkit_session(model, runtime)
for _ in range(3):
    sess.run(None, feed)
pool = shards.POOL
if "held" in flags:
    pool.MIN_BACKOFF_S = pool.MAX_BACKOFF_S = 1e6
    pool._back_off("held for the probe")
if "pin" in flags:
    os.sched_setaffinity(0, os.sched_getaffinity(0) - {busy})  # pid 0: this thread only
from _timing import steal_seconds
rows = []
before = dict(pool.stats)
steal0, wall0 = steal_seconds(), time.perf_counter()
for _ in range(runs):
    s0, c0, t0 = switches(), time.thread_time(), time.perf_counter()
    sess.run(None, feed)
    t1, c1 = time.perf_counter(), time.thread_time()
    rows.append((t1 - t0, (c1 - c0) / (t1 - t0), where() == busy, switches() - s0))
steal1 = steal_seconds()
steal = None if steal0 is None or steal1 is None else (steal1 - steal0) / (time.perf_counter() - wall0)
wall = sorted(r[0] for r in rows)
out = {"model": name, "runtime": runtime, "flags": flags, "median_ms": wall[len(wall) // 2] * 1e3,
       "best_ms": wall[0] * 1e3, "steal_share": steal, "runs_ms": [round(r[0] * 1e3, 2) for r in rows],
       "caller_share": sorted(r[1] for r in rows)[len(rows) // 2],
       "on_busy_cpu": sum(r[2] for r in rows) / len(rows),
       "preemptions_a_run": sum(r[3] for r in rows) / len(rows),
       "pool": {k: v - before.get(k, 0) for k, v in pool.stats.items() if v - before.get(k, 0)}}
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL=runtime[:pin][:held][:nobeat] (runtime: numba1, numba2 or numba)")
    args = ap.parse_args()
    configs = [("1t", "numba1", ""), ("default", "numba", "")]
    for v in args.variant:
        label, spec = v.split("=", 1)
        runtime, *flags = spec.split(":")
        configs.append((label, runtime, ",".join(flags)))
    cpu = min(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    env = dict(os.environ, KK_PROBE_BUSY=str(cpu))
    got: dict = {}
    try:
        time.sleep(0.5)
        for rep in range(args.repeats):
            for name in args.models.split(","):
                for label, runtime, flags in configs if rep % 2 == 0 else configs[::-1]:
                    res = subprocess.run([sys.executable, "-c", _CHILD, name, runtime, str(args.runs), flags, HERE],
                                         stdout=subprocess.PIPE, text=True, timeout=600, env=env)
                    if res.returncode:
                        print(json.dumps({"model": name, "config": label, "error": res.returncode}), flush=True)
                        continue
                    row = json.loads(res.stdout.strip().splitlines()[-1])
                    row.update(config=label, repeat=rep)
                    print(json.dumps(row), flush=True)
                    got.setdefault((name, label), []).append(row)
    finally:
        busy.kill()
        busy.wait()
    print(f"{'model':12} {'config':10} {'median ms':>24} {'/1t':>6} {'caller share':>13} {'on busy CPU':>12} "
          f"{'preempt/run':>12}")
    for name in args.models.split(","):
        one = np.median([r["median_ms"] for r in got.get((name, "1t"), [])] or [np.nan])
        for label, _, _ in configs:
            rows = got.get((name, label), [])
            if not rows:
                continue
            ms = [r["median_ms"] for r in rows]
            print(f"{name:12} {label:10} {' '.join(f'{m:.2f}' for m in ms):>24} {np.median(ms) / one:6.2f} "
                  f"{np.median([r['caller_share'] for r in rows]):13.2f} "
                  f"{np.median([r['on_busy_cpu'] for r in rows]):12.2f} "
                  f"{np.median([r['preemptions_a_run'] for r in rows]):12.1f}")


if __name__ == "__main__":
    main()

"""Warm start, A/B: the first call of a numba Session in a fresh process with a warm Numba cache,
for this checkout and (``--old DIR``) another source tree, processes alternated so that both
see the same machine load (docs/numba.md, "Shard pool (issue 11, session 4)", warm start).

Each process imports kernelkit, builds the model (not timed), then times the Session build (the
backends' import included: the session loads them) and the first run, then the steady state
(median of 10 runs after ``kernelkit.backends.settle()``). ``DIR`` is a tree with the same
``packages/*/src`` layout (e.g. ``git archive main packages benchmarks | tar -x -C /tmp/main``),
put first on ``PYTHONPATH``. ``PYTHONDONTWRITEBYTECODE`` is dropped for the children (an installed
package has its ``.pyc`` files: compiling kernelkit's sources cost ~0.1 s a process). Prints one
JSON line per process and a summary (medians)::

    python benchmarks/bench_warm_start.py [model] [--old DIR] [--rounds 7] [--modes tiered,eager]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_PROBE = r"""
import json, os, statistics, sys, time
sys.path.insert(0, sys.argv[2])
import kernelkit
from test_bench_numba import model_case
_, model, feed, _ = model_case(sys.argv[1])
t0 = time.perf_counter()
sess = kernelkit.Session(model, vendors=["numba", "reference"])
t1 = time.perf_counter()
sess.run(None, feed)
t2 = time.perf_counter()
kernelkit.backends.settle()
sess.run(None, feed)
steady = []
for _ in range(10):
    t = time.perf_counter(); sess.run(None, feed); steady.append(time.perf_counter() - t)
s = statistics.median(steady)
print(json.dumps({"build_s": round(t1 - t0, 3), "first_run_s": round(t2 - t1, 3), "steady_ms": round(s * 1e3, 2),
                  "above_steady_s": round(t2 - t0 - s, 3),
                  "opencl_imported": "kernelkit_opencl" in sys.modules}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="resnet18")
    ap.add_argument("--old", default="", help="a source tree to compare (its packages/*/src go first on PYTHONPATH)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--modes", default="tiered,eager")
    ap.add_argument("--cache", default="")
    ap.add_argument("--cpus", default="0,1")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    cache = args.cache or tempfile.mkdtemp(prefix="kk_warm_")
    cpus = {int(c) for c in args.cpus.split(",")}
    variants = {"new": (os.environ.get("PYTHONPATH", ""), here)}
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # imports use .pyc files
    if args.old:
        pkgs = os.path.join(args.old, "packages")
        srcs = [os.path.join(pkgs, p, "src") for p in sorted(os.listdir(pkgs))]
        variants["old"] = (os.pathsep.join(s for s in srcs if os.path.isdir(s)), os.path.join(args.old, "benchmarks"))
    rows: dict = {}
    for mode in args.modes.split(","):
        for path, bench in variants.values():  # fill the cache (each tree keys its own entries)
            env = {**base, "NUMBA_CACHE_DIR": cache, "KERNELKIT_NUMBA_START": mode, "PYTHONPATH": path}
            subprocess.run([sys.executable, "-c", _PROBE, args.model, bench], env=env, check=True,
                           capture_output=True, timeout=900)
        for r in range(args.rounds):
            for name, (path, bench) in variants.items():
                env = {**base, "NUMBA_CACHE_DIR": cache, "KERNELKIT_NUMBA_START": mode, "PYTHONPATH": path}
                out = subprocess.run([sys.executable, "-c", _PROBE, args.model, bench], env=env, check=True,
                                     capture_output=True, text=True, timeout=900,
                                     preexec_fn=lambda: os.sched_setaffinity(0, cpus)).stdout
                row = json.loads(out.strip().splitlines()[-1])
                rows.setdefault((mode, name), []).append(row)
                print(json.dumps({"mode": mode, "variant": name, "round": r, **row}), flush=True)
    print(f"\n{args.model}, warm cache, medians of {args.rounds} processes each:")
    for (mode, name), rs in rows.items():
        keys = ("build_s", "first_run_s", "steady_ms", "above_steady_s")
        med = {k: statistics.median(r[k] for r in rs) for k in keys}
        print(f"{mode:6} {name:3}: build {med['build_s']:.3f} s + first run {med['first_run_s']:.3f} s, "
              f"{med['above_steady_s']:.3f} s above steady state ({med['steady_ms']:.1f} ms)")


if __name__ == "__main__":
    main()

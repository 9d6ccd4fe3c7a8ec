"""First call of a numba Session in a fresh process: with an empty Numba cache (every kernel the model
uses is compiled) and then with that cache populated (a second process loads them), against the
steady-state latency of the same process; for each start mode (docs/numba.md, "First call"):
tiered (the default: nodes run their reference kernel until a background thread has compiled
theirs) and eager (``KERNELKIT_NUMBA_START=eager``: the first run compiles). Prints one JSON line per
process (with a breakdown: session build with the backends' import, first run, each compilation, the first
cache lookup, when numba ran every node) and a summary::

    python benchmarks/bench_first_run.py [model] [cache folder] [modes] [--old DIR] [--rounds N]

(model: a name from test_bench_numba.BUILDERS, default resnet18; the cache folder, default a new
temporary one, is emptied before each mode's cold process; modes: default ``tiered,eager``.
``--old DIR``: a tree with the same ``packages/*/src`` layout, e.g. ``git archive main packages
benchmarks | tar -x -C /tmp/main``, its cold + warm processes alternated with this checkout's, each
round; the summary gives medians over the rounds. ``PYTHONDONTWRITEBYTECODE`` is dropped for the
processes, as in bench_warm_start.py: an installed package has its ``.pyc`` files.)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

_PROBE = """
import json, os, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
import numpy as np
import kernelkit
from test_bench_numba import model_case
proto, model, feed, gflop = model_case(sys.argv[1])
t1 = t2 = time.perf_counter()  # the Session build imports the backends (numba's in the background, deferred)
compiled, stack, lookups, counts = {}, [], [], [0]
def listen():  # imports numba: before the session only when the first run compiles (eager)
    from numba.core import event
    from kernelkit_numba import cache
    class Count(event.Listener):
        def on_start(self, ev):
            stack.append(time.perf_counter())
        def on_end(self, ev):
            if not stack:  # started before the listener
                return
            took = time.perf_counter() - stack.pop()
            if not stack:  # outermost: callees compiled on the way are inside it
                fn = getattr(ev.data.get("dispatcher"), "py_func", None)
                name = getattr(fn, "_kernelkit_cache_key", None) or \
                    f"{getattr(fn, '__module__', '?').rsplit('.', 1)[-1]}.{getattr(fn, '__qualname__', '?')}"
                compiled[name] = round(compiled.get(name, 0) + took, 3)
            counts[0] += 1
    event.register("numba:compile", Count())
    load = cache.CheckedCache.load_overload
    def timed_load(self, sig, ctx):
        t = time.perf_counter()
        try:
            return load(self, sig, ctx)
        finally:
            lookups.append(time.perf_counter() - t)
    cache.CheckedCache.load_overload = timed_load
eager = os.environ.get("KERNELKIT_NUMBA_START") == "eager"
if eager:
    listen()
sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
t3 = time.perf_counter()
sess.run(None, feed)
t4 = time.perf_counter()
if not eager:
    listen()
from kernelkit_numba import tiered
runs = 1
while True:  # until a run leaves no trial behind: numba runs every node
    tiered.wait()
    before = tiered.stats()["trials"]
    sess.run(None, feed)
    runs += 1
    if tiered.stats()["trials"] == before and not tiered.stats()["pending"]:
        break
t5 = time.perf_counter()
steady = []
for _ in range(5):
    t = time.perf_counter(); sess.run(None, feed); steady.append(time.perf_counter() - t)
stats = tiered.stats()
print(json.dumps({"import_and_build_model_s": round(t1 - t0, 3), "session_and_first_run_s": round(t4 - t1, 3),
                  "steady_run_s": round(sorted(steady)[2], 4), "compilations": counts[0],
                  "backend_import_s": round(t2 - t1, 3), "session_build_s": round(t3 - t2, 3),
                  "first_run_s": round(t4 - t3, 3), "numba_everywhere_s": round(t5 - t1, 3), "runs_until_numba": runs,
                  "first_cache_lookup_s": round(lookups[0], 3) if lookups else None,
                  "cache_lookups": len(lookups), "cache_lookup_s": round(sum(lookups), 3),
                  "trials": stats["trials"], "reference_calls": stats["reference_calls"], "compile_s": compiled}))
"""


def _variants(old: str, here: str) -> dict:
    """name -> (PYTHONPATH, benchmarks folder): this checkout, and ``old``'s sources first on the path."""
    variants = {"new": (os.environ.get("PYTHONPATH", ""), here)}
    if old:
        pkgs = os.path.join(old, "packages")
        srcs = [os.path.join(pkgs, p, "src") for p in sorted(os.listdir(pkgs))]
        variants["old"] = (os.pathsep.join(s for s in srcs if os.path.isdir(s)), os.path.join(old, "benchmarks"))
    return variants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default="resnet18")
    ap.add_argument("cache", nargs="?", default="", help="cache folder (emptied before each cold process)")
    ap.add_argument("modes", nargs="?", default="tiered,eager")
    ap.add_argument("--old", default="", help="another source tree (git archive main packages benchmarks), "
                                              "its processes alternated with this checkout's")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    name = args.model
    here = os.path.dirname(os.path.abspath(__file__))
    cache = args.cache or tempfile.mkdtemp(prefix="numba_cache_")
    variants = _variants(args.old, here)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # imports use .pyc files
    rows: dict = {}
    for r in range(args.rounds):
        for mode in args.modes.split(","):
            for variant, (path, bench) in variants.items():
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(cache)
                env = {**base, "NUMBA_CACHE_DIR": cache, "KERNELKIT_NUMBA_START": mode}
                if args.old:
                    env["PYTHONPATH"] = path
                for label in ("cold", "warm"):
                    out = subprocess.run([sys.executable, "-c", _PROBE, name, bench], env=env,
                                         stdout=subprocess.PIPE, text=True, check=True, timeout=900)
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    rows.setdefault((mode, label, variant), []).append(row)
                    print(json.dumps({"model": name, "start": mode, "cache": label, "variant": variant, "round": r,
                                      **row}), flush=True)
    for (mode, label, variant), got in rows.items():
        row = {k: statistics.median(x[k] for x in got) for k in ("session_and_first_run_s", "steady_run_s",
                                                                   "backend_import_s", "session_build_s",
                                                                   "first_run_s", "numba_everywhere_s",
                                                                   "compilations")}
        above = statistics.median(x["session_and_first_run_s"] - x["steady_run_s"] for x in got)
        tag = f" {variant}" if args.old else ""
        print(f"{name} {mode:6} {label} cache{tag}: first run {row['session_and_first_run_s']:.2f} s "
              f"({above:.2f} s above steady state {row['steady_run_s'] * 1e3:.1f} ms; build with the backends "
              f"{row['session_build_s']:.2f} + run {row['first_run_s']:.2f}), "
              f"numba on every node after {row['numba_everywhere_s']:.2f} s, {row['compilations']:.0f} compilations"
              + (f" (medians of {len(got)})" if len(got) > 1 else ""))


if __name__ == "__main__":
    main()

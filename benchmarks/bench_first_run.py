"""First call of a numba Session in a fresh process: with an empty Numba cache (every kernel the model
uses is compiled) and then with that cache populated (a second process loads them), against the
steady-state latency of the same process; for each start mode (docs/numba.md, "First call"):
tiered (the default: nodes run their reference kernel until a background thread has compiled
theirs) and eager (``KERNELKIT_NUMBA_START=eager``: the first run compiles). Prints one JSON line per
process (with a breakdown: backend import, session build, first run, each compilation, the first
cache lookup, when numba ran every node) and a summary::

    python benchmarks/bench_first_run.py [model] [cache folder] [modes]

(model: a name from test_bench_numba.BUILDERS, default resnet18; the cache folder, default a new
temporary one, is emptied before each mode's cold process; modes: default ``tiered,eager``.)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

_PROBE = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
import numpy as np
import kernelkit
from test_bench_numba import model_case
proto, model, feed, gflop = model_case(sys.argv[1])
t1 = time.perf_counter()
from kernelkit.backends import load_backends
load_backends(names=["numba"])  # numba and its kernel modules: what the Session's build loads (its vendors)
t2 = time.perf_counter()
from numba.core import event
from kernelkit_numba import cache, tiered
compiled, stack, lookups = {}, [], []
class Count(event.Listener):
    def on_start(self, ev):
        stack.append(time.perf_counter())
    def on_end(self, ev):
        took = time.perf_counter() - stack.pop()
        if not stack:  # outermost: callees compiled on the way are inside it
            fn = getattr(ev.data.get("dispatcher"), "py_func", None)
            name = f"{getattr(fn, '__module__', '?').rsplit('.', 1)[-1]}.{getattr(fn, '__qualname__', '?')}"
            compiled[name] = round(compiled.get(name, 0) + took, 3)
        counts[0] += 1
counts = [0]
event.register("numba:compile", Count())
load = cache.CheckedCache.load_overload
def timed_load(self, sig, ctx):
    t = time.perf_counter()
    try:
        return load(self, sig, ctx)
    finally:
        lookups.append(time.perf_counter() - t)
cache.CheckedCache.load_overload = timed_load
sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
t3 = time.perf_counter()
sess.run(None, feed)
t4 = time.perf_counter()
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


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
    cache = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="numba_cache_")
    modes = (sys.argv[3] if len(sys.argv) > 3 else "tiered,eager").split(",")
    here = os.path.dirname(os.path.abspath(__file__))
    rows = {}
    for mode in modes:
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache)
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "KERNELKIT_NUMBA_START": mode}
        for label in ("cold", "warm"):
            out = subprocess.run([sys.executable, "-c", _PROBE, name, here], env=env, stdout=subprocess.PIPE,
                                 text=True, check=True, timeout=900)
            rows[mode, label] = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({"model": name, "start": mode, "cache": label, **rows[mode, label]}), flush=True)
    for (mode, label), row in rows.items():
        above = row["session_and_first_run_s"] - row["steady_run_s"]
        print(f"{name} {mode:6} {label} cache: first run {row['session_and_first_run_s']:.2f} s "
              f"({above:.2f} s above steady state {row['steady_run_s'] * 1e3:.1f} ms; backends "
              f"{row['backend_import_s']:.2f} + build {row['session_build_s']:.2f} + run {row['first_run_s']:.2f}), "
              f"numba on every node after {row['numba_everywhere_s']:.2f} s, {row['compilations']} compilations")


if __name__ == "__main__":
    main()

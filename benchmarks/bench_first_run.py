"""First call of a numba Session in a fresh process: with an empty Numba cache (every kernel the model
uses is compiled) and then with that cache populated (a second process loads them), against the
steady-state latency of the same process. Prints one JSON line per process and a summary::

    python benchmarks/bench_first_run.py [model] [cache folder]

(model: a name from test_bench_numba.BUILDERS, default resnet18; the cache folder, default a new
temporary one, is emptied first.)
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
from numba.core import event
from test_bench_numba import model_case
proto, model, feed, gflop = model_case(sys.argv[1])
compiled = []
class Count(event.Listener):
    def on_start(self, ev):
        compiled.append(1)
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
t1 = time.perf_counter()
sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
sess.run(None, feed)
t2 = time.perf_counter()
steady = []
for _ in range(5):
    t = time.perf_counter(); sess.run(None, feed); steady.append(time.perf_counter() - t)
print(json.dumps({"import_and_build_model_s": round(t1 - t0, 3), "session_and_first_run_s": round(t2 - t1, 3),
                  "steady_run_s": round(sorted(steady)[2], 4), "compilations": len(compiled)}))
"""


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
    cache = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="numba_cache_")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    here = os.path.dirname(os.path.abspath(__file__))
    rows = {}
    for label in ("cold", "warm"):
        out = subprocess.run([sys.executable, "-c", _PROBE, name, here], env=env, stdout=subprocess.PIPE, text=True,
                             check=True, timeout=900)
        rows[label] = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps({"model": name, "cache": label, **rows[label]}), flush=True)
    for label, row in rows.items():
        above = row["session_and_first_run_s"] - row["steady_run_s"]
        print(f"{name} {label} cache: first run {row['session_and_first_run_s']:.2f} s "
              f"({above:.2f} s above steady state {row['steady_run_s'] * 1e3:.1f} ms), "
              f"{row['compilations']} compilations")


if __name__ == "__main__":
    main()

"""A default session whose shard pool is held backed off against a 1-thread session, in one process
with a busy loop pinned to the first CPU of this process's affinity, runs alternating: what the
default costs under load once the pool stays backed off (``ShardPool.FREE_CORES``), without the
host's drift between processes.

    taskset -c 0,1 python benchmarks/held_serial.py transformer,resnet18 [runs]
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")


def main() -> None:
    import kernelkit
    from kernelkit_numba import shards
    from test_bench_numba import kernelkit_session, model_case

    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    cpu = min(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        for name in sys.argv[1].split(","):
            _, model, feed, _ = model_case(name)
            one = kernelkit_session(model, "numba1")
            default = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
            for sess in (one, default, one, default):
                sess.run(None, feed)
            pool = shards.POOL
            pool.MIN_BACKOFF_S = pool.MAX_BACKOFF_S = 1e6
            pool._back_off("held for the comparison")
            times: dict = {"1t": [], "held": []}
            pair = [("1t", one), ("held", default)]
            for i in range(runs):
                for key, sess in pair if i % 2 else pair[::-1]:
                    t0 = time.perf_counter()
                    sess.run(None, feed)
                    times[key].append((time.perf_counter() - t0) * 1e3)
            a, b = np.median(times["1t"]), np.median(times["held"])
            print(f"{name}: 1t {a:.2f} ms, held default {b:.2f} ms, held / 1t {b / a:.3f}", flush=True)
            pool.reset()
    finally:
        busy.kill()
        busy.wait()


if __name__ == "__main__":
    main()

"""Why parallel code collapses on a busy core, and the shard pool that does not.

Four small parallel workloads at 1 and 2 threads, on a quiet machine and with a busy-loop process
pinned to one of the two cores the benchmark runs on:

- ``prange``: a 512x512 float32 multiply-add in a ``numba.njit(parallel=True)`` ``prange`` loop
  (Numba's pool: static split, the caller waits at a join for every thread's share);
- ``sgemm``: a 128x256x1024 float32 ``np.dot`` at 1 or 2 OpenBLAS threads (threadpoolctl);
- ``shard-ew``: the same 512x512 multiply-add as a ``nogil`` kernel over row ranges run by
  ``kernelkit_numba.config.parallel_for`` (shards claimed from a shared counter, caller included);
- ``shard-gemm``: the same SGEMM as column blocks, each one ``np.dot`` at one BLAS thread, run by
  the shard pool.

Each (case, threads, load) runs in its own process pinned to two CPUs (``os.sched_setaffinity``,
as ``taskset -c 0,1``); the busy loop is a separate process pinned to the first of them. Prints
one JSON line per case and a markdown table last (median ms over blocks of calls)::

    python benchmarks/bench_threads.py            # CPUs 0,1
    python benchmarks/bench_threads.py 2,3 400    # other CPUs, calls per block
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CASES = ("prange", "sgemm", "shard-ew", "shard-gemm")

_CHILD = r"""
import json, os, sys, time
import numpy as np
case, threads, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if case == "prange":
    import numba
    from numba import prange
    numba.set_num_threads(threads)

    @numba.njit(parallel=True, nogil=True, fastmath=True)
    def madd(x, y):
        for i in prange(x.shape[0]):
            for j in range(x.shape[1]):
                y[i, j] = x[i, j] * 1.5 + 0.5

    x = np.ones((512, 512), np.float32); y = np.empty_like(x)
    run = lambda: madd(x, y)
elif case == "sgemm":
    from threadpoolctl import threadpool_limits
    threadpool_limits(threads, user_api="blas")
    a = np.ones((128, 1024), np.float32); b = np.ones((1024, 256), np.float32)
    run = lambda: np.dot(a, b)
else:
    from kernelkit_numba import config
    from threadpoolctl import threadpool_limits
    threadpool_limits(1, user_api="blas")
    if case == "shard-ew":
        import numba

        @numba.njit(nogil=True, fastmath=True)  # config.jit_parallel without cache=True (a -c script)
        def madd(x, y, lo, hi):
            for i in range(lo, hi):
                for j in range(x.shape[1]):
                    y[i, j] = x[i, j] * 1.5 + 0.5

        x = np.ones((512, 512), np.float32); y = np.empty_like(x)
        work = 8.0 * x.size  # the estimate the unary kernels use: 4 shards of 64K elements
        def run():
            with config.num_threads(threads):
                config.parallel_for(madd, 512, (x, y), work)
    else:
        a = np.ones((128, 1024), np.float32); b = np.ones((1024, 256), np.float32)
        out = np.empty((128, 256), np.float32)
        blocks = 8
        def shard(i):
            c = slice(i * 256 // blocks, (i + 1) * 256 // blocks)
            np.matmul(a, b[:, c], out=out[:, c])
        def run():
            with config.num_threads(threads):
                config.run_shards(shard, blocks)
for _ in range(20):
    run()
meds = []
for _ in range(5):
    t = []
    for _ in range(calls):
        t0 = time.perf_counter(); run(); t.append(time.perf_counter() - t0)
    meds.append(float(np.median(t)) * 1e3)
print(json.dumps({"case": case, "threads": threads, "ms": float(np.median(meds))}))
"""


def measure(cpus: list[int], calls: int, loaded: bool) -> dict:
    busy = None
    if loaded:
        spin = f"import os\nos.sched_setaffinity(0, {{{cpus[0]}}})\nwhile True: pass"
        busy = subprocess.Popen([sys.executable, "-c", spin])
        time.sleep(0.5)
    try:
        out = {}
        for case in CASES:
            for threads in (1, 2):
                res = subprocess.run([sys.executable, "-c", _CHILD, case, str(threads), str(calls)],
                                     stdout=subprocess.PIPE, text=True, check=True, timeout=600,
                                     preexec_fn=lambda: os.sched_setaffinity(0, set(cpus)))
                row = json.loads(res.stdout.strip().splitlines()[-1])
                row["load"] = "loaded" if loaded else "quiet"
                print(json.dumps(row), flush=True)
                out[(case, threads)] = row["ms"]
        return out
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def main() -> None:
    cpus = [int(c) for c in (sys.argv[1] if len(sys.argv) > 1 else "0,1").split(",")]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    quiet, loaded = measure(cpus, calls, False), measure(cpus, calls, True)
    print("| case | quiet 1t | quiet 2t | loaded 1t | loaded 2t | loaded 2t / loaded 1t |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in CASES:
        q1, q2, l1, l2 = quiet[(case, 1)], quiet[(case, 2)], loaded[(case, 1)], loaded[(case, 2)]
        print(f"| {case} | {q1:.3f} | {q2:.3f} | {l1:.3f} | {l2:.3f} | {l2 / l1:.1f}x |")


if __name__ == "__main__":
    main()

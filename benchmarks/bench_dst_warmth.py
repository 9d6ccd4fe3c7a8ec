"""Does the cache state of a copy's destination decide a same-call node's time? The detection head's
``Concat_135`` ((1, 512, 20, 20) + (1, 256, 20, 20) on the channels, 1.2 MB out) is the same
``np.concatenate`` in both sessions, but numba's writes into its arena block (``out=``) and the
reference's into a fresh array. Here, with the caches flushed by a 96 MiB pass and the inputs just
written before each call (as by the nodes before): the destination cold (not touched since the flush),
hot (written just before), or fresh (``out=None``); best of ``reps``, microseconds, one thread.

    taskset -c 0 python benchmarks/bench_dst_warmth.py [reps=40]
"""
from __future__ import annotations

import sys
import time

import numpy as np


def main(argv):
    reps = int(argv[0]) if argv else 40
    big = np.ones(96 << 18, np.float32)  # 96 MiB: more than the L3
    a = np.ones((1, 512, 20, 20), np.float32)
    b = np.ones((1, 256, 20, 20), np.float32)
    cold, hot = np.empty((1, 768, 20, 20), np.float32), np.empty((1, 768, 20, 20), np.float32)
    best = {"cold": np.inf, "hot": np.inf, "fresh": np.inf}
    for _ in range(reps):
        for k in best:
            big += 1
            a += 1
            b += 1
            if k == "hot":
                hot[...] = 0
            out = {"cold": cold, "hot": hot, "fresh": None}[k]
            t0 = time.perf_counter()
            np.concatenate((a, b), axis=1, out=out)
            best[k] = min(best[k], time.perf_counter() - t0)
    for k, v in best.items():
        print(f"destination {k:6s} {v * 1e6:8.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])

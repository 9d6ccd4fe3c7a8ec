"""Where should a residual Add write (issue 11, session 12)? ``np.add(x, y, out=...)`` for BERT's
(128, 768) float32 values, with x written long ago (a 16 MiB pass since: out of L2, in L3) and y just
written (hot), the destination: x itself (in place, as the memory plan does when x dies there), y,
another block written just before (hot), one not touched since the pass (cold), or a fresh array
(``out=None``); best of ``reps``, microseconds, one thread.

    taskset -c 0 python benchmarks/bench_add_destination.py [reps=200]

AMD box, two runs: in place over x or y 10.9-11.8 us, hot other 15.8-17.1, cold other 24.5-28.7, fresh
26.1-30.5.
"""
from __future__ import annotations

import sys
import time

import numpy as np


def main(argv: list[str]) -> None:
    reps = int(argv[0]) if argv else 200
    n = 128 * 768
    big = np.ones(4 << 20, np.float32)  # 16 MiB: out of L2 (1-2 MiB), within L3
    x, y, hot, cold = (np.ones(n, np.float32) for _ in range(4))
    best: dict[str, float] = {}
    for _ in range(reps):
        for k in ("in place over x", "in place over y", "hot other", "cold other", "fresh"):
            x[...] = 1.0  # x: written (the LayerNorm's output)...
            big += 1.0  # ...then a lot of traffic (the feed-forward weights)
            if k == "hot other":
                hot[...] = 0.0
            y[...] = 2.0  # y: the product's output, just written
            out = {"in place over x": x, "in place over y": y, "hot other": hot, "cold other": cold}.get(k)
            t0 = time.perf_counter()
            r = np.add(x, y, out=out)
            best[k] = min(best.get(k, 1.0), time.perf_counter() - t0)
            del r
    for k, v in best.items():
        print(f"{k:16s} {v * 1e6:7.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])

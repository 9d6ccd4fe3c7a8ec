"""A benchmark model at 1 thread and at 2 threads with ``config.SERIAL_WORK`` (below which a node
runs on the calling thread alone, decided when the Session binds its nodes) at its default and
lower, sessions interleaved call by call, median and best wall ms: which part of a model's missing
2-thread speed-up is nodes left on one thread (MobileNetV2's 1x1 convolutions are 10-22 MFLOP, its
depthwise layers' estimates 25-180 us: below 2**25 "flops" most of them run serially).

    python benchmarks/bench_serial_work.py [model=mobilenetv2] [rounds=30] [log2 limits=25,23,21] [dw us=10]

The last argument adds 2-thread sessions (SERIAL_WORK at its default) whose depthwise / MaxPool
window tiles go to the pool above that many estimated microseconds (``dwtile.PARALLEL_US``, 30).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit as kk  # noqa: E402
from bench_e2e_interleaved import batched  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import dwtile  # noqa: E402


def session(model, threads: int, serial_work: int, parallel_us: float | None = None):
    keep, keep_us = config.SERIAL_WORK, dwtile.PARALLEL_US
    config.SERIAL_WORK = serial_work
    dwtile.PARALLEL_US = parallel_us or keep_us
    try:
        return kk.Session(model, vendors=["numba", "reference"], threads=threads)
    finally:
        config.SERIAL_WORK, dwtile.PARALLEL_US = keep, keep_us


def main(argv):
    name = argv[0] if argv else "mobilenetv2"
    rounds = int(argv[1]) if len(argv) > 1 else 30
    limits = [int(v) for v in argv[2].split(",")] if len(argv) > 2 else [25, 23, 21]
    dw_us = [float(v) for v in argv[3].split(",")] if len(argv) > 3 else [10.0]
    _, model, feed = batched(name, 1)
    runs = {"1t": (session(model, 1, config.SERIAL_WORK), config.SERIAL_WORK)}
    for b in limits:
        runs[f"2t, 2^{b}"] = (session(model, 2, 1 << b), 1 << b)
    for us in dw_us:
        runs[f"2t, dw {us:g} us"] = (session(model, 2, config.SERIAL_WORK, us), config.SERIAL_WORK)
    keep = config.SERIAL_WORK
    times = {k: [] for k in runs}
    for i in range(rounds + 3):
        for k, (sess, limit) in runs.items():
            config.SERIAL_WORK = limit  # also what a call without a fixed budget consults
            t0 = time.perf_counter()
            sess.run(None, feed)
            if i >= 3:
                times[k].append(time.perf_counter() - t0)
    config.SERIAL_WORK = keep
    base = statistics.median(times["1t"])
    print(f"{name}: median ms (best) over {rounds} interleaved rounds; SERIAL_WORK default 2^{keep.bit_length() - 1}")
    for k, v in times.items():
        med = statistics.median(v)
        print(f"  {k:12s} {med * 1e3:8.2f} ({min(v) * 1e3:.2f})  1t / this {base / med:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

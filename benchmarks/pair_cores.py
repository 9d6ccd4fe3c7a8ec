"""What two pinned cores cost each other, without kernelkit (issue 11, session 13; docs/numba.md, "ResNet-18's 3x3
layers at two threads"): why a layer's halves may each run slower than half the one-thread layer.

- ``compute``: a single-thread fp32 product that stays in L2 (256 x 256 x 256, BLAS at one thread), run on each
  CPU of a set at once, one process a CPU: its GFLOP/s per process with 1, 2 and more CPUs busy (the clock the
  host gives a core when its neighbours work too, or vCPUs that share a physical core).
- ``handover``: two threads pinned to CPUs a and b; a buffer (an activation's size) written by one, then read
  (summed) by b: the read's GB/s where b wrote it itself, where a wrote it (its lines in a's L2) and where nobody
  touched it since 64 MiB were written (L3 or memory). What a half pays to read the input the other core wrote.

    python benchmarks/pair_cores.py [--cpus 0,1] [--seconds 1.5]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402


def _compute(seconds: float) -> float:
    """GFLOP/s of 256^3 fp32 products on this thread for ``seconds``."""
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    b = a.T.copy()
    c = np.empty_like(a)
    np.matmul(a, b, out=c)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            np.matmul(a, b, out=c)
        n += 20
    return n * 2 * 256 ** 3 / (time.perf_counter() - t0) / 1e9


def _together(cpus: list[int], seconds: float) -> list[float]:
    """``_compute`` in one process per CPU of ``cpus``, all at once: each one's GFLOP/s."""
    code = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); " \
           f"import pair_cores as p; print(p._compute({seconds}))"
    procs = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", code], stdout=subprocess.PIPE,
                              text=True) for c in cpus]
    return [float(p.communicate()[0] or "nan") for p in procs]


def _handover(a: int, b: int, nbytes: int, reps: int) -> dict:
    """The reader on CPU ``b``: median seconds to sum a buffer of ``nbytes`` that it wrote itself ("own"), that the
    writer on CPU ``a`` wrote just before ("other") and that nobody touched since 64 MiB were written ("cold")."""
    buf = np.zeros(nbytes // 4, np.float32)
    big = np.zeros(16 << 20, np.float32)
    go, done = threading.Event(), threading.Event()
    stop = [False]

    def writer():
        os.sched_setaffinity(0, {a})
        while True:
            go.wait()
            go.clear()
            if stop[0]:
                return
            np.add(buf, np.float32(1), out=buf)
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    os.sched_setaffinity(0, {b})
    times: dict = {"own": [], "other": [], "cold": []}
    for _ in range(reps):
        for how in times:
            if how == "own":
                buf += np.float32(1)
            elif how == "other":
                go.set()
                done.wait()
                done.clear()
            else:
                buf += np.float32(1)
                big += np.float32(1)
            t0 = time.perf_counter()
            buf.sum()
            times[how].append(time.perf_counter() - t0)
    stop[0] = True
    go.set()
    t.join()
    return {k: float(np.median(v)) for k, v in times.items()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--many", default="", help="a larger CPU set for the compute test (e.g. 0-7)")
    args = ap.parse_args(argv)
    cpus = [int(c) for c in args.cpus.split(",")]
    sib = "/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list"
    for c in cpus:
        try:
            print(f"cpu{c} thread siblings: {open(sib.format(c)).read().strip()}")
        except OSError:
            pass
    print("| compute, 256^3 fp32 at one thread | GFLOP/s per process |")
    print("|---|---|")
    print(f"| CPU {cpus[0]} alone | {_together(cpus[:1], args.seconds)[0]:.1f} |")
    print(f"| CPUs {args.cpus} at once | " + " / ".join(f"{g:.1f}" for g in _together(cpus, args.seconds)) + " |")
    if args.many:
        lo, hi = (int(x) for x in args.many.split("-"))
        many = list(range(lo, hi + 1))
        g = _together(many, args.seconds)
        print(f"| CPUs {args.many} at once | median {np.median(g):.1f} (min {min(g):.1f}) |")
    print("| handover: the reader sums a buffer | own | written by the other core | cold | other / own |")
    print("|---|---:|---:|---:|---:|")
    for kb in (400, 800, 1600):
        r = _handover(cpus[0], cpus[1], kb << 10, 15)
        gbs = {k: (kb << 10) / v / 1e9 for k, v in r.items()}
        print(f"| {kb} KB, GB/s | {gbs['own']:.1f} | {gbs['other']:.1f} | {gbs['cold']:.1f} | "
              f"{r['other'] / r['own']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

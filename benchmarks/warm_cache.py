"""Fill Numba's disk cache for a model before a timed round (issue 11, session 11): one untimed run of
its sessions at each thread count, with ``--set`` constants where a variant binds other paths, so that
the timed processes that follow load their kernels rather than compile them beside each other.

    python benchmarks/warm_cache.py mobilenetv2_b8 [--threads 1,2] [--set kernels.cpair.BATCH=0]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", help="comma-separated benchmark models")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--set", default="", help="kernelkit_numba constants (test_bench_numba.apply_bench_set)")
    args = ap.parse_args(argv)
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    import kernelkit
    from test_bench_numba import apply_bench_set, model_case

    apply_bench_set(args.set)
    for name in args.models.split(","):
        _proto, model, feed, _gflop = model_case(name)
        for threads in map(int, args.threads.split(",")):
            t0 = time.perf_counter()
            sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=threads)
            sess.run(None, feed)
            sess.run(None, feed)
            print(f"warm {name} {threads}t {args.set or 'default'}: {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()

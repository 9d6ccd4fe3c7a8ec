"""The transformer at two threads with tpair's halves (kernels/tpair.py) on and off, in one process: a
two-thread session run in blocks, the switch flipped between blocks (the switch is read per call), the
blocks alternating, the ratio on / off taken within each round (issue 11, session 12).

    taskset -c 0,1 python benchmarks/tpair_ab.py [transformer] [--rounds 8] [--runs 20] [--no-backoff]
    python benchmarks/tpair_ab.py transformer --jobs [--runs 40] [--no-backoff]

``--jobs``: the pool's jobs a run by the kernel function that published them, and the pair helper's counts,
with the switch on (first, so that no pool worker exists yet) and then off, each after 30 untimed runs (the
pool's worker builds its spin loop after 32 jobs).

Once an "off" block has published pool jobs the pool has a worker, and from its spin loop on (32 jobs) the
heartbeats wake it through every later run, "on" blocks too (where tpair then leaves the nodes to the
pool: ``tpair._go``'s rule); each block's pool jobs and pair counts are printed, so that such blocks show.
turns.py's ``--variant old=kernels.tpair.ON=0`` (a process each) is the clean A/B.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="transformer")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--jobs", action="store_true", help="count the pool's jobs a run by publisher (on, then off)")
    ap.add_argument("--no-backoff", action="store_true",
                    help="the shard pool never backs off (a shared box, where its look at the free cores holds it)")
    args = ap.parse_args(argv)
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    import kernelkit
    from kernelkit_numba import shards
    from kernelkit_numba.kernels import fpair, tpair
    from test_bench_numba import model_case

    if args.no_backoff:
        shards.POOL.backoff = False
        shards.POOL.reset()
    _proto, model, feed, _gflop = model_case(args.model)
    sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=2)
    if args.jobs:
        for on in (True, False):
            count_jobs(sess, feed, on, args.runs)
        return
    for on in (True, False, True):
        tpair.ON = on
        for _ in range(3):
            sess.run(None, feed)
    ratios = []
    for r in range(args.rounds):
        med = {}
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            tpair.ON = on
            sess.run(None, feed)
            jobs, pairs = shards.POOL.stats["jobs"], dict(fpair.server().stats)
            ms = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                sess.run(None, feed)
                ms.append((time.perf_counter() - t0) * 1e3)
            med[on] = statistics.median(ms)
            st = fpair.server().stats
            print(f"round {r} {'on ' if on else 'off'}: median {med[on]:.2f} ms, best {min(ms):.2f}, pool jobs "
                  f"{shards.POOL.stats['jobs'] - jobs}, paired {st['paired'] - pairs['paired']}, alone "
                  f"{st['alone'] - pairs['alone']}, pool worker spinning {shards.POOL.workers_spinning()}", flush=True)
        ratios.append(med[True] / med[False])
    print(f"{args.model}: on / off median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max "
          f"{max(ratios):.3f}) over {len(ratios)} rounds: " + " ".join(f"{x:.2f}" for x in ratios))


def count_jobs(sess, feed, on: bool, runs: int) -> None:
    """The pool's jobs a run by the kernels' function that published them (the first frame in a kernels/
    module), with tpair.ON = ``on``, after 30 untimed runs; and the pair helper's counts over the runs."""
    import collections
    import traceback

    from kernelkit_numba import shards
    from kernelkit_numba.kernels import fpair, tpair

    tpair.ON = on
    for _ in range(30):
        sess.run(None, feed)
    pool = shards.POOL
    run, by = pool.run, collections.Counter()

    def counted(fn, count, *a, **kw):
        frames = [f for f in traceback.extract_stack()[:-1] if f"{os.sep}kernels{os.sep}" in f.filename]
        by[f"{os.path.basename(frames[0].filename)}:{frames[0].name}" if frames else "?"] += 1
        return run(fn, count, *a, **kw)

    pool.run = counted
    jobs, pairs = pool.stats["jobs"], dict(fpair.server().stats)
    try:
        for _ in range(runs):
            sess.run(None, feed)
    finally:
        pool.run = run
    st = fpair.server().stats
    print(f"tpair.ON={int(on)}: pool jobs a run {(pool.stats['jobs'] - jobs) / runs:.2f}, pool.run calls a run by "
          f"publisher {({k: round(v / runs, 2) for k, v in by.items()})}, pairs "
          f"{({k: st[k] - pairs[k] for k in st})}", flush=True)


if __name__ == "__main__":
    main()

"""Where a two-thread run's time goes that the per-layer sums do not show (issue 11, session 13; docs/numba.md,
"The gap between the layers and the run"). One process, a one-thread and a two-thread numba session
(``profile=True``) run in turn, ``--runs`` back-to-back runs each per round (the first of a turn untimed, so
that the pairs' helper is awake as in turns.py's blocks), the order swapped every round. Per timed run it keeps:

- the run's wall time and its nodes' times (the executor's profile events), so the gaps between nodes (the
  executor's own Python, the run's entry and exit) are wall - the nodes' sum;
- at two threads, every pair call's outcome from the pairs' trace (``pairs.TRACE``: the caller's own half, its
  wait at the end, the helper's start after the publish and its half, in cycles), laid on the node it ran in.

Prints medians over the timed runs: wall 2t / 1t, the nodes' sum and the gaps; per op kind the nodes' time at one
and two threads (median and best per node, summed) and 2t / 1t; the pairs' sums per run (caller waits, helper
start latency, the helper's idle end where the caller's half was the longer) and the nodes that lose most against
0.57 of their one-thread time::

    taskset -c 0,1 python benchmarks/gap_trace.py resnet18 [--rounds 8] [--runs 4] [--set SPEC] [--json PATH]
        [--no-backoff]

``--set SPEC`` (``;``-separated ``kernels.X.Y=V``, as turns.py's variants) applies to the whole process.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodes_ab import kernelkit, load  # noqa: E402, I001 (sets the environment first)


def _runs(sess, feed, n: int, trace: list | None) -> list[dict]:
    """``n`` back-to-back runs of ``sess`` after one untimed: per run its wall seconds, its nodes' (name, start,
    seconds) and the pair calls traced during it."""
    sess.run(None, feed)
    out = []
    for _ in range(n):
        sess.reset_profile()
        if trace is not None:
            trace.clear()
        t0 = time.perf_counter()
        sess.run(None, feed)
        wall = time.perf_counter() - t0
        events = [(name, start, dt) for name, start, dt, _ in sess.profile_events()]
        out.append({"wall": wall, "events": events, "pairs": list(trace) if trace is not None else []})
    return out


def _median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--set", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--no-backoff", action="store_true", help="neither the pool nor the pairs back off (dev box)")
    args = ap.parse_args(argv)
    if args.set:
        from test_bench_numba import apply_bench_set

        apply_bench_set(args.set.replace(";", ","))
    from kernelkit_numba.kernels import pairs

    if args.no_backoff:
        from kernelkit_numba import shards

        shards.POOL.backoff = False
        pairs.PairServer._back_off = lambda self, seconds=0.0: None

    _kinds, model, feed = load(args.model)
    s1 = kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True)
    s2 = kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True)
    ops = {st.name: st.op for st in s2.plan.steps}
    for s in (s1, s2):
        for _ in range(2):
            s.run(None, feed)
    trace: list = []
    rate = pairs.cycle_rate() or 1.0
    runs = {1: [], 2: []}
    for r in range(args.rounds):
        order = (1, 2) if r % 2 == 0 else (2, 1)
        for t in order:
            if t == 2:
                pairs.TRACE = trace
            try:
                runs[t] += _runs(s1 if t == 1 else s2, feed, args.runs, trace if t == 2 else None)
            finally:
                pairs.TRACE = None
    ms = 1e3
    # per run: wall, the nodes' sum, the gaps
    summary = {}
    for t in (1, 2):
        walls = [x["wall"] * ms for x in runs[t]]
        sums = [sum(dt for _, _, dt in x["events"]) * ms for x in runs[t]]
        summary[t] = {"wall": _median(walls), "best": min(walls), "nodes": _median(sums),
                      "gaps": _median([w - s for w, s in zip(walls, sums)])}
    # per node: median and best at each thread count
    per = {1: collections.defaultdict(list), 2: collections.defaultdict(list)}
    for t in (1, 2):
        for x in runs[t]:
            for name, _, dt in x["events"]:
                per[t][name].append(dt * ms)
    names = list(dict.fromkeys(n for x in runs[2] for n, _, _ in x["events"]))
    # the pairs: each call laid on the node whose span holds its timestamp
    # per node: paired, alone, own, wait, the helper's start, its half, its idle end
    pair_node = collections.defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0, 0.0, 0.0])
    per_run = []
    for x in runs[2]:
        spans = [(start, start + dt, name) for name, start, dt in x["events"]]
        tot = [0.0, 0.0, 0.0, 0.0, 0, 0]  # waits, latency, helper idle at the end, own, paired, alone
        j = 0
        for ts, done, own, waited, lat, helper in x["pairs"]:
            while j < len(spans) and spans[j][1] < ts:
                j += 1
            name = spans[j][2] if j < len(spans) else "?"
            c = pair_node[name]
            if done == 1:
                idle = max(own - (lat + helper), 0)  # the helper done before the caller: its core idle
                c[0] += 1
                c[2] += own / rate * ms
                c[3] += waited / rate * ms
                c[4] += lat / rate * ms
                c[5] += helper / rate * ms
                c[6] += idle / rate * ms
                tot[0] += waited / rate * ms
                tot[1] += lat / rate * ms
                tot[2] += idle / rate * ms
                tot[3] += own / rate * ms
                tot[4] += 1
            else:
                c[1] += 1
                tot[5] += 1
        per_run.append(tot)
    n2 = max(len(runs[2]), 1)
    print(f"## {args.model}: {args.rounds} rounds x {args.runs} timed runs a session, cycle rate {rate / 1e9:.2f} GHz"
          f"{' set ' + args.set if args.set else ''}")
    print()
    print("| | 1t | 2t | 2t / 1t |")
    print("|---|---:|---:|---:|")
    for key, label in (("wall", "wall, median ms"), ("best", "wall, best ms"), ("nodes", "nodes' sum, median ms"),
                       ("gaps", "gaps (wall - nodes), median ms")):
        a, b = summary[1][key], summary[2][key]
        print(f"| {label} | {a:.3f} | {b:.3f} | {b / a:.3f} |")
    med = {t: {n: _median(per[t][n]) for n in names if per[t][n]} for t in (1, 2)}
    best = {t: {n: min(per[t][n]) for n in names if per[t][n]} for t in (1, 2)}
    s_med = [sum(med[t].values()) for t in (1, 2)]
    s_best = [sum(best[t].values()) for t in (1, 2)]
    print(f"| sum of per-node medians, ms | {s_med[0]:.3f} | {s_med[1]:.3f} | {s_med[1] / s_med[0]:.3f} |")
    print(f"| sum of per-node bests, ms | {s_best[0]:.3f} | {s_best[1]:.3f} | {s_best[1] / s_best[0]:.3f} |")
    print()
    pr = [_median([r[i] for r in per_run]) for i in range(6)]
    paired_ms = sum(med[2].get(n, 0.0) for n, c in pair_node.items() if c[0])
    own_wait = sum(c[2] + c[3] for c in pair_node.values() if c[0]) / n2
    print(f"pairs per 2t run (medians): paired {pr[4]:.0f}, alone {pr[5]:.0f}; caller's own halves {pr[3]:.3f} ms, "
          f"caller's waits {pr[0]:.3f} ms, helper's start after publish {pr[1]:.3f} ms, helper idle at the end "
          f"(caller's half longer) {pr[2]:.3f} ms; the paired nodes' medians {paired_ms:.3f} ms, of which outside the "
          f"caller's half and wait {paired_ms - own_wait:.3f} ms")
    print()
    by_op = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
    for n in names:
        if n not in med[1] or n not in med[2]:
            continue
        g = by_op[ops.get(n, "") or "?"]
        g[0] += med[1][n]
        g[1] += med[2][n]
        g[2] += best[1][n]
        g[3] += best[2][n]
        g[4] += 1
    print("| op | nodes | 1t median ms | 2t median ms | 2t / 1t | 1t best | 2t best | 2t / 1t best |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for op, g in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        print(f"| {op} | {g[4]} | {g[0]:.3f} | {g[1]:.3f} | {g[1] / max(g[0], 1e-9):.3f} | {g[2]:.3f} | {g[3]:.3f} | "
              f"{g[3] / max(g[2], 1e-9):.3f} |")
    print()
    print(f"nodes losing most against 0.57 x their 1t median (per run; pair sums over all {n2} runs / runs):")
    print("| node | op | 1t ms | 2t ms | 2t / 1t | paired/alone | own | wait | start | helper | helper idle | "
          "outside |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    loss = sorted((n for n in names if n in med[1] and n in med[2]), key=lambda n: -(med[2][n] - 0.57 * med[1][n]))
    for n in loss[:args.top]:
        c = pair_node.get(n, [0, 0, 0, 0, 0, 0, 0])
        print(f"| {n} | {ops.get(n, '')} | {med[1][n]:.3f} | {med[2][n]:.3f} | {med[2][n] / med[1][n]:.3f} | "
              f"{c[0] / n2:.1f}/{c[1] / n2:.1f} | {c[2] / n2:.3f} | {c[3] / n2:.3f} | {c[4] / n2:.3f} | "
              f"{c[5] / n2:.3f} | {c[6] / n2:.3f} | {med[2][n] - (c[2] + c[3]) / n2:.3f} |")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"model": args.model, "set": args.set, "summary": summary, "pairs": pr,
                                "median": med, "best": best, "ops": {n: ops.get(n, "") for n in names},
                                "pair_node": {k: v for k, v in pair_node.items()}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

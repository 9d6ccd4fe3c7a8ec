"""Per-node A/B of kernelkit_numba settings inside a model at two threads (issue 11, session 12; docs/numba.md,
"ResNet-50 at two threads, again"): nodes_ab.py's protocol (sessions in one process run in turn, one run each
per round, the order rotated every round, each node's best time) with a one-thread numba session, the default
two-thread session and one two-thread session per ``LABEL=SPEC`` variant (SPEC: ``;``-separated
``module.ATTR=VALUE`` constants, set while its session is built and warmed, then put back: constants read when
a node binds, such as the pairs' cuts).
Prints the Conv nodes grouped by kind (nodes_ab's labels) and the other ops: per group the summed ms of every
session, 2t / 1t (ideal 0.5) and default / variant (above 1: the variant faster)::

    taskset -c 0,1 python benchmarks/nodes_ab2t.py resnet50 [runs=15] [LABEL=SPEC ...] [--no-backoff]

``--no-backoff``: neither the shard pool nor the pairs' helper backs off (a loaded dev box otherwise holds the
two-thread sessions at one thread through the pool's look at the free cores).
"""
from __future__ import annotations

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodes_ab import _kinds, _saved, convert, kernelkit, zoo  # noqa: E402 (sets the environment first)


class _Woken:
    """A two-thread session whose every run first wakes the pairs' helper (asleep after pairs.IDLE_S without a
    job: the one-thread session's run before it), so that its first layers pair as in back-to-back runs."""

    def __init__(self, sess):
        self.sess = sess

    def run(self, *args, **kwargs):
        import time

        from kernelkit_numba.kernels import fpair
        from kernelkit_numba.kernels.pairs import AWAKE

        srv = fpair.server()
        srv.asleep()
        end = time.perf_counter() + 0.005
        while srv.ctl[AWAKE] != 1 and time.perf_counter() < end:
            pass
        return self.sess.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.sess, name)


def _best_rotated(sessions: list, feed, runs: int) -> list[dict]:
    """``_timing.best_node_ms_interleaved`` with the order of the sessions rotated every round: a session that
    always ran right after the one-thread one (its helper just woken, the caches holding the other session's
    weights) ran its first layers 1.2-1.3x slower on the Xeon (session 12's call), a bias of the order."""
    import numpy as np

    for sess in sessions:
        for _ in range(3):
            sess.run(None, feed)
        sess.reset_profile()
    for r in range(runs):
        for i in range(len(sessions)):
            sessions[(i + r) % len(sessions)].run(None, feed)
    best: list[dict] = []
    for sess in sessions:
        b: dict = {}
        for node, _start, secs, _tid in sess.profile_events():
            b[node] = min(b.get(node, np.inf), secs * 1e3)
        best.append(b)
    return best


def main(argv: list[str]) -> int:
    from test_bench_numba import apply_bench_set

    if "--no-backoff" in argv:
        from kernelkit_numba import shards
        from kernelkit_numba.kernels import pairs

        argv = [a for a in argv if a != "--no-backoff"]
        shards.POOL.backoff = False
        pairs.PairServer._back_off = lambda self: None
    name = argv[0] if argv else "resnet50"
    runs = int(argv[1]) if len(argv) > 1 else 15
    variants = [a.split("=", 1) for a in argv[2:]]
    proto = {**zoo.MODELS, **zoo.EXTRA}[name]()
    try:
        import onnx

        proto = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - the map sizes are labels only
        pass
    kinds = _kinds(proto)
    model = convert(proto.SerializeToString())
    feed = zoo.feed(proto, 1)
    labels = ["numba1", "default"] + [v[0] for v in variants]
    sessions = [kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True),
                _Woken(kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True))]
    for _, spec in variants:
        saved = _saved(spec)
        apply_bench_set(spec.replace(";", ","))
        try:
            sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True)
            for _ in range(2):
                sess.run(None, feed)
        finally:
            for (obj, attr), value in saved.items():
                setattr(obj, attr, value)
        sessions.append(_Woken(sess))
    best = _best_rotated(sessions, feed, runs)
    steps = {s.name: s for s in sessions[1].plan.kernel_steps()}
    groups: dict = collections.defaultdict(lambda: [0] + [0.0] * len(labels))
    for node, step in steps.items():
        kind = step.op
        if step.op == "Conv":
            label = next((kinds[o] for o in [node, *step.outputs] if o in kinds), "?")
            kind = f"Conv {label}" + (" +Z" if len(step.inputs) > 3 else "")
        row = groups[kind]
        row[0] += 1
        for i, b in enumerate(best):
            row[1 + i] += b.get(node, 0.0)
    print(f"## {name}, best of {runs} per node (ms), sessions in turn")
    ratios = ["2t / 1t"] + [f"default / {v}" for v in labels[2:]]
    print(f"| kind | nodes | {' | '.join(labels)} | " + " | ".join(ratios) + " |")
    print("|---|---:|" + "---:|" * (len(labels) + len(ratios)))
    total = [0.0] * len(labels)
    for kind, row in sorted(groups.items(), key=lambda kv: -kv[1][2]):
        ms = row[1:]
        total = [a + b for a, b in zip(total, ms)]
        rs = [ms[1] / ms[0] if ms[0] else 0.0] + [ms[1] / v if v else 0.0 for v in ms[2:]]
        print(f"| {kind} | {row[0]} | " + " | ".join(f"{v:.3f}" for v in ms) + " | "
              + " | ".join(f"{r:.3f}" for r in rs) + " |")
    rs = [total[1] / total[0]] + [total[1] / v for v in total[2:]]
    print("| **sum** | | " + " | ".join(f"{v:.2f}" for v in total) + " | " + " | ".join(f"{r:.3f}" for r in rs) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

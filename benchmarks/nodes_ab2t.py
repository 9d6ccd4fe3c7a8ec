"""Per-node A/B of kernelkit_numba settings inside a model at two threads (issue 11, session 12; docs/numba.md,
"ResNet-50 at two threads, again"): nodes_ab.py's protocol (sessions in one process run in turn, one run each
per round, the order rotated every round, each node's best time) with a one-thread numba session, the default
two-thread session and one two-thread session per ``LABEL=SPEC`` variant (SPEC: ``;``-separated
``module.ATTR=VALUE`` constants, set while its session is built and warmed, then put back: constants read when
a node binds, such as the pairs' cuts; one that code built once a process reads is refused, as in nodes_ab.py).
Prints the Conv nodes grouped by kind (nodes_ab's labels) and the other ops: per group the summed ms of every
session, 2t / 1t (ideal 0.5) and default / variant (above 1: the variant faster)::

    taskset -c 0,1 python benchmarks/nodes_ab2t.py resnet50 [runs=15] [LABEL=SPEC ...] [--no-backoff]

``--no-backoff``: neither the shard pool nor the pairs' helper backs off (a loaded dev box otherwise holds the
two-thread sessions at one thread through the pool's look at the free cores).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodes_ab import (  # noqa: E402, I001 (sets the environment first)
    _ratio, best_node_ms_interleaved, kernelkit, load, print_groups, refuse_built_once, variant_session)


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


def main(argv: list[str]) -> int:
    if "--no-backoff" in argv:
        from kernelkit_numba import shards
        from kernelkit_numba.kernels import pairs

        argv = [a for a in argv if a != "--no-backoff"]
        shards.POOL.backoff = False
        pairs.PairServer._back_off = lambda self, seconds=0.0: None
    name = argv[0] if argv else "resnet50"
    runs = int(argv[1]) if len(argv) > 1 else 15
    variants = [a.split("=", 1) for a in argv[2:]]
    refuse_built_once(variants, "nodes_ab2t.py")
    kinds, model, feed = load(name)
    labels = ["numba1", "default"] + [v[0] for v in variants]
    sessions = [kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True),
                _Woken(kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True))]
    sessions += [_Woken(variant_session(model, feed, spec, 2)) for _, spec in variants]
    best = best_node_ms_interleaved(sessions, feed, runs, rotate=True)
    print_groups(f"## {name}, best of {runs} per node (ms), sessions in turn", kinds, sessions[1], best, labels,
                 ["2t / 1t"] + [f"default / {v}" for v in labels[2:]],
                 lambda ms: [_ratio(ms[1], ms[0])] + [_ratio(ms[1], v) for v in ms[2:]])
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A graph output's cost to its caller: each session's whole run, and the run plus the caller's first read of
its output (a sum over it), one thread, the sessions in turn with the order rotated every round; per session
the median ms, and per variant the within-round ratio numba / variant (median, range over the rounds). A
kernel that writes its output with non-temporal stores (``kernels.concat.OUTPUT_NT``: the detection head's
``Concat_285``, 2.1 MB) saves the read for ownership of the fresh array's lines, but leaves them in memory
rather than in the caches, where the caller's first read then finds them (issue 11, session 15)::

    taskset -c 0,1 python benchmarks/bench_output_read.py [model=detection_head] [rounds=30] \\
        [off=kernels.concat.OUTPUT_NT=0 ...]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodes_ab  # noqa: E402  (sets the environment of ops_vs_reference.py)
import numpy as np  # noqa: E402


def _session(model, spec: str):
    """A numba session (no profile) bound under SPEC's constants, which are then put back."""
    from test_bench_numba import apply_bench_set

    saved = nodes_ab._saved(spec)
    apply_bench_set(spec.replace(";", ","))
    try:
        return nodes_ab.kernelkit.Session(model, vendors=["numba", "reference"], threads=1)
    finally:
        for (obj, attr), value in saved.items():
            setattr(obj, attr, value)


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "detection_head"
    rounds = int(argv[1]) if len(argv) > 1 else 30
    variants = [a.split("=", 1) for a in argv[2:]] or [["off", "kernels.concat.OUTPUT_NT=0"]]
    nodes_ab.refuse_built_once(variants, "bench_output_read.py")
    _kinds, model, feed = nodes_ab.load(name)
    labels = ["reference", "numba"] + [v[0] for v in variants]
    sessions = [nodes_ab.kernelkit.Session(model, vendors=["reference"], threads=1), _session(model, "")]
    sessions += [_session(model, spec) for _, spec in variants]
    for sess in sessions:
        for _ in range(3):
            sess.run(None, feed)
    run = np.zeros((len(sessions), rounds))
    read = np.zeros((len(sessions), rounds))
    for r in range(rounds):
        for k in range(len(sessions)):
            i = (r + k) % len(sessions)
            t0 = time.perf_counter()
            outs = sessions[i].run(None, feed)
            t1 = time.perf_counter()
            for out in outs:
                np.add.reduce(out, axis=None)  # the caller's first read of each output
            t2 = time.perf_counter()
            run[i, r], read[i, r] = (t1 - t0) * 1e3, (t2 - t0) * 1e3
            del outs
    print(f"## {name}, 1 thread, {rounds} rounds, order rotated: median ms; numba / variant within a round, "
          "median (range)")
    print("| | " + " | ".join(labels) + " | " + " | ".join(f"numba / {v}" for v in labels[2:]) + " |")
    print("|---|" + "---:|" * (2 * len(labels) - 2))
    for what, t in (("run", run), ("run + read of the output", read), ("read alone", read - run)):
        ratios = [np.sort(t[1] / t[i]) for i in range(2, len(sessions))]
        print(f"| {what} | " + " | ".join(f"{np.median(row):.3f}" for row in t) + " | "
              + " | ".join(f"{np.median(x):.3f} ({x[0]:.2f}-{x[-1]:.2f})" for x in ratios) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""In-model A/B of one module-level switch (issue 11, session 9): a reference session and two numba
sessions, one run with ``MODULE.ATTR = OLD`` and one with ``= NEW`` (set before each of its runs, so a
switch read at binding or at each call both count), all at one thread and run in turn, each node's
best time; prints the nodes of the given op types and the model sums::

    python benchmarks/ops_switch_ab.py MODEL RUNS MODULE ATTR OLD NEW OPS
    python benchmarks/ops_switch_ab.py detection_head 15 kernelkit_numba.kernels.resize REPEAT_PLANS False True Resize

OLD and NEW are Python literals. Run it pinned (``taskset -c 0,1``); the node times of one process
are comparable, a one-node session's are not (the state the model's earlier nodes leave).
"""
from __future__ import annotations

import ast
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
import zoo  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402


def main(argv: list[str]) -> int:
    name, runs, modname, attr, old, new, ops = argv[:7]
    runs, values, ops = int(runs), [None, ast.literal_eval(old), ast.literal_eval(new)], set(ops.split(","))
    module = importlib.import_module(modname)
    proto = {**zoo.MODELS, **zoo.EXTRA}[name]()
    model, feed = convert(proto.SerializeToString()), zoo.feed(proto, 1)
    sessions = [kernelkit.Session(model, vendors=[v, "reference"], threads=1, profile=True)
                for v in ("reference", "numba", "numba")]

    def run(i):
        if values[i] is not None:
            setattr(module, attr, values[i])
        return sessions[i].run(None, feed)

    for i in range(3):
        for _ in range(3):
            run(i)
        sessions[i].reset_profile()
    outs = [run(i) for i in range(3)]
    for _ in range(runs):
        for i in range(3):
            run(i)
    best = []
    for sess in sessions:
        b: dict = {}
        for node, _start, secs, _tid in sess.profile_events():
            b[node] = min(b.get(node, np.inf), secs * 1e3)
        best.append(b)
    sums = [0.0, 0.0, 0.0]
    print(f"| node | op | output | reference ms | {attr}={old} | {attr}={new} | old / new |")
    print("|---|---|---|---:|---:|---:|---:|")
    for step in sessions[1].plan.kernel_steps():
        if step.op in ops:
            r, o, n = (best[i][step.name] for i in range(3))
            sums = [sums[0] + r, sums[1] + o, sums[2] + n]
            print(f"| {step.name} | {step.op} | {step.output_specs[0].shape[1:]} | {r:.3f} | {o:.3f} | {n:.3f} | "
                  f"{o / n:.2f} |")
    print(f"| **{'+'.join(sorted(ops))} sum** | | | {sums[0]:.3f} | {sums[1]:.3f} | {sums[2]:.3f} | "
          f"{sums[1] / sums[2]:.2f} |")
    print(f"| **model sum** | | | {sum(best[0].values()):.3f} | {sum(best[1].values()):.3f} | "
          f"{sum(best[2].values()):.3f} | {sum(best[1].values()) / sum(best[2].values()):.2f} |")
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(outs[1], outs[2]))
    print(f"max |old - new| over the outputs: {diff:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

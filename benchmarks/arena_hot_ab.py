"""In-process A/B of the hot memory plan (issue 11, session 12; ``kernelkit.memory.HOT``): a reference
session and two numba sessions, one planned with ``HOT`` off and one with it on (the switch is read
when a session plans its memory, at its first run), all at one thread, run in turn (in a rotated order
each round), each node's best time (``profile=True``). Prints the op sums, the nodes of the given op
types, and per numba session the nodes slower than the reference by > 10 % and > 20 us (ops_vs_reference.py's rule)::

    python benchmarks/arena_hot_ab.py MODELS [runs=7] [ops=Add,Concat,Mul]

Run it pinned (``taskset -c 0,1``): the node times of one process are comparable.
"""
from __future__ import annotations

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import kernelkit  # noqa: E402
import zoo  # noqa: E402
from _timing import best_node_ms_interleaved  # noqa: E402
from kernelkit import memory  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from ops_vs_reference import MIN_MS, SLOWER  # noqa: E402

LABELS = ("reference", "HOT=0", "HOT=1")


def compare(name: str, runs: int, ops: set[str]) -> None:
    proto = {**zoo.MODELS, **zoo.EXTRA}[name]()
    model, feed = convert(proto.SerializeToString()), zoo.feed(proto, 1)
    sessions = []
    for vendor, hot in (("reference", True), ("numba", False), ("numba", True)):
        memory.HOT = hot
        sess = kernelkit.Session(model, vendors=[vendor, "reference"], threads=1, profile=True)
        sess.run(None, feed)  # plans the arena under this setting
        sessions.append(sess)
    memory.HOT = True
    mems = [s.memory() for s in sessions]
    best = best_node_ms_interleaved(sessions, feed, runs, rotate=True)
    steps = {s.name: (s.op, s.key.vendor) for s in sessions[1].plan.kernel_steps()}
    print(f"\n## {name} (1 thread, best of {runs} per node, ms; arena MB off {mems[1]['arena_bytes'] / 1e6:.2f}, "
          f"on {mems[2]['arena_bytes'] / 1e6:.2f}, hot plan kept: {mems[2]['hot_plan']})")
    by_op: dict = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for node, (op, _) in steps.items():
        if node in best[0]:
            row = by_op[op]
            row[0] += 1
            for k in range(3):
                row[k + 1] += best[k].get(node, 0.0)
    print("| op | nodes | reference | HOT=0 | HOT=1 | HOT=0 / HOT=1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for op, (count, r, a, b) in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        print(f"| {op} | {count} | {r:.3f} | {a:.3f} | {b:.3f} | {a / b if b else float('nan'):.2f} |")
    sums = [sum(v[k] for v in by_op.values()) for k in (1, 2, 3)]
    print(f"| **sum** | | {sums[0]:.3f} | {sums[1]:.3f} | {sums[2]:.3f} | {sums[1] / sums[2]:.3f} |")
    if ops:
        print(f"{name}, nodes of {sorted(ops)}: reference / HOT=0 / HOT=1 ms")
        for node, (op, _) in steps.items():
            if op in ops and node in best[0]:
                print(f"  {node} ({op}): {best[0][node]:.3f} / {best[1].get(node, 0):.3f} / {best[2].get(node, 0):.3f}")
    for k in (1, 2):
        slow = [(n, op, best[0][n], best[k][n]) for n, (op, vendor) in steps.items()
                if vendor == "numba" and n in best[0] and n in best[k]
                and best[k][n] > best[0][n] * SLOWER and best[k][n] - best[0][n] > MIN_MS]
        print(f"{name} {LABELS[k]}: {len(slow)} nodes slower than the reference: "
              + ", ".join(f"{n} ({op}) {m:.3f} vs {r:.3f}" for n, op, r, m in slow))


def main(argv: list[str]) -> None:
    names = argv[0].split(",")
    runs = int(argv[1]) if len(argv) > 1 else 7
    ops = set(argv[2].split(",")) if len(argv) > 2 else {"Add", "Concat", "Mul"}
    for name in names:
        compare(name, runs, ops)


if __name__ == "__main__":
    main(sys.argv[1:])

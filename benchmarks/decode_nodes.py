"""The detection head's decode nodes one by one (issue 11, session 14): each node's best time in a reference
and a numba session at one thread, run in turn with the order rotated (``_timing.best_node_ms_interleaved``),
for the Split/Mul/Add/Pow/Concat nodes and Conv_107, in plan order; then their sums and every node's.
``ops_vs_reference.py`` lists only the nodes over its line; this prints the ones near it too::

    taskset -c 0,1 python benchmarks/decode_nodes.py [runs=9] [ops=Mul,Split,Add,Pow,Concat]
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # the reference's BLAS at one thread (ops_vs_reference.py)
import kernelkit  # noqa: E402
import zoo  # noqa: E402
from _timing import best_node_ms_interleaved  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402


def main(argv: list[str]) -> int:
    from test_bench_numba import apply_bench_set

    apply_bench_set()
    runs = int(argv[0]) if argv else 9
    ops = set(argv[1].split(",")) if len(argv) > 1 else {"Mul", "Split", "Add", "Pow", "Concat"}
    proto = zoo.detection_head()
    model = convert(proto.SerializeToString())
    feed = zoo.feed(proto, 1)
    sessions = [kernelkit.Session(model, vendors=[v, "reference"], threads=1, profile=True)
                for v in ("reference", "numba")]
    ref, nb = best_node_ms_interleaved(sessions, feed, runs, rotate=True)
    shown = [0.0, 0.0]
    print("| node | reference us | numba us |\n|---|---:|---:|")
    for step in sessions[1].plan.kernel_steps():
        if step.op in ops or step.name == "Conv_107":
            r, n = ref.get(step.name, 0.0), nb.get(step.name, 0.0)
            shown[0] += r
            shown[1] += n
            print(f"| {step.name} | {r * 1e3:.1f} | {n * 1e3:.1f} |")
    print(f"these nodes: reference {shown[0]:.3f} ms, numba {shown[1]:.3f} ms; every node: reference "
          f"{sum(ref.values()):.3f}, numba {sum(nb.values()):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Where a model's Gemm head finds its weights (issue 11, session 13): the reference session, the numba
session and one per ``LABEL=SPEC`` variant (as nodes_ab.py's), at one thread, run in turn; each round every
session runs twice, once as it comes (``plain``: the weights where the layers before left them) and once
with its head's weights flushed from every cache (``clflush``) before the run (``flushed``: from memory).
If ``plain`` is as slow as ``flushed``, the head reads its weights from memory in the model. Prints per
session the head's best and median ms in both modes, and the ratio of the reference's plain median to
each session's plain median (above 1: faster than the reference).

    taskset -c 0,1 python benchmarks/head_in_model.py resnet18 [runs=15] [s4=kernels.fgemm.ROW_STREAMS=4 ...]
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodes_ab  # noqa: E402, I001  (first: sets the environment of ops_vs_reference.py, BLAS at one thread, before NumPy)
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from bench_head_state import flush  # noqa: E402


def head_arrays(sess) -> tuple[str, list]:
    """The Gemm head's node name and the weight arrays its kernel reads: the constant B and, for numba's
    row tiles, the packed copy."""
    step = next(s for s in sess.plan.kernel_steps() if s.op == "Gemm")
    arrays = [c for c in sess.plan.constants.values()
              if isinstance(c, np.ndarray) and c.ndim == 2 and c.size >= 1 << 16]
    const_b = getattr(step.kernel, "_const_b", None)
    packed = getattr(const_b, "packed", None)
    if packed is not None:
        arrays = [packed.bp]  # numba's head reads only its packed copy
    return step.name, [a.reshape(-1).view(np.uint8) for a in arrays if a.flags.c_contiguous]


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "resnet18"
    runs = int(argv[1]) if len(argv) > 1 else 15
    variants = [a.split("=", 1) for a in argv[2:]]
    _kinds, model, feed = nodes_ab.load(name)
    labels = ["reference", "numba"] + [v[0] for v in variants]
    sessions = [kernelkit.Session(model, vendors=["reference"], threads=1, profile=True),
                kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True)]
    sessions += [nodes_ab.variant_session(model, feed, spec, 1) for _, spec in variants]
    for sess in sessions:
        for _ in range(3):
            sess.run(None, feed)
    heads = [head_arrays(s) for s in sessions]
    if heads[0][1] == []:  # the reference's weight: the largest constant of its head (any 2-D one here)
        print("no contiguous head weight found in the reference session")
    times = {(i, mode): [] for i in range(len(sessions)) for mode in ("plain", "flushed")}
    for _ in range(runs):
        for i, sess in enumerate(sessions):
            node, arrays = heads[i]
            for mode in ("plain", "flushed"):
                if mode == "flushed":
                    for a in arrays:
                        flush(a)
                sess.reset_profile()
                sess.run(None, feed)
                times[(i, mode)].append(min(e[2] for e in sess.profile_events() if e[0] == node) * 1e3)
    ref_plain = float(np.median(times[(0, "plain")]))
    print(f"## {name}: the Gemm head ({heads[1][0]}), 1 thread, {runs} rounds in turn (ms)")
    print("| session | weights MiB | plain best | plain median | flushed best | flushed median | "
          "flushed / plain (medians) | reference / it (plain medians) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, label in enumerate(labels):
        p, f = times[(i, "plain")], times[(i, "flushed")]
        mib = sum(a.size for a in heads[i][1]) / 2**20
        print(f"| {label} | {mib:.2f} | {min(p):.3f} | {np.median(p):.3f} | {min(f):.3f} | {np.median(f):.3f} | "
              f"{np.median(f) / np.median(p):.3f} | {ref_plain / np.median(p):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

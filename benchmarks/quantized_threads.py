"""One quantized model at one and at two threads, per op type: kernelkit numba int8 (best call per
node over the runs, summed by op type; the two sessions' runs interleaved round by round) beside
onnxruntime int8 at the same thread counts. Shows which nodes gain from the second thread (whole-run
times: benchmarks/quantized.py --threads 1 / 2, one thread count per process).

    OPENBLAS_NUM_THREADS=1 taskset -c 0,1 python benchmarks/quantized_threads.py transformer [--runs 10]
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_qprofile", Path(__file__).parent / "quantized_profile.py")
qprof = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qprof)
qbench = qprof.qbench


def _by_op(rows) -> dict:
    out = collections.defaultdict(float)
    for row in rows:
        out[row[0]] += row[2]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=sorted(qbench.MODES))
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3, help="profile rounds per session, interleaved")
    p.add_argument("--small", action="store_true")
    args = p.parse_args(argv)
    name = args.model
    folder = Path(tempfile.mkdtemp())
    proto, path = qbench.quantized_model(name, args.small, folder, reduce_range=not qbench._has_vnni())
    feed = {"x": qbench._inputs(proto, 1, 0)}
    model = convert(path)
    threads = (1, 2)
    sessions = {t: kernelkit.Session(model, threads=t, profile=True, options={"numba_start": "eager"})
                for t in threads}
    best = {t: {} for t in threads}
    for _ in range(args.rounds):  # interleaved: a change in load reaches both thread counts
        for t in threads:
            for node, ms in qprof.best_node_ms(sessions[t], feed, args.runs).items():
                best[t][node] = min(best[t].get(node, np.inf), ms)
    kk = {}
    for t in threads:
        rows = []
        for step in sessions[t].plan.kernel_steps():
            rows.append((step.op, step.name, best[t].get(step.name, 0.0)))
        kk[t] = _by_op(rows)
    ox = {t: _by_op(qprof.ort_profile(path, feed, t, args.runs)) for t in threads}
    print(f"{name}: int8, batch 1, best call per node (ms), kernelkit {args.rounds} x {args.runs} runs per "
          f"thread count, interleaved; onnxruntime {args.runs} runs")
    print("| kernelkit op | 1 thread | 2 threads | 1t / 2t |\n|---|---:|---:|---:|")
    for op in sorted(kk[1], key=lambda o: -kk[1][o]):
        print(f"| {op} | {kk[1][op]:.3f} | {kk[2][op]:.3f} | {kk[1][op] / max(kk[2][op], 1e-9):.2f}x |")
    t1, t2 = sum(kk[1].values()), sum(kk[2].values())
    print(f"| node sum | {t1:.3f} | {t2:.3f} | {t1 / t2:.2f}x |")
    print("\n| onnxruntime op | 1 thread | 2 threads | 1t / 2t |\n|---|---:|---:|---:|")
    for op in sorted(ox[1], key=lambda o: -ox[1][o]):
        two = ox[2].get(op, 0.0)
        print(f"| {op} | {ox[1][op]:.3f} | {two:.3f} | {ox[1][op] / max(two, 1e-9):.2f}x |")
    o1, o2 = sum(ox[1].values()), sum(ox[2].values())
    print(f"| node sum | {o1:.3f} | {o2:.3f} | {o1 / o2:.2f}x |")
    from kernelkit_numba.shards import POOL

    print(f"\nshard pool: {POOL.stats} (backoffs: jobs run on one thread for a while after a sign of a busy core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

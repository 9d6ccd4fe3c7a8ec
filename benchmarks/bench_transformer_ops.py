"""Where the transformer's and the MLP's time goes on the numba backend, measured so that a shared,
loaded machine still gives usable figures (docs/numba.md, "The transformer and the MLP"):

1. GEMM tiles run serially, relative to one ``np.matmul`` (the cost of cutting a product for the pool);
2. per-op sums of per-node minima (``Session(profile=True)``), numba with and without
   ``fuse_attention``, next to onnxruntime's profiler (same minima, per node);
3. main-thread CPU time per run (minimum) at 1 and 2 threads, and onnxruntime's at 1 thread.

    python benchmarks/bench_transformer_ops.py [models] [rounds]     # default: transformer,mlp 15
"""
from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def tile_costs(rounds: int = 100) -> None:
    from kernelkit_numba.kernels.conv import _edge
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")
    rng = np.random.default_rng(0)
    grids = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2)]
    print("GEMM cut into (row, column) tiles, run serially, relative to one np.matmul (min of", rounds, "):")
    for m, k, n in [(128, 256, 256), (128, 256, 1024), (128, 1024, 256), (64, 784, 1024), (64, 1024, 1024)]:
        a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        out = np.empty((m, n), np.float32)
        times = {g: [] for g in grids}
        for _ in range(rounds):
            for rows, cols in grids:
                t0 = time.perf_counter()
                for t in range(rows * cols):
                    mt, pt = divmod(t, cols)
                    r0, r1, c0, c1 = mt * m // rows, (mt + 1) * m // rows, _edge(pt, cols, n), _edge(pt + 1, cols, n)
                    np.matmul(a[r0:r1], b[:, c0:c1], out=out[r0:r1, c0:c1])
                times[(rows, cols)].append(time.perf_counter() - t0)
        base = min(times[(1, 1)])
        cells = " ".join(f"{g[0]}x{g[1]} {min(v) / base:.2f}" for g, v in times.items() if g != (1, 1))
        print(f"  {m}x{k}x{n} ({base * 1e3:.3f} ms): {cells}")


def _node_minima(sessions: dict, feed, rounds: int) -> dict:
    """Per-op sums of per-node minima for each session, the sessions run in turn each round."""
    best = {label: collections.defaultdict(lambda: float("inf")) for label in sessions}
    for _ in range(rounds):
        for label, sess in sessions.items():
            sess.reset_profile()
            sess.run(None, feed)
            for row in sess.profile():
                key = (row["node"], row["op"])
                best[label][key] = min(best[label][key], row["total_ms"])
    out = {}
    for label, minima in best.items():
        by_op: dict = collections.defaultdict(float)
        for (_, op), ms in minima.items():
            by_op[op] += ms
        out[label] = dict(sorted(by_op.items(), key=lambda kv: -kv[1]))
    return out


def _ort_node_minima(proto, feed, threads: int, rounds: int) -> dict:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling, opts.profile_file_prefix = True, os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(rounds + 2):
        sess.run(None, feed)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    best: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            key = (e["name"], e["args"]["op_name"])
            best[key] = min(best.get(key, float("inf")), e["dur"] / 1e3)
    by_op: dict = collections.defaultdict(float)
    for (_, op), ms in best.items():
        by_op[op] += ms
    return dict(sorted(by_op.items(), key=lambda kv: -kv[1]))


def _cpu_minimum(run, rounds: int) -> tuple[float, float]:
    """(main-thread CPU ms, whole-process CPU ms) per run, minima."""
    for _ in range(2):
        run()
    main, proc = [], []
    for _ in range(rounds):
        m0, p0 = time.thread_time(), time.process_time()
        run()
        main.append((time.thread_time() - m0) * 1e3)
        proc.append((time.process_time() - p0) * 1e3)
    return min(main), min(proc)


def model_report(name: str, rounds: int) -> None:
    import kernelkit
    from kernelkit.passes import passes
    from test_bench_numba import model_case, ort_session

    proto, model, feed, _ = model_case(name)
    without = [p.name for p in passes() if p.default and p.name != "fuse_attention"]
    fmt = lambda d: ", ".join(f"{op} {ms:.2f}" for op, ms in d.items())  # noqa: E731
    for threads in (1, 2):
        fused = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=threads, profile=True)
        plain = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=threads,
                                  profile=True, passes=without)
        for sess in (fused, plain):
            for _ in range(2):
                sess.run(None, feed)
        for label, ops in _node_minima({"numba": fused, "numba, no fuse_attention": plain}, feed, rounds).items():
            print(f"{name} {threads}t {label}: per-node minima {sum(ops.values()):.2f} ms: {fmt(ops)}")
        ops = _ort_node_minima(proto, feed, threads, rounds)
        print(f"{name} {threads}t onnxruntime: per-node minima {sum(ops.values()):.2f} ms: {fmt(ops)}")
    one = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1)
    two = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=2)
    ort1 = ort_session(proto, 1)
    for label, sess in (("numba 1t", one), ("numba 2t", two), ("onnxruntime 1t", ort1)):
        def run(sess=sess):
            sess.run(None, feed)

        main, proc = _cpu_minimum(run, rounds)
        print(f"{name} {label}: CPU per run, main thread {main:.2f} ms, whole process {proc:.2f} ms")


if __name__ == "__main__":
    models = sys.argv[1].split(",") if len(sys.argv) > 1 else ["transformer", "mlp"]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    tile_costs()
    for model_name in models:
        model_report(model_name, rounds)

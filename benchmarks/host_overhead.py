"""Host cost per node and session build time on a chain of Relu nodes (issue 10's targets).

    python benchmarks/host_overhead.py                 # 1,000-node chain, reference and numba
    python benchmarks/host_overhead.py --build 20000   # also time building a 20,000-node chain
    python benchmarks/host_overhead.py --op Add --batch N --build   # an Add chain, a symbolic batch

Per-node cost = wall time of one run of the chain / number of nodes, on a (1, 16) float32 tensor,
1 thread (``Session(threads=1)``): the minimum and the median of ``--repeats`` runs, and the
minimum CPU time of the running thread (``time.thread_time``), which on a shared, loaded machine is
the steadier figure (it leaves out time spent waiting for a core). Build time: GraphBuilder, then
Session.
"""
from __future__ import annotations

import argparse
import statistics
import time

import kernelkit as kk
import numpy as np


def chain(n: int, op: str = "Relu", batch=1) -> kk.Model:
    """``n`` nodes of ``op`` on a (batch, 16) input (a name: a symbolic batch, fed 1); Add adds the
    running value to itself."""
    g = kk.GraphBuilder(f"{op.lower()}{n}")
    x = g.input("x", (batch, 16), "float32")
    for _ in range(n):
        x = g.op(op, *([x, x] if op == "Add" else [x]))
    g.output(x)
    return g.build()


def per_node_us(model: kk.Model, vendor: str, repeats: int) -> tuple[float, float, float]:
    sess = kk.Session(model, vendors=[vendor], fallback=False, threads=1)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}
    for _ in range(3):
        sess.run(None, feeds)
    times, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.thread_time(), time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    n = len(model.graph.nodes)
    return min(times) / n * 1e6, statistics.median(times) / n * 1e6, min(cpu) / n * 1e6


def build_s(n: int) -> tuple[float, float, float]:
    """Seconds: GraphBuilder + Session wall time, GraphBuilder and Session thread CPU time."""
    c0, t0 = time.thread_time(), time.perf_counter()
    model = chain(n)
    c1 = time.thread_time()
    kk.Session(model, vendors=["reference"], threads=1)
    return time.perf_counter() - t0, c1 - c0, time.thread_time() - c1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--build", type=int, nargs="*", default=[2000])
    ap.add_argument("--vendors", nargs="*", default=["reference", "numba"])
    ap.add_argument("--op", default="Relu", choices=["Relu", "Add"])
    ap.add_argument("--batch", default="1", help="the input's first dim: 1, or a name (symbolic, fed 1)")
    args = ap.parse_args()
    batch = int(args.batch) if args.batch.isdigit() else args.batch
    model = chain(args.nodes, args.op, batch)
    kk.load_backends()
    print(f"host cost per node, {args.nodes}-node {args.op} chain on ({args.batch},16), 1 thread, "
          f"{args.repeats} runs (us)")
    print(f"{'vendor':<12}{'cpu min':>9}{'wall min':>10}{'wall median':>13}")
    for v in args.vendors:
        best, median, cpu = per_node_us(model, v, args.repeats)
        print(f"{v:<12}{cpu:>9.2f}{best:>10.2f}{median:>13.2f}")
    rows = []
    for n in args.build:
        wall, builder, session = build_s(n)
        rows.append((f"build a {n}-node chain (GraphBuilder + Session)",
                     f"wall {wall:.2f} s (cpu: GraphBuilder {builder:.2f} s + Session {session:.2f} s)"))
    width = max((len(r[0]) for r in rows), default=0)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")


if __name__ == "__main__":
    main()

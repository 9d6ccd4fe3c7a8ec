"""Host cost per node and session build time on a chain of Relu nodes (issue 10's targets).

    python benchmarks/host_overhead.py                 # 1,000-node chain, reference and numba
    python benchmarks/host_overhead.py --build 20000   # also time building a 20,000-node chain

Per-node cost = median wall time of one run of the chain / number of nodes, on a (1, 16) float32
tensor, 1 thread (``Session(threads=1)``). Build time = GraphBuilder + Session construction.
"""
from __future__ import annotations

import argparse
import statistics
import time

import kernelkit as kk
import numpy as np


def chain(n: int) -> kk.Model:
    g = kk.GraphBuilder(f"relu{n}")
    x = g.input("x", (1, 16), "float32")
    for _ in range(n):
        x = g.op("Relu", x)
    g.output(x)
    return g.build()


def per_node_us(model: kk.Model, vendor: str, repeats: int) -> float:
    sess = kk.Session(model, vendors=[vendor], fallback=False, threads=1)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}
    for _ in range(3):
        sess.run(None, feeds)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / len(model.graph.nodes) * 1e6


def build_s(n: int) -> float:
    t0 = time.perf_counter()
    kk.Session(chain(n), vendors=["reference"], threads=1)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--build", type=int, nargs="*", default=[2000])
    ap.add_argument("--vendors", nargs="*", default=["reference", "numba"])
    args = ap.parse_args()
    model = chain(args.nodes)
    rows = [(f"host cost per node, {v}, {args.nodes}-node Relu chain (1,16), 1 thread",
             f"{per_node_us(model, v, args.repeats):.2f} us") for v in args.vendors]
    rows += [(f"build a {n}-node chain (GraphBuilder + Session)", f"{build_s(n):.2f} s") for n in args.build]
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")


if __name__ == "__main__":
    main()

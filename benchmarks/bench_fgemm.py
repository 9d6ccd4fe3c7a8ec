"""The float32 GEMM micro-kernels with a constant B (kernels/fgemm.py) against np.dot (OpenBLAS) and
onnxruntime's MatMul node (MLAS, B prepacked as a constant), per shape of the MLP and the
transformer: GFLOP/s, wall time, best of ``rounds``, calls interleaved and the order rotated every
round (whichever runs after another finds its data out of cache).

    python benchmarks/bench_fgemm.py [rounds] [threads] [shapes]    # default: 30 1, every shape
    shapes: "64x784x1024,128x256x1024" (M x K x N)
    python benchmarks/bench_fgemm.py mlp [rounds]                    # the MLP's per-run host cost

``mlp``: the benchmark MLP (batch 64) through a numba Session at one thread against its three
products called directly (fgemm.gemm with bias and Relu, the last layer np.dot + bias as the Gemm
kernel runs it): the difference is what the session and the kernels' Python cost per run (main-thread
CPU time, minima, interleaved).

Columns: each fgemm variant this CPU has (the first also with VARIATIONS: K chunks of 256, A packed
into row panels first instead of broadcast from its own rows, row blocks of 64 KiB / 1 MiB of A per
K chunk instead of 256 KiB, avx512 tiles of 12 rows instead of 8, no prefetch of the next panel or
a line of it every K step (PREFETCH 0 / 16); at 2+ threads also cut into 4 shards a thread instead of
one or two), np.dot, ORT, and what ``fgemm.kind_for`` picks by default (``BLAS``: the Gemm kernel keeps np.matmul).
"""
from __future__ import annotations

import sys
import time

import numpy as np
import onnxruntime as ort
from kernelkit_numba import config
from kernelkit_numba.kernels import fgemm, ftile
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

# the first variant again with one setting of fgemm changed: (label, attribute, value)
VARIATIONS = [("kc256", "KC", 256), ("packed A", "DIRECT_A", False), ("blk 64K", "BLOCK_BYTES", 1 << 16),
              ("blk 1M", "BLOCK_BYTES", 1 << 20), ("12x32", "MR", {**fgemm.MR, 2: 12}),
              ("kc384", "KC", 384), ("kc512", "KC", 512),
              ("12x32 kc256", ("MR", "KC"), ({**fgemm.MR, 2: 12}, 256)),
              ("12x32 packed A", ("MR", "DIRECT_A"), ({**fgemm.MR, 2: 12}, False)),
              ("pf0", "PREFETCH", 0), ("pf16", "PREFETCH", 16)]  # 12x32: 8-row tiles last
SHAPES = [(64, 784, 1024), (64, 1024, 1024), (64, 1024, 10), (128, 256, 256), (128, 256, 1024), (128, 1024, 256),
          (1024, 256, 256), (1024, 256, 1024), (1024, 1024, 256)]


def ort_matmul(b: np.ndarray, threads: int):
    m = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", b.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", b.shape[1]])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", [m], [y],
                              [numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)  # ORT 1.30: <= 13
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def measure(m: int, k: int, n: int, kinds: list, threads: int, rounds: int, rng) -> dict:
    """Best wall seconds of each contender on one shape."""
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    out = np.empty((m, n), np.float32)
    sess = ort_matmul(b, threads)
    fns = {}
    for name in kinds:
        kind = ftile.KIND[name]
        packed = fgemm.Packed(b, b, kind)
        fns[name] = lambda kind=kind, packed=packed: fgemm.gemm(kind, packed, a, out)
        if name == kinds[0]:
            for label, attr, value in VARIATIONS:
                def forced(kind=kind, packed=packed, attr=attr, value=value):
                    attrs, values = (attr, value) if isinstance(attr, tuple) else ((attr,), (value,))
                    was = [getattr(fgemm, x) for x in attrs]
                    for x, v in zip(attrs, values):
                        setattr(fgemm, x, v)
                    try:
                        fgemm.gemm(kind, packed, a, out)
                    finally:
                        for x, v in zip(attrs, was):
                            setattr(fgemm, x, v)
                fns[f"{name} {label}"] = forced
    if threads > 1 and kinds:  # more shards than threads: the caller absorbs a late worker
        kind0 = ftile.KIND[kinds[0]]
        packed0 = fgemm.Packed(b, b, kind0)
        fns[f"{kinds[0]} x4 shards"] = lambda: fgemm.gemm(kind0, packed0, a, out, shards=4 * threads)
    fns["np.dot"] = lambda: np.dot(a, b, out=out)
    fns["ORT"] = lambda: sess.run(None, {"a": a})
    best = dict.fromkeys(fns, np.inf)
    names = list(fns)
    with config.num_threads(threads):
        for f in fns.values():
            f()
            f()
        for i in range(rounds):
            for name in names[i % len(names):] + names[:i % len(names)]:
                t0 = time.perf_counter()
                fns[name]()
                best[name] = min(best[name], time.perf_counter() - t0)
    return best


def mlp_overhead(rounds: int) -> None:
    import os

    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kernelkit
    from kernelkit_numba.kernels import epilogue
    from test_bench_numba import model_case

    threadpool_limits(1, user_api="blas")
    proto, model, feed, _ = model_case("mlp")
    sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1)
    x = next(iter(feed.values()))
    mats = [w for w in map(numpy_helper.to_array, proto.graph.initializer) if w.ndim == 2]  # (out, in): transB
    kind = fgemm.kind_for(64, 784, 1024)
    layers = []
    for w in mats:
        b2 = w.T
        use = kind if kind is not None and fgemm.kind_for(64, b2.shape[0], b2.shape[1]) is not None else None
        layers.append((use, fgemm.Packed(w, b2, use) if use is not None else None, b2,
                       np.zeros(b2.shape[1], np.float32)))
    bufs = [np.empty((64, b2.shape[1]), np.float32) for _, _, b2, _ in layers]
    f = np.float32

    def direct():
        h = x
        for i, (use, packed, b2, bias) in enumerate(layers):
            code = epilogue.CLIP if i < len(layers) - 1 else epilogue.NONE
            if use is None:
                np.matmul(h, b2, out=bufs[i])
                bufs[i] += bias
            else:
                fgemm.gemm(use, packed, h, bufs[i], 1.0, bias, code, f(0), f(np.inf))
            h = bufs[i]

    fns = {"session": lambda: sess.run(None, feed), "direct": direct}
    best = dict.fromkeys(fns, np.inf)
    for f_ in fns.values():
        f_()
        f_()
    with config.num_threads(1):
        for _ in range(rounds):
            for name, f_ in fns.items():
                t0 = time.thread_time()
                f_()
                best[name] = min(best[name], time.thread_time() - t0)
    print(f"MLP b64, 1 thread, main-thread CPU ms (min of {rounds}): session {best['session'] * 1e3:.3f}, "
          f"kernels called directly {best['direct'] * 1e3:.3f}, host cost per run "
          f"{(best['session'] - best['direct']) * 1e6:.0f} us")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "mlp":
        mlp_overhead(int(sys.argv[2]) if len(sys.argv) > 2 else 50)
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    shapes = SHAPES if len(sys.argv) <= 3 else [tuple(int(v) for v in s.split("x")) for s in sys.argv[3].split(",")]
    threadpool_limits(threads, user_api="blas")
    kinds = [n for n in ("avx512", "avx2") if ftile.available(n)]
    rng = np.random.default_rng(0)
    cols = [*kinds, *(f"{kinds[0]} {label}" for label, _, _ in VARIATIONS if kinds),
            *([f"{kinds[0]} x4 shards"] if threads > 1 and kinds else []), "np.dot", "ORT"]
    print(f"fgemm vs np.dot vs ORT MatMul, {threads} thread(s), GFLOP/s (best of {rounds} rounds, interleaved)")
    print("| M x K x N | " + " | ".join(cols) + " | best fgemm / np.dot | best fgemm / ORT | default |")
    print("|---|" + "---:|" * (len(cols) + 2) + "---|")
    for m, k, n in shapes:
        best = measure(m, k, n, kinds, threads, rounds, rng)
        flops = 2.0 * m * k * n
        rate = {name: flops / t / 1e9 for name, t in best.items()}
        top = max(rate[c] for c in cols if c not in ("np.dot", "ORT"))
        default = fgemm.kind_for(m, k, n)
        label = "BLAS" if default is None else next(x for x, v in ftile.KIND.items() if v == default)
        print(f"| {m} x {k} x {n} | " + " | ".join(f"{rate[c]:.0f}" for c in cols)
              + f" | {top / rate['np.dot']:.2f} | {top / rate['ORT']:.2f} | {label} |")


if __name__ == "__main__":
    main()

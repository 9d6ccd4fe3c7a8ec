"""One-row Gemm heads at one thread with the weights cold (issue 11, session 12): np.matmul (OpenBLAS's
matrix-vector product, the reference's and numba's call until now) against fgemm.row (the weights packed
once into 32-column panels, one pass over them on 1-row tiles, each K step prefetching the stream
``ahead`` steps ahead into L1), with a 32 MiB buffer written before each call (the weights out of the
caches, as after a network's convolutions) and without (hot). Interleaved in one process, a random order
each round; best and median microseconds per call, and the ratio of np.matmul's median to each.

    python benchmarks/bench_heads.py [rounds=300] [KxN,...] [aheads=0,16,32,64]
"""
from __future__ import annotations

import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402
from kernelkit_numba.kernels import fgemm, ftile  # noqa: E402

HEADS = [(512, 1000), (1280, 1000), (2048, 1000)]  # ResNet-18, MobileNetV2, ResNet-50
EVICT = np.zeros(8 << 20, np.float32)  # 32 MiB


def evict() -> None:
    EVICT[::16] += 1.0  # a write to every cache line



def head_case(rng, k_n: int, n_n: int, kind: int):
    """A 1 x k_n x n_n head: its weight (N, K) as exported (transB, read-only), input, bias, output, the
    float64 answer, the weight packed for ``kind`` and np.matmul + bias (the reference's call) into out."""
    w = (rng.standard_normal((n_n, k_n)) / np.sqrt(k_n)).astype(np.float32)
    w.flags.writeable = False
    x = rng.standard_normal((1, k_n)).astype(np.float32)
    bias = rng.standard_normal(n_n).astype(np.float32)
    out = np.empty((1, n_n), np.float32)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    packed = fgemm.Packed(w, w.T, kind)

    def blas(x=x, w=w, out=out, bias=bias):
        np.matmul(x, w.T, out=out)
        out += bias

    return w, x, bias, out, want, packed, blas

def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    heads = [tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else HEADS
    aheads = [int(v) for v in sys.argv[3].split(",")] if len(sys.argv) > 3 else [0, 16, 32, 64]
    kind, _forced = ftile.choice()
    kind = 2 if kind == fgemm.NARROW else kind
    rng = np.random.default_rng(0)
    fns, shape_of = {}, {}
    for k_n, n_n in heads:
        w, x, bias, out, want, packed, blas = head_case(rng, k_n, n_n, kind)
        name = f"1x{k_n}x{n_n}"
        entries = {"np.matmul": blas}
        for ahead in aheads:
            run = fgemm.row(kind, packed, 1.0, bias, ahead=ahead)
            run(x, out)
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
            entries[f"row a{ahead}"] = lambda run=run, x=x, out=out: run(x, out)
        for label, f in entries.items():
            for cold in (True, False):
                key = f"{name} {label} {'cold' if cold else 'hot'}"
                fns[key], shape_of[key] = (f, cold), name
    names = list(fns)
    times = {n: [] for n in names}
    order = np.random.default_rng(1)
    for f, _cold in fns.values():
        f()
    for _ in range(rounds):
        for i in order.permutation(len(names)):
            f, cold = fns[names[i]]
            if cold:
                evict()
            t0 = time.perf_counter()
            f()
            times[names[i]].append(time.perf_counter() - t0)
    print(f"one-row heads at one thread, kind {kind}, {rounds} interleaved rounds; us per call")
    print("| head | contender | best | median | np.matmul / it (medians) |")
    print("|---|---|---:|---:|---:|")
    for n in names:
        head, rest = n.split(" ", 1)
        temp = rest.rsplit(" ", 1)[1]
        base = float(np.median(times[f"{head} np.matmul {temp}"]))
        med = float(np.median(times[n]))
        print(f"| {head} | {rest} | {min(times[n]) * 1e6:.1f} | {med * 1e6:.1f} | {base / med:.3f} |")


if __name__ == "__main__":
    main()

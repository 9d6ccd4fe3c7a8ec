"""The MLP's float32 products at one thread with B cold (issue 11, session 10): fgemm's bound serial
call (kernels/fgemm.py, as Gemm runs it in the model) over ``sets`` weight sets of the same shape
called in turn, so that each call finds its B (3-4 MiB packed) out of L2 (sets x B beyond the L2:
from L3) or out of L3 (sets x B beyond the L3: from memory), against the same with one weight set
(B hot, as bench_fgemm.py), np.dot and onnxruntime's MatMul (one session per weight set).

    python benchmarks/bench_fgemm_cold.py [rounds] [sets,...] [shapes]   # default: 20 1,6,24 MLP shapes
    python benchmarks/bench_fgemm_cold.py mlp [rounds] [configs]          # the whole MLP b64, one process

``mlp``: the benchmark MLP (batch 64) at one thread as one numba Session per configuration (each
bound under its fgemm settings at its first run: Gemm binds fgemm's serial call then), onnxruntime
and the reference kernels, runs interleaved in one process (the Xeon's processes differ by 1.5x):
main-thread CPU ms, best and median over rounds, and each configuration's ratio to the first.

Contenders: fgemm's driver without the prefetch (``pf0``; the default until session 10), with
PREFETCH 16 / 4 (the first row tiles of each column panel prefetch the next panel into L2, a line
every step / every 4 steps), with K chunks of 256 / 512 (KC: each panel's chunk passes every row
tile from L1/L2); GFLOP/s from the best over rounds of one pass over the sets (mean per call),
contenders interleaved and their order rotated every round. A is one (M, K) matrix (in the model the
previous layer's output, in L2).
"""
from __future__ import annotations

import sys
import time

import numpy as np
from bench_fgemm import ort_matmul
from kernelkit_numba import config
from kernelkit_numba.kernels import fgemm, ftile
from threadpoolctl import threadpool_limits

# label: fgemm settings while binding (serial() reads KC and PREFETCH when it binds)
CONFIGS = {"pf0": {"PREFETCH": 0}, "pf16": {"PREFETCH": 16}, "pf4": {"PREFETCH": 4},
           "kc256": {"KC": 256, "PREFETCH": 0},
           "kc256 pf16": {"KC": 256, "PREFETCH": 16}, "kc512 pf16": {"KC": 512, "PREFETCH": 16}}
SHAPES = [(64, 784, 1024), (64, 1024, 1024)]


def bound(kind, packs, m_n, settings):
    was = {x: getattr(fgemm, x) for x in settings}
    for x, v in settings.items():
        setattr(fgemm, x, v)
    try:
        return [fgemm.serial(kind, p, m_n) for p in packs]
    finally:
        for x, v in was.items():
            setattr(fgemm, x, v)


def measure(m, k, n, sets, rounds, rng) -> dict:
    kind, _forced = ftile.choice()
    a = rng.standard_normal((m, k)).astype(np.float32)
    bs = [(rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32) for _ in range(sets)]
    packs = [fgemm.Packed(b, b, kind) for b in bs]
    out = np.empty((m, n), np.float32)
    fns = {}
    for label, settings in CONFIGS.items():
        runs = bound(kind, packs, m, settings)
        fns[label] = lambda runs=runs: [r(a, out) for r in runs]
    sessions = [ort_matmul(b, 1) for b in bs]
    fns["np.dot"] = lambda: [np.dot(a, b, out=out) for b in bs]
    fns["ORT"] = lambda: [s.run(None, {"a": a}) for s in sessions]
    want = a @ bs[-1]
    for label in CONFIGS:
        fns[label]()
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)
    best = dict.fromkeys(fns, np.inf)
    names = list(fns)
    for f in fns.values():
        f()
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            best[name] = min(best[name], (time.perf_counter() - t0) / sets)
    return best


def mlp(rounds: int, labels: list) -> None:
    import os

    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    import kernelkit
    from test_bench_numba import kernelkit_session, model_case, ort_session

    proto, model, feed, _ = model_case("mlp")
    fns = {}
    for label in labels:
        settings = CONFIGS[label]
        was = {x: getattr(fgemm, x) for x in settings}
        for x, v in settings.items():
            setattr(fgemm, x, v)
        try:
            sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1)
            sess.run(None, feed)  # binds the Gemm nodes' serial calls under these settings
        finally:
            for x, v in was.items():
                setattr(fgemm, x, v)
        fns[label] = lambda sess=sess: sess.run(None, feed)
    ort1 = ort_session(proto, 1)
    fns["ORT"] = lambda: ort1.run(None, feed)
    ref = kernelkit_session(model, "reference")
    fns["reference"] = lambda: ref.run(None, feed)
    want = fns["ORT"]()[0]
    for label in labels:
        np.testing.assert_allclose(fns[label]()[0], want, rtol=1e-4, atol=1e-5)
    times = {name: [] for name in fns}
    names = list(fns)
    for f in fns.values():
        f()
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.thread_time()
            fns[name]()
            times[name].append(time.thread_time() - t0)
    first = labels[0]
    print(f"MLP b64, 1 thread, main-thread CPU ms over {rounds} interleaved rounds")
    print("| runtime | best | median | median / " + first + " |")
    print("|---|---:|---:|---:|")
    for name in names:
        med = float(np.median(times[name]))
        print(f"| {name} | {min(times[name]) * 1e3:.3f} | {med * 1e3:.3f} | "
              f"{med / float(np.median(times[first])):.3f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "mlp":
        labels = sys.argv[3].split(",") if len(sys.argv) > 3 else ["pf0", "pf16", "pf4", "kc256", "kc256 pf16"]
        mlp(int(sys.argv[2]) if len(sys.argv) > 2 else 200, labels)
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    set_counts = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 6, 24]
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[3].split(",")] if len(sys.argv) > 3 else SHAPES
    threadpool_limits(1, user_api="blas")
    rng = np.random.default_rng(0)
    header = None
    with config.num_threads(1):
        for m, k, n in shapes:
            for sets in set_counts:
                best = measure(m, k, n, sets, rounds, rng)
                if header is None:
                    header = list(best)
                    print("| M x K x N | sets (MiB of B) | " + " | ".join(header) + " |")
                    print("|---|---:|" + "---:|" * len(header))
                gf = [2.0 * m * k * n / best[h] / 1e9 for h in header]
                mib = sets * k * n * 4 / 2 ** 20
                print(f"| {m} x {k} x {n} | {sets} ({mib:.0f}) | " + " | ".join(f"{g:.0f}" for g in gf) + " |",
                      flush=True)
    print("GFLOP/s at one thread, best of", rounds, "rounds (mean per call over the sets)")


if __name__ == "__main__":
    main()

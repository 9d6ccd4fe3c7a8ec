"""One convolution at 1 and 2 threads, interleaved, and how its 2-thread run was cut into shards
(which thread ran how many, for how long): finds the layers whose parallel path does not scale
(docs/numba.md, "Two threads (issue 11, session 5)").

    python benchmarks/bench_conv_threads.py [rounds=30] [VARIANT ...]
    KK_MODELS=resnet18,resnet50 python benchmarks/bench_conv_threads.py ...   # whole models instead

A VARIANT such as ``conv._GEMM_TILES_PER_THREAD=2,winograd._TRANSFORM_WORK=160`` sets constants of
``kernelkit_numba.kernels`` modules for an extra 2-thread column, timed interleaved with the default
(``pool.backoff=0`` sets an attribute of the shard pool, ``shards.POOL``, instead).
``KK_NO_BACKOFF=1``: the pool never backs off (on a box loaded by other jobs a back-off would leave
the 2-thread column at one thread); the pool's counters (jobs, serial jobs, stalls, misses,
back-offs) are printed after each model.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit as kk  # noqa: E402
from kernelkit_numba import kernels, shards  # noqa: E402

SHAPES = [  # (input, weight, stride, pad): ResNet-18/50 layers whose 2-thread profile did not scale
    ((1, 128, 28, 28), (512, 128, 1, 1), 1, 0),
    ((1, 256, 14, 14), (1024, 256, 1, 1), 1, 0),
    ((1, 1024, 14, 14), (256, 1024, 1, 1), 1, 0),
    ((1, 64, 56, 56), (256, 64, 1, 1), 1, 0),
    ((1, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    ((1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ((1, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    ((1, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    ((1, 128, 56, 56), (128, 128, 3, 3), 2, 1),
    ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3),  # the stem
    ((1, 64, 56, 56), (128, 64, 3, 3), 2, 1),  # ResNet-18's stride-2 layers
    ((1, 128, 28, 28), (256, 128, 3, 3), 2, 1),
    ((1, 256, 14, 14), (512, 256, 3, 3), 2, 1),
    ((1, 128, 28, 28), (256, 128, 1, 1), 2, 0),
]


def model(xs, ws, s, p, rng):
    g = kk.GraphBuilder("conv")
    x = g.input("x", xs, "float32")
    w = g.constant((rng.standard_normal(ws) * 0.05).astype(np.float32))
    b = g.constant(rng.standard_normal(ws[0]).astype(np.float32))
    g.output(g.op("Relu", g.op("Conv", x, w, b, pads=(p,) * 4, strides=(s, s)), name="y"))
    return g.build()


def parse(variant: str) -> dict:
    out = {}
    for item in filter(None, variant.split(",")):
        name, value = item.split("=")
        module, attr = name.split(".")
        out[(module, attr)] = float(value) if "." in value else int(value)
    return out


def apply(settings: dict) -> dict:
    old = {}
    for (module, attr), value in settings.items():
        mod = shards.POOL if module == "pool" else getattr(kernels, module)
        old[(module, attr)] = getattr(mod, attr)
        setattr(mod, attr, value)
    return old


def models(rounds: int, variants: list, names: list) -> None:
    """Whole benchmark models at 1 and 2 threads, and each variant at 1 and 2, interleaved, median ms."""
    import statistics

    from bench_e2e_interleaved import batched

    settings = dict(zip(variants, (parse(v) for v in variants)))
    print("| model | 1t ms | 2t ms | 1t/2t |" + "".join(f" 1t {v} ms | 2t that ms | 1t/2t that |" for v in variants))
    print("|---|---:|---:|---:|" + "---:|---:|---:|" * len(variants))
    for name in names:
        _, m, feed = batched(name, 1)
        sess = {t: kk.Session(m, vendors=["numba"], threads=t) for t in (1, 2)}
        cases = [(t, None) for t in (1, 2)] + [(t, v) for v in variants for t in (1, 2)]
        for t, v in cases:
            old = apply(settings[v]) if v else {}
            for _ in range(3):
                sess[t].run(None, feed)
            apply(old)
        times = {c: [] for c in cases}
        for _ in range(rounds):
            for t, v in cases:
                old = apply(settings[v]) if v else {}
                t0 = time.perf_counter()
                sess[t].run(None, feed)
                times[(t, v)].append(time.perf_counter() - t0)
                apply(old)
        med = {k: statistics.median(x) * 1e3 for k, x in times.items()}
        print(f"| {name} | {med[(1, None)]:.2f} | {med[(2, None)]:.2f} | {med[(1, None)] / med[(2, None)]:.2f} |"
              + "".join(f" {med[(1, v)]:.2f} | {med[(2, v)]:.2f} | {med[(1, v)] / med[(2, v)]:.2f} |"
                        for v in variants), flush=True)
        print(f"pool {name}: {shards.POOL.stats}", flush=True)


def main(rounds: int, variants: list) -> None:
    """Each layer of SHAPES at 1 and 2 threads (best ms), each variant at 1 and 2 threads too, all
    interleaved round by round; then the shard trace of 5 runs at 2 threads with the defaults."""
    rng = np.random.default_rng(0)
    extra = "".join(f" 1t {v} | 2t that | 1t/2t that |" for v in variants)
    print("| input | weight | s | 1t ms | 2t ms | 1t/2t | jobs/run | shards (main, helper) | busy ms (main, helper) |"
          + extra)
    print("|---|---|---:|---:|---:|---:|---:|---|---|" + "---:|---:|---:|" * len(variants))
    settings = dict(zip(variants, (parse(v) for v in variants)))
    cases = [(t, None) for t in (1, 2)] + [(t, v) for v in variants for t in (1, 2)]
    for xs, ws, s, p in SHAPES:
        m = model(xs, ws, s, p, rng)
        xv = rng.standard_normal(xs).astype(np.float32)
        sess = {t: kk.Session(m, vendors=["numba"], threads=t) for t in (1, 2)}
        for t, v in cases:
            old = apply(settings[v]) if v else {}
            for _ in range(3):
                sess[t].run(None, {"x": xv})
            apply(old)
        best = dict.fromkeys(cases, 1e9)
        for _ in range(rounds):
            for t, v in cases:
                old = apply(settings[v]) if v else {}
                t0 = time.perf_counter()
                sess[t].run(None, {"x": xv})
                best[(t, v)] = min(best[(t, v)], time.perf_counter() - t0)
                apply(old)
        shards.POOL.trace = []
        for _ in range(5):
            sess[2].run(None, {"x": xv})
        trace, shards.POOL.trace = shards.POOL.trace, None
        per = {}
        for r in trace:
            if r[1] >= 0:
                n, ms = per.get(r[2], (0, 0.0))
                per[r[2]] = (n + 1, ms + (r[4] - r[3]) * 1e3)
        jobs = sum(1 for r in trace if r[1] < 0) / 5
        names = sorted(per)
        b1, b2 = best[(1, None)], best[(2, None)]
        print(f"| {'x'.join(map(str, xs[1:]))} | {'x'.join(map(str, ws))} | {s} | {b1 * 1e3:.3f} | "
              f"{b2 * 1e3:.3f} | {b1 / b2:.2f} | {jobs:.0f} | "
              f"{', '.join(f'{per[n][0] / 5:.0f}' for n in names)} | "
              f"{', '.join(f'{per[n][1] / 5:.3f}' for n in names)} |"
              + "".join(f" {best[(1, v)] * 1e3:.3f} | {best[(2, v)] * 1e3:.3f} | {best[(1, v)] / best[(2, v)]:.2f} |"
                        for v in variants), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("KK_NO_BACKOFF") == "1":
        shards.POOL.backoff = False
    if os.environ.get("KK_MODELS"):
        models(int(sys.argv[1]) if len(sys.argv) > 1 else 30, sys.argv[2:], os.environ["KK_MODELS"].split(","))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 30, sys.argv[2:])

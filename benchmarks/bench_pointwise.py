"""MobileNetV2's 1x1 convolutions as GEMM shapes (M output channels x K input channels x pixels) on
the float32 micro-kernels alone (kernels/ftile.py), one thread, weights packed and the input made
beforehand, Relu6 fused: the rows tiles reading the NCHW input in place (``rows``), the same with
each block's rows copied into tile order first (``pack``), and the cols tiles (``cols``: maps of at
most 64 pixels, M a multiple of 16); ms, best of ``reps`` rounds, calls interleaved (wall time). The
last column is the tile conv.py picks. (In a model the previous node leaves its output in cache:
``bench_session_overhead.py`` times the same calls in sequence, next to onnxruntime's profile.)

    python benchmarks/bench_pointwise.py [reps=30] [variants=rows,pack,cols]
"""
from __future__ import annotations

import sys
import time

import numpy as np
from kernelkit_numba import config
from kernelkit_numba.kernels import conv as nconv
from kernelkit_numba.kernels import ftile

# (projection or expansion, M, K, pixels)
SHAPES = [("p", 16, 32, 12544), ("p", 24, 96, 3136), ("p", 24, 144, 3136), ("p", 32, 144, 784), ("p", 32, 192, 784),
          ("p", 64, 192, 196), ("p", 64, 384, 196), ("p", 96, 384, 196), ("p", 96, 576, 196), ("p", 160, 576, 49),
          ("p", 160, 960, 49), ("p", 320, 960, 49), ("e", 96, 16, 12544), ("e", 144, 24, 3136), ("e", 192, 32, 784),
          ("e", 384, 64, 196), ("e", 576, 96, 196), ("e", 960, 160, 49), ("e", 1280, 320, 49)]


def call(kind, variant, m, k, n, rng):
    """A no-argument call of one product on ``variant``'s tiles, or None where they do not apply."""
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = config.readonly(rng.standard_normal(k * n).astype(np.float32))
    y = np.empty(m * n, np.float32)
    bias = config.readonly(np.zeros(m, np.float32))
    z = config.readonly(np.zeros(1, np.float32))
    lo, hi = np.float32(0), np.float32(6)
    if variant == "cols":
        if kind not in ftile.COLS_LANES or n > nconv.FTILE_COLS_MAX or m % ftile.COLS_LANES[kind]:
            return None
        width = ftile.COLS_WIDTH[kind]
        wp, driver = config.readonly(ftile.pack_weights(w, width)), ftile.cols_driver(kind)
        scratch = np.empty(ftile.scratch_size(kind, True, n), np.float32)
        return lambda: driver(wp, k, m, x, n, n, bias, z, False, lo, hi, y, n, ftile.COLS_KC, scratch, 0,
                              -(-m // width))
    block, blocks, groups, kc = ftile.plan(kind, m, k, n, 1)
    pack = variant == "pack"
    wp, driver = config.readonly(ftile.pack_weights(w, ftile.MR[kind])), ftile.rows_driver(kind)
    scratch = np.empty(ftile.scratch_size(kind, False, n, block, kc, True), np.float32)
    return lambda: driver(wp, k, m, x, 0, n, n, bias, bias, z, False, lo, hi, y, 0, n, block, groups, kc, pack,
                          scratch, 0, blocks * groups)


def main(argv) -> None:
    reps = int(argv[0]) if argv else 30
    variants = argv[1].split(",") if len(argv) > 1 else ["rows", "pack", "cols"]
    kind = ftile.select()
    if kind is None:
        print("no float32 tiles on this CPU")
        return
    rng = np.random.default_rng(0)
    print(f"{'layer':24s} " + " ".join(f"{v:>7s}" for v in variants) + "  picked")
    for t, m, k, n in SHAPES:
        fns = {v: call(kind, v, m, k, n, rng) for v in variants}
        best = dict.fromkeys(variants, float("inf"))
        for f in fns.values():
            if f is not None:
                f()
        for _ in range(reps):
            for v, f in fns.items():
                if f is not None:
                    t0 = time.perf_counter()
                    f()
                    best[v] = min(best[v], time.perf_counter() - t0)
        cells = " ".join(f"{best[v] * 1e3:7.3f}" if fns[v] is not None else "      -" for v in variants)
        picked = "cols" if nconv.ftile_cols(kind, m, n, k) else "rows"
        print(f"{t} {m:4d} x {k:4d} x {n:5d}     {cells}  {picked}")


if __name__ == "__main__":
    main(sys.argv[1:])

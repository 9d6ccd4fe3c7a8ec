"""The float32 conv micro-kernel (kernels/ftile.py) against the BLAS path it replaces and onnxruntime,
per dense Conv layer of ResNet-18/50 and MobileNetV2 at batch 1, one thread: a one-node model (Conv
+ bias + Relu, bench_conv_shapes.conv_model) run by one numba Session with KERNELKIT_F32_GEMM
switched between ``off`` (im2col/direct + OpenBLAS SGEMM + the epilogue pass, or gemm_nt_rows on 7x7
maps) and the CPU's variant (forced: the shape-class dispatch of conv.ftile_wins is skipped), next to
onnxruntime's node; calls interleaved, the order rotated every round (whichever runs after
onnxruntime finds its data out of cache: a fixed order biased the ratios by 10-15%), best of
``reps`` (CPU time of the process). GFLOP/s of the convolution (2 * M * K * pixels, the direct
count also for the Winograd layers, whose rows are a control: both numba columns run the same
Winograd path there). The last column is what ``auto`` picks for the layer.

    python benchmarks/bench_ftile.py [reps=20] [filter]
    python benchmarks/bench_ftile.py raw [reps=15]

``raw``: the micro-kernels alone on the layers' GEMM shapes (M x K x pixels, weights packed and
columns made beforehand): the rows tiles (ftile.conv_tiles) at K chunks of 128/256/512/all, the
cols tiles (ftile.conv_cols, channels a multiple of 16) and ``np.dot`` (OpenBLAS, one thread),
GFLOP/s, best of ``reps`` rounds in rotated order (wall time, one thread).
"""
from __future__ import annotations

import functools
import os
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
from bench_conv_shapes import SHAPES, conv_model  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import conv as nconv  # noqa: E402
from kernelkit_numba.kernels import ftile  # noqa: E402

EXTRA = [  # further dense layers of the three models (bench_conv_shapes.SHAPES has the others)
    ("r18 3x3/2 128->256", 128, 28, 256, 3, 2, 1),
    ("r18 3x3/2 256->512", 256, 14, 512, 3, 2, 1),
    ("r50 1x1 128->512@28", 128, 28, 512, 1, 1, 1),
    ("r50 1x1 512->128@28", 512, 28, 128, 1, 1, 1),
    ("r50 1x1 2048->512@7", 2048, 7, 512, 1, 1, 1),
    ("mb stem 3x3/2 3->32", 3, 224, 32, 3, 2, 1),
    ("mb 1x1 32->16@112", 32, 112, 16, 1, 1, 1),
    ("mb 1x1 32->192@28", 32, 28, 192, 1, 1, 1),
    ("mb 1x1 192->32@28", 192, 28, 32, 1, 1, 1),
    ("mb 1x1 576->96@14", 576, 14, 96, 1, 1, 1),
    ("mb 1x1 160->960@7", 160, 7, 960, 1, 1, 1),
    ("mb 1x1 960->320@7", 960, 7, 320, 1, 1, 1),
    ("mb 1x1 320->1280@7", 320, 7, 1280, 1, 1, 1),
]


def variant() -> str:
    for name in ("avx512", "avx2"):
        if ftile.available(name):
            return name
    return "generic"


def rotated_best_ms(fns: dict, reps: int) -> dict:
    """Best CPU time (ms) of each callable over ``reps`` rounds, the order rotated every round."""
    names = list(fns)
    best = dict.fromkeys(names, np.inf)
    for i in range(reps):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.process_time()
            fns[name]()
            best[name] = min(best[name], time.process_time() - t0)
    return {k: v * 1e3 for k, v in best.items()}


def layer(c, h, m, k, s, g, reps, forced):
    proto = conv_model(c, h, m, k, s, g)
    sess = kernelkit.Session(convert(proto), vendors=["numba", "reference"], threads=1)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    osess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
    feed = {"x": x}

    def with_env(value):
        def run():
            os.environ[ftile.ENV] = value
            return sess.run(None, feed)
        return run

    fns = {"blas": with_env("off"), "ftile": with_env(forced), "ORT": lambda: osess.run(None, feed)}
    outs = {name: f()[0] for name, f in fns.items()}
    np.testing.assert_allclose(outs["ftile"], outs["ORT"], rtol=1e-4, atol=1e-4)
    ms = rotated_best_ms(fns, reps)
    os.environ.pop(ftile.ENV, None)
    p = k // 2
    oh = (h + 2 * p - k) // s + 1
    ms["gflop"] = 2.0 * m * (c // g) * k * k * oh * oh / 1e9
    wino = k == 3 and s == 1 and g == 1
    ms["auto"] = c >= nconv.WINO_FTILE_MIN_C if wino else nconv.ftile_wins(k, k, s, s, m, c * k * k, oh * oh)
    return ms


def raw_fns(kind: int, m: int, k: int, n: int, kcs, rng) -> dict:
    """The callables of one GEMM shape: np.dot, the rows tiles at each K chunk, the cols tiles."""
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32).reshape(-1)
    out = np.empty((m, n), np.float32)
    flat = out.reshape(-1)
    b, zz = np.zeros(m, np.float32), np.zeros(1, np.float32)
    lo, hi = np.float32(0), np.float32(np.inf)
    fns = {"dot": lambda: np.dot(w, x.reshape(k, n), out=out)}
    wp = ftile.pack_weights(w, ftile.MR[kind])
    block, blocks, groups, _ = ftile.plan(kind, m, k, n, 1)

    scratch = np.empty(max(block * k, ftile.scratch_size(kind, True, n)), np.float32)

    def rows(kc, pack):
        return lambda: ftile.conv_tiles(kind, wp, k, m, x, 0, n, n, b, b, zz, False, lo, hi, flat, 0, n, block, groups,
                                        min(kc, k), pack, scratch, 0, blocks * groups)

    for kc in kcs:
        fns[kc] = rows(kc, False)
    fns["packed"] = rows(1 << 30, True)
    if kind in ftile.COLS_WIDTH and m % ftile.COLS_LANES[kind] == 0:
        wc = ftile.pack_weights(w, ftile.COLS_WIDTH[kind])
        panels = -(-m // ftile.COLS_WIDTH[kind])
        fns["cols"] = lambda: ftile.conv_cols(kind, wc, k, m, x, n, n, b, zz, False, lo, hi, flat, n, ftile.COLS_KC,
                                              scratch, 0, panels)
    return fns


def tile_shapes(reps: int) -> None:
    """Other register tilings of the rows tile, on full tiles only (each from ftile._tile_intrinsic
    in a small driver of this script): 8 x 32 (the one conv.py runs), 12 x 32, 6 x 64, 16 x 16; for
    the next round's choice on a CPU with two FMA ports per core (the Xeon)."""
    import numba

    if ftile.variant_name() != "avx512":
        return
    shapes = [(96, 16, 12544), (96, 64, 3136), (64, 256, 3136), (240, 256, 3136), (128, 576, 784), (384, 384, 784),
              (240, 1152, 784)]
    tilings = [(8, 2), (12, 2), (6, 4), (16, 1)]
    drivers = {}
    for mr, nvec in tilings:
        tile = ftile._tile_intrinsic("avx512", mr, nvec, False, False)

        def make(tile=tile, mr=mr, nr=16 * nvec):
            @numba.njit(fastmath=True)
            def drive(wp, k, m, x, n, bias, zz, lo, hi, out, block):
                for p0 in range(0, n - nr + 1, block):
                    for q in range(m // mr):
                        for t in range(p0, min(n, p0 + block) - nr + 1, nr):
                            tile(wp, q * k * mr, x, t, n, k, 1, bias, q * mr, zz, q * mr * n + t, n, lo, hi, out, mr,
                                 nr)
            return drive

        drivers[(mr, nvec)] = make()
    rng = np.random.default_rng(0)
    print("\nrows tilings, avx512, full tiles only (GFLOP/s, best of", reps, "):")
    print("| M x K x pixels | np.dot | " + " | ".join(f"{mr} x {16 * nv}" for mr, nv in tilings) + " |")
    print("|---|" + "---:|" * (len(tilings) + 1))
    for m, k, n in shapes:
        w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
        x = rng.standard_normal((k, n)).astype(np.float32)
        out = np.empty((m, n), np.float32)
        b, zz = np.zeros(m, np.float32), np.zeros(1, np.float32)
        lo, hi = np.float32(0), np.float32(np.inf)
        fns = {"dot": (lambda w=w, x=x, out=out: np.dot(w, x, out=out), 2.0 * m * k * n)}
        for (mr, nvec), drive in drivers.items():
            nr = 16 * nvec
            block = max(nr, ftile.BLOCK_BYTES // (4 * k) // nr * nr)
            args = (ftile.pack_weights(w, mr), k, m, x.reshape(-1), n, b, zz, lo, hi, out.reshape(-1), block)
            fns[(mr, nvec)] = (functools.partial(drive, *args), 2.0 * (m // mr * mr) * k * (n // nr * nr))
        for f, _ in fns.values():
            f()
        best = dict.fromkeys(fns, np.inf)
        names = list(fns)
        for i in range(reps):
            for name in names[i % len(names):] + names[:i % len(names)]:
                t0 = time.perf_counter()
                fns[name][0]()
                best[name] = min(best[name], time.perf_counter() - t0)
        rate = {key: fns[key][1] / v / 1e9 for key, v in best.items()}
        print(f"| {m} x {k} x {n} | {rate['dot']:.0f} | " + " | ".join(f"{rate[t]:.0f}" for t in tilings) + " |",
              flush=True)


def raw(reps: int) -> None:
    kind = ftile.KIND[variant()]
    rng = np.random.default_rng(0)
    shapes = []
    for _name, c, h, m, k, s, g in SHAPES + EXTRA:
        if g == 1:
            oh = (h + 2 * (k // 2) - k) // s + 1
            shapes.append((m, c * k * k, oh * oh))
    kcs = (128, 256, 512, 1 << 30)
    print(f"variant {variant()}; GFLOP/s at one thread (best of {reps}, wall time)")
    print("| M x K x pixels | np.dot | " + " | ".join(f"rows kc {kc if kc < 1 << 30 else 'all'}" for kc in kcs)
          + " | rows packed | cols |")
    print("|---|" + "---:|" * (len(kcs) + 3))
    for m, k, n in sorted(set(shapes)):
        fns = raw_fns(kind, m, k, n, kcs, rng)
        for f in fns.values():
            f()
        best = dict.fromkeys(fns, np.inf)
        names = list(fns)
        for i in range(reps):
            for name in names[i % len(names):] + names[:i % len(names)]:
                t0 = time.perf_counter()
                fns[name]()
                best[name] = min(best[name], time.perf_counter() - t0)
        rate = {key: 2.0 * m * k * n / v / 1e9 for key, v in best.items()}
        cols = f"{rate['cols']:.0f}" if "cols" in rate else "-"
        print(f"| {m} x {k} x {n} | {rate['dot']:.0f} | " + " | ".join(f"{rate[kc]:.0f}" for kc in kcs)
              + f" | {rate['packed']:.0f} | {cols} |", flush=True)


def main(argv):
    if argv and argv[0] == "raw":
        config.blas_single()
        raw(int(argv[1]) if len(argv) > 1 else 15)
        tile_shapes(int(argv[1]) if len(argv) > 1 else 15)
        return
    reps = int(argv[0]) if argv else 20
    pick = argv[1] if len(argv) > 1 else ""
    forced = variant()
    config.blas_single()
    print(f"variant {forced}; GFLOP/s at one thread (best of {reps}, CPU time)")
    print("| layer | BLAS path | ftile | ORT | ftile / BLAS | ftile / ORT | auto |")
    print("|---|---:|---:|---:|---:|---:|---|")
    with config.num_threads(1):
        for name, c, h, m, k, s, g in SHAPES + EXTRA:
            if g != 1 or (pick and pick not in name):
                continue
            ms = layer(c, h, m, k, s, g, reps, forced)
            rate = {key: ms["gflop"] / (ms[key] / 1e3) for key in ("blas", "ftile", "ORT")}
            print(f"| {name} | {rate['blas']:.0f} | {rate['ftile']:.0f} | {rate['ORT']:.0f} | "
                  f"{ms['blas'] / ms['ftile']:.2f} | {ms['ORT'] / ms['ftile']:.2f} | "
                  f"{'ftile' if ms['auto'] else 'BLAS'} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

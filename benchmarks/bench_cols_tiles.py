"""ftile's cols tiles alone on ResNet-50's 1x1 layers of 14x14 and 7x7 maps (M channels x K x pixels),
one thread: the tile shapes of ftile.COLS_SHAPES (3 x 7, the default; 4 x 6; 3 x 8) at K chunks of
512 (ftile.COLS_KC) down to 64, against onnxruntime's one-node Conv + Relu of the same shape and
np.dot. GFLOP/s (2 * M * K * pixels over the wall time, best of ``reps`` rounds, the calls of a
round in rotated order). ``cold``: before every call a 16 MiB buffer is written, so that the weights
come from L3 as in the model (the Xeon's L2 is 2 MiB). Issue 11, session 14 (docs/numba.md,
"ResNet-50's 1x1 and 3x3 layers at one thread").

    taskset -c 4 python benchmarks/bench_cols_tiles.py [reps=20] [hot|cold|both]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402
from kernelkit_numba.kernels import ftile  # noqa: E402

SHAPES = [(1024, 256, 196), (256, 1024, 196), (512, 1024, 196), (2048, 512, 49), (512, 2048, 49),
          (2048, 1024, 49)]  # the last: the 1x1/2 shortcut 1024 -> 2048 on its 7x7 subsampled input
CONFIGS = [((3, 7), 512), ((3, 7), 256), ((3, 7), 128), ((3, 7), 64), ((4, 6), 512), ((4, 6), 128),
           ((3, 8), 512), ((3, 8), 128)]
_FLUSH = np.ones(4 << 20, np.float32)  # 16 MiB


def _ort(m, k, n):
    """onnxruntime's one-node 1x1 Conv + Relu (bench_conv_shapes.conv_model) on a square map of n pixels."""
    import onnxruntime as ort
    from bench_conv_shapes import conv_model

    hw = int(round(n ** 0.5))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(conv_model(k, hw, m, 1, 1, 1).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    feed = {"x": np.random.default_rng(1).standard_normal((1, k, hw, hw)).astype(np.float32)}
    return lambda: sess.run(None, feed)


def fns_of(m: int, k: int, n: int, rng) -> dict:
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32).reshape(-1)
    out = np.empty(m * n, np.float32)
    b, zz = np.zeros(m, np.float32), np.zeros(1, np.float32)
    lo, hi = np.float32(0), np.float32(np.inf)
    want = np.maximum(w.astype(np.float64) @ x.reshape(k, n).astype(np.float64), 0)
    fns = {"np.dot": lambda: np.dot(w, x.reshape(k, n))}
    for (cv, mp), kc in CONFIGS:
        if m % 16 or (cv == 4 and m % 64):  # (3 x 7 and 3 x 8 have narrow tiles for a last panel of 16 or 32)
            continue
        drv = ftile.cols_shape_driver(cv, mp)
        wp = ftile.pack_weights(w, 16 * cv)
        scratch = np.empty(ftile.cols_shape_scratch(cv, mp, n), np.float32)
        panels = -(-m // (16 * cv))

        def run(drv=drv, wp=wp, kc=kc, scratch=scratch, panels=panels):
            drv(wp, k, m, x, n, n, b, zz, False, lo, hi, out, n, kc, scratch, 0, panels)

        run()
        np.testing.assert_allclose(out.reshape(m, n), want, rtol=2e-3, atol=2e-3)
        fns[f"{cv}x{mp} kc{kc}"] = run
    fns["ORT"] = _ort(m, k, n)
    return fns


def best_rates(fns: dict, flops: float, reps: int, cold: bool, flush=None, touch=()) -> dict:
    """GFLOP/s of each of ``fns`` (one call each, best of ``reps`` rounds, the order turned every round); cold:
    ``flush`` (default this module's 16 MiB) written before every call, then each array of ``touch`` read
    (an input that should be in the caches, as in the model)."""
    flush = _FLUSH if flush is None else flush
    names = list(fns)
    best = dict.fromkeys(names, np.inf)
    for f in fns.values():
        f()
    for i in range(reps):
        for name in names[i % len(names):] + names[:i % len(names)]:
            if cold:
                np.add(flush, 1.0, out=flush)
                for t in touch:
                    t.sum()
            t0 = time.perf_counter()
            fns[name]()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: flops / v / 1e9 for name, v in best.items()}


def main(argv: list[str]) -> int:
    reps = int(argv[0]) if argv else 20
    modes = {"hot": [False], "cold": [True], "both": [False, True]}[argv[1] if len(argv) > 1 else "both"]
    if ftile.variant_name() != "avx512":
        print("the cols tile shapes need avx512")
        return 0
    rng = np.random.default_rng(0)
    names = ["np.dot"] + [f"{cv}x{mp} kc{kc}" for (cv, mp), kc in CONFIGS] + ["ORT"]
    for cold in modes:
        print(f"\n{'cold' if cold else 'hot'}: GFLOP/s at one thread, best of {reps}")
        print("| M x K x pixels | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for m, k, n in SHAPES:
            rate = best_rates(fns_of(m, k, n, rng), 2.0 * m * k * n, reps, cold)
            print(f"| {m} x {k} x {n} | " + " | ".join(f"{rate[c]:.0f}" if c in rate else "-" for c in names) + " |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

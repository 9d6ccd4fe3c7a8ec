"""A/B of the blocked im2col + GEMM convolution settings (kernels/conv.py) at one thread, per layer
whose column matrix is packed in blocks (the 7x7/2 stem, the 3x3/2 layers, 3x3 at 7x7 maps): the
numba Conv node (a one-node Session, bias + Relu) under each variant of the module's constants,
calls interleaved (the order rotated each round) and the best of ``reps`` kept (wall time; the
variants alternate, so a busy machine hits each alike), with onnxruntime's node for scale.

    python benchmarks/bench_conv_blocks.py [reps=20] [filter]
"""
from __future__ import annotations

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
from kernelkit_numba.kernels import conv  # noqa: E402

VARIANTS = {  # name -> module constants of conv.py
    "gather": {"_PHASES_MIN_COLS": 1 << 30, "_COL_BLOCK_BYTES": 1 << 19},  # the element-gather packing
    "phases": {"_PHASES_MIN_COLS": 64, "_COL_BLOCK_BYTES": 1 << 19},
    "phases 1M": {"_PHASES_MIN_COLS": 64, "_COL_BLOCK_BYTES": 1 << 20},
    "phases 2M": {"_PHASES_MIN_COLS": 64, "_COL_BLOCK_BYTES": 1 << 21},
    "phases 4M": {"_PHASES_MIN_COLS": 64, "_COL_BLOCK_BYTES": 1 << 22},
}
LAYERS = ("stem", "3x3/2", "512@7")


def main(argv):
    reps = int(argv[0]) if argv else 20
    pick = argv[1] if len(argv) > 1 else ""
    config.blas_single()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    saved = {k: getattr(conv, k) for v in VARIANTS.values() for k in v}
    print(f"{'layer':24s} " + " ".join(f"{v:>10s}" for v in VARIANTS) + f" {'ORT':>8s}   (ms)")
    for name, c, h, m, k, s, g in SHAPES:
        if not any(t in name for t in LAYERS) or (pick and pick not in name):
            continue
        proto = conv_model(c, h, m, k, s, g)
        sess = kernelkit.Session(convert(proto), vendors=["numba", "reference"], threads=1)
        osess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        feed = {"x": np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)}
        want = osess.run(None, feed)[0]
        best = dict.fromkeys(list(VARIANTS) + ["ORT"], np.inf)
        try:
            for rep in range(reps + 1):
                names = list(VARIANTS)
                for v in names[rep % len(names):] + names[:rep % len(names)]:  # rotated: no variant always first
                    for key, val in VARIANTS[v].items():
                        setattr(conv, key, val)
                    t0 = time.perf_counter()
                    got = sess.run(None, feed)[0]
                    if rep:
                        best[v] = min(best[v], time.perf_counter() - t0)
                    else:
                        assert np.allclose(got, want, rtol=1e-3, atol=1e-3), (name, v)
                t0 = time.perf_counter()
                osess.run(None, feed)
                best["ORT"] = min(best["ORT"], time.perf_counter() - t0)
        finally:
            for key, val in saved.items():
                setattr(conv, key, val)
        print(f"{name:24s} " + " ".join(f"{best[v] * 1e3:10.3f}" for v in VARIANTS) + f" {best['ORT'] * 1e3:8.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])

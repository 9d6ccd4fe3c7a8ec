"""Where a dense convolution's time goes at one thread, per layer of ResNet-18/50 and MobileNetV2
(the shapes of bench_conv_shapes.py): the numba Conv node (a one-node Session), onnxruntime's node,
and, for the im2col + GEMM layers, the column packing alone (``_im2col``) and the GEMM alone
(``np.matmul`` of the weight matrix and the columns, BLAS at one thread). Calls interleaved, best
of ``reps`` (CPU time of the process); ms.

    python benchmarks/bench_conv_algos.py [reps=20] [filter]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
from _timing import best_cpu_ms  # noqa: E402
from bench_conv_shapes import SHAPES, conv_model  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import conv as nconv  # noqa: E402


def best_of(fns: dict, reps: int) -> dict:
    for f in fns.values():
        f()
    return best_cpu_ms(fns, reps)


def layer(c, h, m, k, s, g, reps):
    proto = conv_model(c, h, m, k, s, g)
    sess = kernelkit.Session(convert(proto), vendors=["numba", "reference"], threads=1)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    osess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
    feed = {"x": x}
    fns = {"numba": lambda: sess.run(None, feed), "ORT": lambda: osess.run(None, feed)}
    p = k // 2
    oh = (h + 2 * p - k) // s + 1
    if g == 1:
        wmat = np.random.default_rng(2).standard_normal((m, c * k * k)).astype(np.float32)
        col = np.empty((c * k * k, oh * oh), np.float32)
        ymat = np.empty((m, oh * oh), np.float32)
        fns["im2col"] = lambda: nconv._im2col(x[0], col, k, k, s, s, 1, 1, p, p, oh, oh, 0, c * k * k)
        fns["gemm"] = lambda: np.matmul(wmat, col, out=ymat)
    return best_of(fns, reps)


def main(argv):
    reps = int(argv[0]) if argv else 20
    pick = argv[1] if len(argv) > 1 else ""
    config.blas_single()
    print(f"{'layer':24s} {'numba':>8s} {'ORT':>8s} {'ratio':>6s} {'im2col':>8s} {'gemm':>8s}")
    with config.num_threads(1):
        for name, c, h, m, k, s, g in SHAPES:
            if pick and pick not in name:
                continue
            ms = layer(c, h, m, k, s, g, reps)
            extra = f" {ms['im2col']:8.3f} {ms['gemm']:8.3f}" if "gemm" in ms else ""
            print(f"{name:24s} {ms['numba']:8.3f} {ms['ORT']:8.3f} {ms['numba'] / ms['ORT']:6.2f}{extra}")


if __name__ == "__main__":
    main(sys.argv[1:])

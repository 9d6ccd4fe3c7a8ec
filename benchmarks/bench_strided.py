"""The strided convolutions of the ResNets (issue 11, session 10): one-node Conv + bias + Relu models,
numba with conv.DIRECT on (fdirect.py's direct convolution) and off (the paths before: the implicit
GEMM for the stem, the gather for 3x3/2 maps over 7x7, im2col + the cols tiles on 7x7 maps, F(2x2, 3x3)
Winograd for the stride-1 512@7 layers, which "direct" runs with conv.DIRECT_SMALL on) next to
onnxruntime, all at one thread (or ``threads``), calls interleaved and rotated, best of ``reps``
(wall time), so a noisy shared machine hits each alike. Checks both numba outputs against the
reference kernels first.

    python benchmarks/bench_strided.py [reps=30] [filter] [threads=1]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")

import kernelkit  # noqa: E402
import onnxruntime as ort  # noqa: E402
from bench_conv_shapes import conv_model  # noqa: E402
from kernelkit.testing import assert_close  # noqa: E402

# (name, C, H, M, k, stride)
SHAPES = [
    ("stem 7x7/2 3->64@224", 3, 224, 64, 7, 2),
    ("r18 3x3/2 64->128@56", 64, 56, 128, 3, 2),
    ("r18 3x3/2 128->256@28", 128, 28, 256, 3, 2),
    ("r18 3x3/2 256->512@14", 256, 14, 512, 3, 2),
    ("r50 3x3/2 128->128@56", 128, 56, 128, 3, 2),
    ("r50 3x3/2 256->256@28", 256, 28, 256, 3, 2),
    ("r50 3x3/2 512->512@14", 512, 14, 512, 3, 2),
    ("r18 3x3 512@7", 512, 7, 512, 3, 1),
]


def main(argv):
    reps = int(argv[0]) if argv else 30
    pick = argv[1] if len(argv) > 1 else ""
    threads = int(argv[2]) if len(argv) > 2 else 1
    from kernelkit_converters.onnx import convert
    from kernelkit_numba.kernels import conv as kconv

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    print(f"{'layer':24s} {'direct':>8s} {'before':>8s} {'ORT':>8s} {'dir/bef':>8s} {'dir/ORT':>8s} {'GF/s dir':>9s}"
          f" {'GF/s ORT':>9s}")
    sums = np.zeros(3)
    small = kconv.DIRECT_SMALL
    for name, c, h, m, k, s in SHAPES:
        if pick and pick not in name:
            continue
        proto = conv_model(c, h, m, k, s, 1)
        model = convert(proto)
        x = np.random.default_rng(1).standard_normal((1, c, h, h)).astype(np.float32)
        feed = {"x": x}
        kconv.DIRECT = False
        before = kernelkit.Session(model, vendors=["numba"], threads=threads)
        kconv.DIRECT = kconv.DIRECT_SMALL = True  # (DIRECT_SMALL: the stride-1 512@7 layer direct too)
        direct = kernelkit.Session(model, vendors=["numba"], threads=threads)
        ref = kernelkit.Session(model, vendors=["reference"]).run(None, feed)[0]
        osess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])

        def run_before(before=before, feed=feed):
            kconv.DIRECT = False
            before.run(None, feed)

        def run_direct(direct=direct, feed=feed):
            kconv.DIRECT = kconv.DIRECT_SMALL = True
            direct.run(None, feed)

        kconv.DIRECT = kconv.DIRECT_SMALL = True
        assert_close(direct.run(None, feed)[0], ref, "float32")
        kconv.DIRECT = False
        assert_close(before.run(None, feed)[0], ref, "float32")
        fns = [run_direct, run_before, lambda osess=osess, feed=feed: osess.run(None, feed)]
        best = [np.inf] * 3
        for r in range(reps):
            for i in range(3):
                j = (i + r) % 3
                t0 = time.perf_counter()
                fns[j]()
                best[j] = min(best[j], time.perf_counter() - t0)
        kconv.DIRECT, kconv.DIRECT_SMALL = True, small
        oh = (h + 2 * (k // 2) - k) // s + 1
        flops = 2.0 * m * c * k * k * oh * oh
        sums += best
        print(f"{name:24s} {best[0] * 1e3:8.3f} {best[1] * 1e3:8.3f} {best[2] * 1e3:8.3f} {best[0] / best[1]:8.2f} "
              f"{best[0] / best[2]:8.2f} {flops / best[0] / 1e9:9.1f} {flops / best[2] / 1e9:9.1f}", flush=True)
    print(f"{'sum':24s} {sums[0] * 1e3:8.3f} {sums[1] * 1e3:8.3f} {sums[2] * 1e3:8.3f} {sums[0] / sums[1]:8.2f} "
          f"{sums[0] / sums[2]:8.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

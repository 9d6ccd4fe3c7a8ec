"""Single Conv layers of the benchmark CNNs: the numba kernel next to onnxruntime (a one-node model
with bias and Relu), both at 1 thread, calls interleaved and the best of ``reps`` kept (CPU time of
the process), so that a noisy shared machine hits both sides alike.

    python benchmarks/bench_conv_shapes.py [reps=30] [filter]
"""
from __future__ import annotations

import os
import sys
import time

import kernelkit
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# steady state: numba kernels compile in the warm-up calls (not in the background while timed)
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")

# (name, C, H, M, k, stride, group): ResNet-18/50 and MobileNetV2 layers at batch 1
SHAPES = [
    ("stem 7x7/2", 3, 224, 64, 7, 2, 1),
    ("r18 3x3 64@56", 64, 56, 64, 3, 1, 1),
    ("r18 3x3/2 64->128", 64, 56, 128, 3, 2, 1),
    ("r18 3x3 128@28", 128, 28, 128, 3, 1, 1),
    ("r18 3x3 256@14", 256, 14, 256, 3, 1, 1),
    ("r18 3x3 512@7", 512, 7, 512, 3, 1, 1),
    ("r18 1x1/2 64->128", 64, 56, 128, 1, 2, 1),
    ("r50 1x1 64->256@56", 64, 56, 256, 1, 1, 1),
    ("r50 1x1 256->64@56", 256, 56, 64, 1, 1, 1),
    ("r50 1x1 256->1024@14", 256, 14, 1024, 1, 1, 1),
    ("r50 1x1 1024->256@14", 1024, 14, 256, 1, 1, 1),
    ("r50 1x1 512->2048@7", 512, 7, 2048, 1, 1, 1),
    ("mb dw 3x3 144@56", 144, 56, 144, 3, 1, 144),
    ("mb dw 3x3/2 96@112", 96, 112, 96, 3, 2, 96),
    ("mb 1x1 16->96@112", 16, 112, 96, 1, 1, 1),
    ("mb 1x1 24->144@56", 24, 56, 144, 1, 1, 1),
    ("mb 1x1 144->24@56", 144, 56, 24, 1, 1, 1),
    ("mb 1x1 96->576@14", 96, 14, 576, 1, 1, 1),
    ("mb 1x1 960->160@7", 960, 7, 160, 1, 1, 1),
]


def conv_model(c, h, m, k, s, g, batch=1):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    p = k // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                              group=g),
             helper.make_node("Relu", ["c"], ["y"])]
    oh = (h + 2 * p - k) // s + 1
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, m, oh, oh])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def main(argv):
    reps = int(argv[0]) if argv else 30
    pick = argv[1] if len(argv) > 1 else ""
    batch = int(argv[2]) if len(argv) > 2 else 1
    from kernelkit_converters.onnx import convert

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    print(f"{'layer':24s} {'numba ms':>9s} {'ORT ms':>8s} {'ratio':>6s} {'GFLOP/s':>8s}")
    tk = to = 0.0
    for name, c, h, m, k, s, g in SHAPES:
        if pick and pick not in name:
            continue
        proto = conv_model(c, h, m, k, s, g, batch)
        sess = kernelkit.Session(convert(proto), vendors=["numba", "reference"], threads=1)
        osess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((batch, c, h, h)).astype(np.float32)
        feed = {"x": x}
        a, b = sess.run(None, feed)[0], osess.run(None, feed)[0]
        assert np.allclose(a, b, rtol=1e-3, atol=1e-3), name
        best_k = best_o = np.inf
        for _ in range(reps):
            t0 = time.process_time()
            sess.run(None, feed)
            t1 = time.process_time()
            osess.run(None, feed)
            t2 = time.process_time()
            best_k, best_o = min(best_k, t1 - t0), min(best_o, t2 - t1)
        oh = (h + 2 * (k // 2) - k) // s + 1
        flops = 2.0 * batch * m * (c // g) * k * k * oh * oh
        tk, to = tk + best_k, to + best_o
        print(f"{name:24s} {best_k * 1e3:9.3f} {best_o * 1e3:8.3f} {best_k / best_o:6.2f} {flops / best_k / 1e9:8.1f}")
    print(f"{'sum':24s} {tk * 1e3:9.3f} {to * 1e3:8.3f} {tk / to:6.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

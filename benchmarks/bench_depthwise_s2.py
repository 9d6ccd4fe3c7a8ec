"""Depthwise 3x3 stride 2 pads 1 (MobileNetV2's down-sampling blocks) at one thread: the NumPy
reference, the AVX-512 window tile Conv uses where the CPU has it (``dwtile.depthwise``; else a copy
of the loops' result), the numba kernel Conv uses otherwise (``_depthwise3x3s2``: stride phases split once per plane,
nine unit-stride loads per output), the general one (``_conv_depthwise``: stride phases, one pass
per tap over an accumulator) and onnxruntime's single Conv node
(bias + Relu6 as Clip; NCHW in and out, so its NCHWc reorders are in its time: inside a model ORT
keeps NCHWc between nodes), calls interleaved, best of ``reps`` (CPU time of the process).

    python benchmarks/bench_depthwise_s2.py [reps=50]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
from _timing import best_cpu_ms  # noqa: E402
from kernelkit.ops.conv import conv as reference_conv  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import conv as nconv  # noqa: E402
from kernelkit_numba.kernels import dwtile  # noqa: E402
from kernelkit_numba.kernels.epilogue import CLIP  # noqa: E402

# (channels, input height = width): MobileNetV2's stride-2 depthwise layers, and an odd map
SHAPES = [(96, 112), (144, 56), (192, 28), (576, 14), (64, 57)]


def ort_node(c, h, w, b):
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4,
                            group=c)
    oh = (h - 1) // 2 + 1
    graph = helper.make_graph([node, helper.make_node("Clip", ["y", "lo", "hi"], ["z"])], "dw",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, oh, oh])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                               numpy_helper.from_array(np.float32(0), "lo"),
                               numpy_helper.from_array(np.float32(6), "hi")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def layer(c, h, reps, rng):
    """Best ms of each variant on one layer (channels c, input h x h)."""
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    oh = (h - 1) // 2 + 1
    y_old, y_new = np.empty((1, c, oh, oh), np.float32), np.empty((1, c, oh, oh), np.float32)
    y_tile = np.empty((1, c, oh, oh), np.float32)
    tile, args = dwtile.depthwise(x, w, b, y_tile, None, 2, 1, 1, 0.0, 6.0)
    sess = ort_node(c, h, w, b)
    zero = np.float32(0)
    fns = {
        "reference": lambda: reference_conv(x, w, b, group=c, strides=[2, 2], pads=[1] * 4),
        "tiles": lambda: tile(*args, 0, c) if dwtile.available("avx512") else np.copyto(y_tile, y_old),
        "dw3x3s2": lambda: nconv._depthwise3x3s2(x, w, b, y_old, CLIP, 0.0, 6.0, 0, c),
        "general": lambda: nconv._conv_depthwise(x, w, b, y_new, 2, 2, 1, 1, 1, 1, CLIP, 0.0, 6.0, zero, 0, c),
        "ORT": lambda: sess.run(None, {"x": x}),
    }
    for f in fns.values():
        f()
    want = np.clip(fns["reference"](), 0, 6)
    assert np.allclose(y_old, want, atol=1e-4) and np.allclose(y_new, want, atol=1e-4)
    assert np.allclose(y_tile, want, atol=1e-4)
    return best_cpu_ms(fns, reps)


def main(argv):
    reps = int(argv[0]) if argv else 50
    rng = np.random.default_rng(0)
    print(f"{'layer':16s} {'reference':>9s} {'tiles':>9s} {'dw3x3s2':>9s} {'general':>9s} {'ORT':>9s}  "
          "(ms; tiles/ORT, dw3x3s2/tiles)")
    with config.num_threads(1):
        for c, h in SHAPES:
            ms = layer(c, h, reps, rng)
            print(f"dw3x3/2 {c}@{h:<7d} {ms['reference']:9.3f} {ms['tiles']:9.3f} {ms['dw3x3s2']:9.3f} "
                  f"{ms['general']:9.3f} {ms['ORT']:9.3f}  {ms['tiles'] / ms['ORT']:.2f} "
                  f"{ms['dw3x3s2'] / ms['tiles']:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

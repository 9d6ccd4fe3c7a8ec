"""Depthwise QLinearConv at MobileNetV2's shapes (3x3, pads 1, int8 activations and per-channel int8
weights as benchmarks/quantized.py's static quantization makes them; batch 1, one thread): each
kernel of ``_IntegerConv`` side by side, calls interleaved, best of ``reps`` (CPU time):

- ``cl16``: qdepthwise.run (channels last through 16 x 16 vector transposes, the taps four pixels a
  step in the registers);
- ``nchw``: qconv._qdepthwise (stride phases per plane, requantized in its output loop);
- ``cl``: qconv._IntegerConv._depthwise_cl (int16 channels last, scalar transposes);
- ``ort``: onnxruntime's single QLinearConv node (NCHW in and out).

Every kernel's output is checked equal to ``cl16``'s (ort's too: 8-bit weights on a VNNI CPU, see
docs/quantization.md).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_qdepthwise.py [reps=40]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
from _timing import best_cpu_ms  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import qconv, qdepthwise  # noqa: E402

# (channels, input height = width, stride): MobileNetV2's depthwise layers at 224 x 224
SHAPES = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2), (384, 14, 1),
          (576, 14, 1), (576, 14, 2), (960, 7, 1)]


class _Kernel:
    """What qdepthwise.run and _depthwise_cl keep between calls (a kernel object's __dict__)."""


def ort_session(x, w, w_scale, bias, s):
    c = x.shape[1]
    inits = [numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.int8(5), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_scale, "ws"),
             numpy_helper.from_array(np.zeros(c, np.int8), "wz"), numpy_helper.from_array(np.float32(0.05), "ys"),
             numpy_helper.from_array(np.int8(-3), "yz"), numpy_helper.from_array(bias, "b")]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            kernel_shape=[3, 3], strides=[s, s], pads=[1] * 4, group=c)
    oh = (x.shape[2] - 1) // s + 1
    graph = helper.make_graph([node], "dw", [helper.make_tensor_value_info("x", TensorProto.INT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [1, c, oh, oh])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def one_shape(rng, c: int, h: int, s: int, reps: int) -> str:
    """The table row of one layer."""
    x = rng.integers(-128, 128, (1, c, h, h)).astype(np.int8)
    w = rng.integers(-127, 128, (c, 1, 3, 3)).astype(np.int8)
    w.flags.writeable = False  # a constant, as in a session: the kernels keep their packed weights
    w_scale = rng.uniform(0.002, 0.01, c).astype(np.float32)
    bias = rng.integers(-3000, 3000, c).astype(np.int32)
    mult = (np.float32(0.02) * w_scale / np.float32(0.05)).astype(np.float32)
    req = (bias, mult, np.float32(-3), np.float32(-128), np.float32(127))
    oh = (h - 1) // s + 1
    outs = {k: np.empty((1, c, oh, oh), np.int8) for k in ("cl16", "nchw", "cl")}
    k16, kcl = _Kernel(), _Kernel()
    nchw_args = (x, w.reshape(c, 3, 3).astype(np.float32), bias, mult, *req[2:], outs["nchw"], s, s, 1, 1, 1, 1,
                 np.float32(5))
    geometry = (3, 3, s, s, 1, 1, 1, 1, oh, oh)
    sess = ort_session(x, w, w_scale, bias, s)
    fns = {
        "cl16": lambda: qdepthwise.run(k16, x, w, np.int8(5), None, outs["cl16"], req, *geometry),
        "nchw": lambda: qconv._qdepthwise(*nchw_args, 0, c),
        "cl": lambda: qconv._IntegerConv._depthwise_cl(kcl, x, w, np.int8(5), None, outs["cl"], req, *geometry),
        "ort": lambda: sess.run(None, {"x": x})[0],
    }
    for f in fns.values():
        f()
    got = fns["ort"]()
    for k in ("nchw", "cl"):
        assert np.array_equal(outs[k], outs["cl16"]), k
    agree = "" if np.array_equal(got, outs["cl16"]) else " (ort differs)"
    t = best_cpu_ms(fns, reps)
    return (f"| {c}x{h}x{h} | {s} | {t['cl16']:.3f} | {t['nchw']:.3f} | {t['cl']:.3f} | {t['ort']:.3f}{agree} | "
            f"{t['nchw'] / t['cl16']:.2f} | {t['cl'] / t['cl16']:.2f} | {t['cl16'] / t['ort']:.2f} |")


def main(reps: int = 40) -> None:
    rng = np.random.default_rng(0)
    print(f"depthwise QLinearConv 3x3 pads 1, batch 1, 1 thread, best of {reps} (ms)")
    print("| C x H x W | stride | cl16 | nchw | cl | ort | nchw / cl16 | cl / cl16 | cl16 / ort |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, h, s in SHAPES:
        print(one_shape(rng, c, h, s, reps))


if __name__ == "__main__":
    with config.num_threads(1):
        main(*(int(a) for a in sys.argv[1:]))

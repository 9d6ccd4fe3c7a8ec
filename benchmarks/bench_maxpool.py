"""MaxPool 3x3 stride 2 pads 1 (ResNet's, after the stem) at one thread: the NumPy reference, the
AVX-512 window tile (``dwtile.maxpool``, where the CPU has it; else a copy of the loops' result),
the numba loops (``pool._max_pool_separable``: column maximum then row maximum per output row),
the running maximum over the kernel offsets with NumPy's ``maximum`` on strided regions
(what the float path ran before, and what int8/uint8 MaxPool still run) and onnxruntime's node.
Calls interleaved, best of ``reps`` (CPU time); ms.

    python benchmarks/bench_maxpool.py [reps=30]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
from _timing import best_cpu_ms  # noqa: E402
from kernelkit.geometry import kernel_offsets, window  # noqa: E402
from kernelkit.ops.pool import max_pool  # noqa: E402
from kernelkit_numba.kernels import dwtile, pool  # noqa: E402

SHAPES = [(64, 112), (64, 111), (128, 56)]  # (channels, map): ResNet's, an odd map, a smaller one
ATTRS = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}


def ort_node(c, h):
    node = helper.make_node("MaxPool", ["x"], ["y"], **ATTRS)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def layer(c, h, reps):
    x = np.random.default_rng(0).standard_normal((1, c, h, h)).astype(np.float32)
    win = window((h, h), ATTRS["kernel_shape"], strides=ATTRS["strides"], pads=ATTRS["pads"])
    oh = win.out[0]
    y_sep, y_run = np.empty((1, c, oh, oh), np.float32), np.empty((1, c, oh, oh), np.float32)
    y_tile = np.empty((1, c, oh, oh), np.float32)
    offsets = list(kernel_offsets((h, h), win))
    sess = ort_node(c, h)

    def running_max():
        y_run.fill(-np.inf)
        for _, out, src in offsets:
            region = y_run[(slice(None), slice(None), *out)]
            np.maximum(region, x[(slice(None), slice(None), *src)], out=region)

    tile, args = dwtile.maxpool(x, y_tile, 2, 1, 1)
    fns = {"reference": lambda: max_pool(x, **ATTRS),
           "tiles": lambda: tile(*args, 0, c) if dwtile.available("avx512") else np.copyto(y_tile, y_sep),
           "separable": lambda: pool._max_pool_separable(x, y_sep, 3, 3, 2, 2, 1, 1, 1, 1, 0, c),
           "running max": running_max,
           "ORT": lambda: sess.run(None, {"x": x})}
    for f in fns.values():
        f()
    assert np.array_equal(y_sep, y_run) and np.array_equal(y_sep, sess.run(None, {"x": x})[0])
    assert np.array_equal(y_tile, y_sep)
    return best_cpu_ms(fns, reps)


def main(argv):
    reps = int(argv[0]) if argv else 30
    names = ["reference", "tiles", "separable", "running max", "ORT"]
    print(f"{'layer':14s} " + " ".join(f"{n:>11s}" for n in names) + "  (ms)")
    for c, h in SHAPES:
        ms = layer(c, h, reps)
        print(f"{c}@{h:<11d} " + " ".join(f"{ms[n]:11.3f}" for n in names))


if __name__ == "__main__":
    main(sys.argv[1:])

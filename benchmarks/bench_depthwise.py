"""MobileNetV2's depthwise 3x3 layers (bias + Relu6 fused) and ResNet's MaxPool 3x3/2 as one-node
models, numba with the AVX-512 window tiles (``kernels/dwtile.py``) against the same Session with
them off (``KERNELKIT_F32_DEPTHWISE=off``: conv.py's and pool.py's Numba loops) and onnxruntime's
node (NCHW in and out: inside a model ORT keeps NCHWc between nodes), at 1 and 2 threads; "tiles
Nt all" runs every call on the shard pool (``dwtile.PARALLEL_US`` ~0: the measurement that sets it).
Every call interleaved round by round, best wall ms of ``rounds``; the outputs checked against ORT
first.

    python benchmarks/bench_depthwise.py [rounds=30] [threads=1,2] [filter]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit as kk  # noqa: E402
import onnxruntime as ort  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_numba.kernels import dwtile  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# (op, channels, input map, stride): MobileNetV2's depthwise layers, ResNet's MaxPool
SHAPES = [("dw", 32, 112, 1), ("dw", 96, 112, 2), ("dw", 144, 56, 1), ("dw", 144, 56, 2), ("dw", 192, 28, 1),
          ("dw", 192, 28, 2), ("dw", 384, 14, 1), ("dw", 576, 14, 1), ("dw", 576, 14, 2), ("dw", 960, 7, 1),
          ("max", 64, 112, 2)]


def model(op, c, h, s, rng):
    """The one-node ONNX model (depthwise Conv + Clip(0, 6), or MaxPool)."""
    consts, oh = [], (h - 1) // s + 1
    if op == "dw":
        consts = [numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32), "w"),
                  numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
                  numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[3, 3], strides=[s, s], pads=[1] * 4,
                                  group=c),
                 helper.make_node("Clip", ["t", "lo", "hi"], ["y"])]
    else:
        nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[s, s], pads=[1] * 4)]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, oh, oh])], consts)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    proto.ir_version = 10
    return proto


def ort_session(proto, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def everything_parallel(graph, threads, feed):
    """A run of a Session whose window tiles shard every call (the thread budget is fixed when the
    Session binds its nodes, the shard count per call)."""
    keep = dwtile.PARALLEL_US
    dwtile.PARALLEL_US = 1e-3
    try:
        sess = kk.Session(graph, vendors=["numba", "reference"], threads=threads)
    finally:
        dwtile.PARALLEL_US = keep

    def run():
        dwtile.PARALLEL_US = 1e-3
        try:
            return sess.run(None, feed)
        finally:
            dwtile.PARALLEL_US = keep

    return run


def rows_tile(sess, feed):
    """A run with narrow stride-2 outputs on the rows tile instead of two output rows a vector."""

    def run():
        keep = dwtile.PAIRS_MAX_W
        dwtile.PAIRS_MAX_W = 0
        try:
            return sess.run(None, feed)
        finally:
            dwtile.PAIRS_MAX_W = keep

    return run


def layer(op, c, h, s, rounds, threads, rng):
    proto = model(op, c, h, s, rng)
    graph = convert(proto)
    feed = {"x": rng.standard_normal((1, c, h, h)).astype(np.float32)}
    runs = {}
    for t in threads:
        sess = kk.Session(graph, vendors=["numba", "reference"], threads=t)
        osess = ort_session(proto, t)
        runs[f"tiles {t}t"] = ("auto", lambda sess=sess: sess.run(None, feed))
        if t == 1 and op == "dw" and s == 2 and (h - 1) // 2 + 1 <= dwtile.PAIRS_MAX_W:  # pairs against rows
            runs["tiles 1t rows"] = ("auto", rows_tile(sess, feed))
        if t > 1:
            runs[f"tiles {t}t all"] = ("auto", everything_parallel(graph, t, feed))
        runs[f"loops {t}t"] = ("off", lambda sess=sess: sess.run(None, feed))
        runs[f"ORT {t}t"] = (None, lambda osess=osess: osess.run(None, feed))
    want = None
    for name, (env, fn) in runs.items():
        if env:
            os.environ[dwtile.ENV] = env
        got = fn()[0]
        for _ in range(3):
            fn()
        if want is None:
            want = runs[f"ORT {threads[0]}t"][1]()[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
    best = dict.fromkeys(runs, np.inf)
    for _ in range(rounds):
        for name, (env, fn) in runs.items():
            if env:
                os.environ[dwtile.ENV] = env
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    os.environ.pop(dwtile.ENV, None)
    return {k: v * 1e3 for k, v in best.items()}


def main(argv):
    rounds = int(argv[0]) if argv else 30
    threads = [int(t) for t in argv[1].split(",")] if len(argv) > 1 else [1, 2]
    pick = argv[2] if len(argv) > 2 else ""
    rng = np.random.default_rng(0)
    cols = [f"{k} {t}t" for t in threads for k in ("tiles", "loops", "ORT")] + [f"tiles {t}t all" for t in threads
                                                                                 if t > 1]
    ratios = [f"tiles/ORT {t}t" for t in threads] + [f"loops/tiles {t}t" for t in threads]
    ratios += [f"tiles 1t/{t}t all" for t in threads if t > 1 and 1 in threads]
    print("| layer | " + " | ".join(cols + ratios) + " |")
    print("|---|" + "---:|" * (len(cols) + len(ratios)))
    for op, c, h, s in SHAPES:
        name = f"{'dw 3x3' if op == 'dw' else 'MaxPool 3x3'}/{s} {c}@{h}"
        if pick and pick not in name:
            continue
        ms = layer(op, c, h, s, rounds, threads, rng)
        r = [ms[f"tiles {t}t"] / ms[f"ORT {t}t"] for t in threads] + [ms[f"loops {t}t"] / ms[f"tiles {t}t"]
                                                                      for t in threads]
        r += [ms["tiles 1t"] / ms[f"tiles {t}t all"] for t in threads if t > 1 and 1 in threads]
        print(f"| {name} | " + " | ".join(f"{ms[k]:.3f}" for k in cols) + " | "
              + " | ".join(f"{v:.2f}" for v in r) + " |", flush=True)
        if "tiles 1t rows" in ms:
            print(f"|   (on the rows tile: {ms['tiles 1t rows']:.3f} ms, two rows a vector {ms['tiles 1t']:.3f})",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

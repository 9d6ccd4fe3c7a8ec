"""ResNet-50's rows-tile 1x1 layers (28x28, 56x56 maps) and fdirect's 3x3 layers (the three 3x3/2 and the
512@7) alone at one thread: one-node models (Conv + bias (+ the residual Add) + Relu) in a numba session of
one thread with the defaults and with each ``LABEL=SPEC`` variant (SPEC as nodes_ab.py's: ``;``-separated
``module.ATTR=VALUE``, set while the session is built and warmed), onnxruntime's session of one thread on
the same model, and np.dot on the 1x1 layers' product. GFLOP/s (2 * M * K * pixels over the wall time of
a ``run``, best of ``reps`` rounds, the calls of a round in rotated order). ``cold``: before every call a
64 MiB buffer is written and the input read back (the weights, the output and the residual from memory
or L3, the input warm, as the layer before left it in the model). ``pad`` is fdirect.pad_planes alone
on the layer's input (hot), in us. Every numba output checked against the reference first. Issue 11,
session 14 (docs/numba.md, "ResNet-50's rows-tile 1x1 and 3x3/2 layers at one thread").

    taskset -c 4 python benchmarks/bench_r50_layers.py [reps=20] [hot|cold|both] [LABEL=SPEC ...]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from bench_cols_tiles import best_rates  # noqa: E402
from kernelkit.testing import assert_close  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from nodes_ab import variant_session  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# (label, C, H, M, kernel, stride, residual)
LAYERS = [("1x1 @56 64->256 +Z", 64, 56, 256, 1, 1, True), ("1x1 @56 256->64", 256, 56, 64, 1, 1, False),
          ("1x1 @28 128->512 +Z", 128, 28, 512, 1, 1, True), ("1x1 @28 512->128", 512, 28, 128, 1, 1, False),
          ("3x3/2 @56 128->128", 128, 56, 128, 3, 2, False), ("3x3/2 @28 256->256", 256, 28, 256, 3, 2, False),
          ("3x3/2 @14 512->512", 512, 14, 512, 3, 2, False), ("3x3 @7 512->512", 512, 7, 512, 3, 1, False)]
_FLUSH = np.ones(16 << 20, np.float32)  # 64 MiB


def model(c, h, m, k, s, residual):
    """Conv (pads k // 2) + bias (+ Add of the input ``z``) + Relu, batch 1."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    oh = (h + 2 * (k // 2) - k) // s + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s],
                              pads=[k // 2] * 4)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["c", "z"], ["a"]))
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, m, oh, oh]))
        last = "a"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    graph = helper.make_graph(nodes, "layer", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                    [1, m, oh, oh])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    proto.ir_version = 10
    feed = {"x": rng.standard_normal((1, c, h, h)).astype(np.float32)}
    if residual:
        feed["z"] = rng.standard_normal((1, m, oh, oh)).astype(np.float32)
    return proto, feed, w, oh, 2.0 * m * c * k * k * oh * oh


def fns_of(layer, variants):
    import onnxruntime as ort

    _, c, h, m, k, s, residual = layer
    proto, feed, w, oh, flops = model(c, h, m, k, s, residual)
    kmodel = convert(proto.SerializeToString())
    want = kernelkit.Session(kmodel, vendors=["reference"]).run(None, feed)[0]
    fns = {}
    sessions = {"numba": kernelkit.Session(kmodel, vendors=["numba", "reference"], threads=1)}
    for label, spec in variants:
        sessions[label] = variant_session(kmodel, feed, spec, 1)
    for label, sess in sessions.items():
        assert_close(sess.run(None, feed)[0], want, "float32")
        fns[label] = lambda sess=sess: sess.run(None, feed)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    osess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    fns["ORT"] = lambda: osess.run(None, feed)
    if k == 1:
        w2, x2 = w.reshape(m, c), feed["x"].reshape(c, h * h)
        out = np.empty((m, h * h), np.float32)
        fns["np.dot"] = lambda: np.dot(w2, x2, out=out)
    return fns, feed, flops


def pad_us(layer, reps: int) -> float:
    """fdirect.pad_planes alone on the layer's input (hot), best of ``reps``, us."""
    from kernelkit_numba.kernels import fdirect

    _, c, h, m, k, s, _ = layer
    oh = (h + 2 * (k // 2) - k) // s + 1
    hp, wp, _, _ = fdirect.geometry(c, k, k, s, oh, oh)
    x = np.random.default_rng(2).standard_normal((c, h, h)).astype(np.float32)
    xp = np.empty(c * hp * wp, np.float32)
    best = np.inf
    for _ in range(reps + 2):
        t0 = time.perf_counter()
        fdirect.pad_planes(x, xp, k // 2, k // 2, hp, wp, 0, c)
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def main(argv: list[str]) -> int:
    reps = int(argv[0]) if argv else 20
    modes = {"hot": [False], "cold": [True], "both": [False, True]}[argv[1] if len(argv) > 1 else "both"]
    variants = [a.split("=", 1) for a in argv[2:]]
    names = ["numba"] + [v[0] for v in variants] + ["ORT", "np.dot"]
    built = [(layer, *fns_of(layer, variants)) for layer in LAYERS]
    pads = {layer[0]: pad_us(layer, reps) for layer in LAYERS if layer[4] > 1}
    for cold in modes:
        print(f"\n{'cold' if cold else 'hot'}: GFLOP/s at one thread, best of {reps} "
              "(ORT / numba: onnxruntime's time over numba's)")
        print("| layer | " + " | ".join(names) + " | ORT / numba | pad us |")
        print("|---|" + "---:|" * (len(names) + 2))
        for layer, fns, feed, flops in built:
            rate = best_rates(fns, flops, reps, cold, _FLUSH, (feed["x"],))
            pad = f"{pads[layer[0]]:.0f}" if layer[0] in pads else ""
            print(f"| {layer[0]} | " + " | ".join(f"{rate[c]:.0f}" if c in rate else "-" for c in names)
                  + f" | {rate['numba'] / rate['ORT']:.2f} | {pad} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

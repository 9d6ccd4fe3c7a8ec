"""The nodes issue 11's per-node check left slower than the reference on the Xeon (session 11), alone
at one thread: each as a one-node Session on numba (per algorithm switch) against the reference
kernel, calls interleaved, best of ``reps`` (CPU time of the process), ms.

    python benchmarks/bench_pernode11.py [reps=30] [filter] [threads=1]

At two or more threads the sessions run at that budget and the best wall time counts (CPU time would
add the threads' times).

Layers: the detection head's ``Conv_107`` (3x3/2, 256 -> 512 at 20 -> 10, bias), RegNetY-400MF's
``Conv_85`` (3x3/2 g13, 104 -> 104 at 56 -> 28, bias + Relu), the Gemm heads of ResNet-50 (2048 ->
1000) and RegNetY-400MF (440 -> 1000).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before NumPy loads OpenBLAS, which reads them once (session 18, head18)
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from _timing import best_cpu_ms, best_wall_ms  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import conv as nconv  # noqa: E402
from kernelkit_numba.kernels import ftile  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def conv_model(c, h, m, k, s, g, relu):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    p = k // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], kernel_shape=[k, k], strides=[s, s],
                              pads=[p] * 4, group=g)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    oh = (h + 2 * p - k) // s + 1
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", m, oh, oh])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, {"x": rng.standard_normal((1, c, h, h)).astype(np.float32)}


def gemm_model(k, n):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"])]
    graph = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, {"x": rng.standard_normal((1, k)).astype(np.float32)}


def switched(fn, module, **values):
    """``fn`` run with ``module``'s constants set to ``values`` (restored after); the key ``F32_GEMM`` sets
    $KERNELKIT_F32_GEMM instead ("off": conv.py's BLAS path)."""
    env = values.pop("F32_GEMM", None)

    def call():
        old = {k: getattr(module, k) for k in values}
        was = os.environ.get(ftile.ENV)
        for k, v in values.items():
            setattr(module, k, v)
        if env is not None:
            os.environ[ftile.ENV] = env
        try:
            return fn()
        finally:
            for k, v in old.items():
                setattr(module, k, v)
            if env is not None:
                os.environ.pop(ftile.ENV) if was is None else os.environ.__setitem__(ftile.ENV, was)
    return call


def cases():
    return {
        "Conv_107 3x3/2 256->512 @20": (conv_model(256, 20, 512, 3, 2, 1, False), nconv,
                                        {"default": {}, "direct": {"DIRECT_MIN_FILL": 0.0}, "gather": {"DIRECT": False},
                                         "im2col+rows": {"UNFILLED_COLS": False},
                                         "im2col+BLAS": {"F32_GEMM": "off"}}),
        "3x3/2 128->256 @40": (conv_model(128, 40, 256, 3, 2, 1, False), nconv,
                               {"direct": {}, "im2col+ftile": {"DIRECT": False, "GATHER": False}}),
        "3x3/2 256->512 @14 (ResNet-18)": (conv_model(256, 14, 512, 3, 2, 1, True), nconv,
                                           {"direct": {}, "im2col+ftile": {"DIRECT": False, "GATHER": False}}),
        "Conv_85 3x3/2 g13 104 @56": (conv_model(104, 56, 104, 3, 2, 13, True), nconv, {"numba": {}}),
        "head 2048->1000": (gemm_model(2048, 1000), None, {"numba": {}}),
        "head 440->1000": (gemm_model(440, 1000), None, {"numba": {}}),
    }


def main(argv):
    reps = int(argv[0]) if argv else 30
    pick = argv[1] if len(argv) > 1 else ""
    threads = int(argv[2]) if len(argv) > 2 else 1
    config.blas_single()
    for name, ((proto, feed), module, variants) in cases().items():
        if pick and pick not in name:
            continue
        model = convert(proto.SerializeToString())
        ref = kernelkit.Session(model, vendors=["reference"], threads=threads)
        fns = {"reference": lambda ref=ref, feed=feed: ref.run(None, feed)}
        want = ref.run(None, feed)[0]
        for label, values in variants.items():  # a session each: a kernel keeps one packing of its weights
            nb = kernelkit.Session(model, vendors=["numba", "reference"], threads=threads)

            def run(nb=nb, feed=feed):
                return nb.run(None, feed)

            fn = switched(run, module, **values) if values else run
            got = fn()[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
            fns[label] = fn
        for f in fns.values():
            f()
        best = (best_cpu_ms if threads == 1 else best_wall_ms)(fns, reps)
        r = best["reference"]
        print(f"{name:30s} " + "  ".join(f"{k} {v:.3f} ({v / r:.2f})" for k, v in best.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Why BERT's feed-forward residual Adds are slower than the reference's (issue 11, session 12): a
one-layer graph x = Relu(x0); y = h @ W + b (K x 768, the Gemm after ``fuse_matmul_bias``); z = x + y
(in place over x's block in the numba session); Relu(z). Reference and numba sessions at one thread,
in turn, each node's best ms over ``runs`` (``profile=True``)::

    taskset -c 0,1 python benchmarks/bench_residual_after_gemm.py [K=3072] [runs=30]
    KERNELKIT_F32_GEMM=off taskset -c 0,1 python benchmarks/bench_residual_after_gemm.py   # BLAS product
    KERNELKIT_BENCH_SET=kernels.fgemm.KC=256 taskset -c 0,1 python benchmarks/bench_residual_after_gemm.py

With K = 3072 (BERT's FFN2: 9.4 MB of weights) the Add after fgemm's product ran 1.32-1.42x the
reference's on the AMD box; after the BLAS product (``KERNELKIT_F32_GEMM=off``) 0.97-1.11x; with
K = 768 at par: the residual Add's time follows the product before it (its output's cache state),
not the arena block it writes (in place, over the input it reads).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from _timing import best_node_ms_interleaved  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_bench_numba import apply_bench_set  # noqa: E402


def main(argv: list[str]) -> None:
    apply_bench_set()  # $KERNELKIT_BENCH_SET: module constants of kernelkit_numba
    k = int(argv[0]) if argv else 3072
    runs = int(argv[1]) if len(argv) > 1 else 30
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((k, 768)).astype(np.float32) * 0.01, "W")
    b = numpy_helper.from_array(rng.standard_normal(768).astype(np.float32), "B")
    nodes = [helper.make_node("Relu", ["x0"], ["x"], name="LN"),  # x: written before the product
             helper.make_node("MatMul", ["h", "W"], ["m"], name="MM"),
             helper.make_node("Add", ["m", "B"], ["y"], name="Bias"),
             helper.make_node("Add", ["x", "y"], ["z"], name="Res"),
             helper.make_node("Relu", ["z"], ["o"], name="Out")]
    graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [128, 768]),
                                             helper.make_tensor_value_info("h", TensorProto.FLOAT, [128, k])],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [128, 768])], [w, b])
    model = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    feed = {"x0": rng.standard_normal((128, 768)).astype(np.float32),
            "h": rng.standard_normal((128, k)).astype(np.float32)}
    sessions = [kernelkit.Session(model, vendors=[v, "reference"], threads=1, profile=True)
                for v in ("reference", "numba")]
    best = best_node_ms_interleaved(sessions, feed, runs)
    print(f"K = {k}, best of {runs}, ms: node reference numba numba/reference")
    for node in ("LN", "Bias", "Res", "Out"):
        r, n = best[0].get(node, 0.0), best[1].get(node, 0.0)
        print(f"  {node:5s} {r:.4f} {n:.4f} {n / r if r else float('nan'):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Gemm with transB (B stored (N, K)) for a few rows, at one thread: the NumPy reference kernel,
``gemm_nt`` (kernels/gemm_nt.py, what the numba Gemm runs for 2-16 rows), the BLAS path it
replaced (``np.matmul(a, b.T)``, the transpose as BLAS strides), BLAS on a pre-transposed copy,
and onnxruntime's single Gemm node. Calls interleaved, best of ``reps`` (CPU time); ms.

    python benchmarks/bench_gemm_nt.py [reps=30]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
from _timing import best_cpu_ms  # noqa: E402
from kernelkit.ops.gemm import gemm as reference_gemm  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels.gemm_nt import gemm_nt  # noqa: E402

# (M, K, N): classifier heads of ResNet-18/50 and MobileNetV2 at batch 2/8/16, the MLP's layers at
# batch 8 and 64
SHAPES = [(2, 512, 1000), (8, 512, 1000), (8, 2048, 1000), (16, 1280, 1000), (8, 784, 1024),
          (64, 784, 1024), (64, 1024, 1024), (64, 1024, 10)]


def ort_gemm(b, c):
    n, k = b.shape
    graph = helper.make_graph([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)], "gemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
                              [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def shape_times(m, k, n, reps, rng):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    bt = np.ascontiguousarray(b.T)
    y_nt, y_blas = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    sess = ort_gemm(b, c)
    groups = -(-n // 4)
    fns = {"reference": lambda: reference_gemm(a, b, c, transB=1),
           "gemm_nt": lambda: gemm_nt(a, b, y_nt, 0, groups),
           "a@b.T": lambda: np.matmul(a, b.T, out=y_blas),
           "a@bt": lambda: np.matmul(a, bt, out=y_blas),
           "ORT": lambda: sess.run(None, {"a": a})}
    for f in fns.values():
        f()
    assert np.allclose(y_nt, a @ b.T, rtol=1e-3, atol=1e-3)
    return best_cpu_ms(fns, reps)


def main(argv):
    reps = int(argv[0]) if argv else 30
    rng = np.random.default_rng(0)
    config.blas_single()
    names = ["reference", "gemm_nt", "a@b.T", "a@bt", "ORT"]
    print(f"{'(M, K, N)':18s} " + " ".join(f"{n:>9s}" for n in names) + "  old/nt  nt/ORT")
    for m, k, n in SHAPES:
        ms = shape_times(m, k, n, reps, rng)
        print(f"{str((m, k, n)):18s} " + " ".join(f"{ms[x]:9.3f}" for x in names)
              + f"  {ms['a@b.T'] / ms['gemm_nt']:6.2f}  {ms['gemm_nt'] / ms['ORT']:6.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

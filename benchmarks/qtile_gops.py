"""GOP/s of each int8 GEMM micro-kernel variant (kernelkit_numba.kernels.qtile) this CPU has, against
onnxruntime's MatMulInteger (one node, B a constant initializer so that it prepacks) and float32 BLAS
(NumPy), on the GEMM shapes of the quantized models, at one thread. kernelkit's time includes packing
A and the int32 epilogue (the whole MatMulInteger); B is packed once, as the kernels do. "micro-kernel
alone": the best variant's product on A packed beforehand, without the epilogue (on a VNNI CPU also
the 8 x 16 / 1 x 16 tiles that the wide ones replaced, "vnni512 8x16 alone").

    OPENBLAS_NUM_THREADS=1 python benchmarks/qtile_gops.py [--repeat 20]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

SHAPES = [  # (M, K, N, what)
    (1, 784, 1024, "MLP fc1, batch 1"),
    (128, 256, 256, "transformer proj"),
    (128, 256, 1024, "transformer ffn1"),
    (128, 1024, 256, "transformer ffn2"),
    (3136, 576, 64, "ResNet-18 3x3 64"),
    (196, 2304, 256, "ResNet-18 3x3 256"),
    (3136, 24, 144, "MobileNetV2 1x1 expand"),
    (784, 192, 32, "MobileNetV2 1x1 project"),
]


def _best(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _ort_session(b, a_zp):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    m, k = None, b.shape[0]
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "a_zp"], ["y"])], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, b.shape[1]])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(a_zp, np.uint8), "a_zp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10  # what older onnxruntime builds (the GPU machine's) read
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]), onnx


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    from kernelkit_numba import config
    from kernelkit_numba.kernels import qpack, qtile

    names = [n for n in qtile.VARIANTS if qtile.available(n)]
    try:
        import onnxruntime  # noqa: F401
        has_ort = True
    except ImportError:
        has_ort = False
    print(f"CPU features: vnni512={qtile.available('vnni512')} avx2={qtile.available('avx2')}; GOP/s at 1 thread "
          f"(2*M*K*N / median time), 7-bit weights")
    wide = names[-1] == "vnni512"  # also the 8 x 16 tiles the wide ones replaced (issue 16, session 5)
    cols = [*names, "micro-kernel alone", *(["vnni512 8x16 alone"] if wide else []), "ort MatMulInteger", "fp32 BLAS",
            "best kk / ort"]
    print("| shape (M, K, N) | what | " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * len(cols))
    rng = np.random.default_rng(0)
    with config.serial():
        for m, k, n, what in SHAPES:
            a = rng.integers(0, 256, (m, k)).astype(np.uint8)
            b = rng.integers(-64, 64, (k, n)).astype(np.int8)
            bt = np.ascontiguousarray(b.T)
            ops = 2.0 * m * k * n
            row, best = [], 0.0
            for name in names:
                variant = qtile.VARIANTS[name]
                pb = qpack.PackedB(bt, None, variant.nr)
                out = np.empty((m, n), np.int32)
                mm_args = (pb.column_terms(3), pb.zp, pb.has_zp, out)
                reps = max(2, args.repeat // 10) if name == "generic" else args.repeat
                run = lambda v=variant, pb=pb, a=a, x=mm_args: qpack.run_blocks(  # noqa: E731
                    qpack.int32_blocks, v, pb, a, x)
                gops = ops / _best(run, reps) / 1e9
                if name != "generic":
                    best = max(best, gops)
                row.append(f"{gops:.1f}")
            variant = qtile.VARIANTS[names[-1]]  # the best this CPU has: its product on packed A, no epilogue
            pb = qpack.PackedB(bt, None, variant.nr)
            abuf = np.empty(m * pb.kq * 4 + 64, np.uint8)
            qpack.pack_rows(a, 0, m, False, variant.mr, pb.kq, abuf, np.empty(m, np.int32))
            cbuf = np.empty(m * pb.n_panels * pb.nr, np.int32)
            kind = qtile.KIND[variant.name]
            alone = lambda kind=kind, pb=pb, abuf=abuf, cbuf=cbuf, m=m: qtile.gemm_kind(  # noqa: E731
                kind, abuf, pb.data, pb.kq, pb.n_panels, cbuf, pb.n_panels * pb.nr, m)
            row.append(f"{ops / _best(alone, args.repeat) / 1e9:.1f}")
            if wide:
                narrow = lambda pb=pb, abuf=abuf, cbuf=cbuf, m=m: qtile._gemm_vnni512(  # noqa: E731
                    abuf, pb.data, pb.kq, pb.n_panels, cbuf, pb.n_panels * pb.nr, m)
                row.append(f"{ops / _best(narrow, args.repeat) / 1e9:.1f}")
            ort_gops = None
            if has_ort:
                sess, _ = _ort_session(b, 3)
                ort_gops = ops / _best(lambda s=sess, a=a: s.run(None, {"a": a}), args.repeat) / 1e9
                row.append(f"{ort_gops:.1f}")
            else:
                row.append("-")
            af, bf = a.astype(np.float32), b.astype(np.float32)
            row.append(f"{ops / _best(lambda af=af, bf=bf: af @ bf, args.repeat) / 1e9:.1f}")
            row.append(f"{best / ort_gops:.2f}" if ort_gops and best else "-")
            print(f"| ({m}, {k}, {n}) | {what} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

"""GOP/s of the AMX int8 product (kernelkit_numba.kernels.qamx) against the AVX-512 VNNI one (qtile's
wide tiles) and onnxruntime, at one thread, on the transformer's, the MLP's and ResNet-18's GEMM
shapes (a convolution as its im2col GEMM: pixels x C*kh*kw x channels).

Columns: the whole MatMulInteger path (qpack.run_blocks: pack A, product, int32 epilogue; B packed
once) on vnni512 and on amx; each product alone on A packed beforehand, all rows one block;
amx with other floors of its row blocks (qpack.AMX_BLOCK_ROWS; default 64); onnxruntime's MatMulInteger (B a
constant, prepacked); then DynamicQuantizeMatMul as one node (kernelkit session with
KERNELKIT_INT8_AMX off / on, onnxruntime's com.microsoft node), median us.

    OPENBLAS_NUM_THREADS=1 python benchmarks/qamx_gops.py [--repeat 30] [--shapes transformer,resnet18,mlp]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = {  # (M, K, N, what)
    "transformer": [(128, 256, 256, "proj"), (128, 256, 768, "qkv merged"), (128, 256, 1024, "ffn1"),
                    (128, 1024, 256, "ffn2")],
    "mlp": [(1, 784, 1024, "fc1 batch 1"), (1, 1024, 1024, "fc2 batch 1")],
    "resnet18": [(3136, 576, 64, "3x3 64"), (784, 1152, 128, "3x3 128"), (196, 2304, 256, "3x3 256"),
                 (49, 4608, 512, "3x3 512"), (784, 64, 128, "1x1 down 128"), (12544, 147, 64, "7x7 stem")],
}


FLOORS = (16, 32, 128)  # qpack.AMX_BLOCK_ROWS tried beside the default


def _median(fn, repeat):
    fn()
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _ort_dqmm(b, b_scale, b_zp):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    k, n = b.shape
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeMatMul", ["a", "b", "s", "z"], ["y"], domain="com.microsoft")], "dq",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(b_scale, "s"), numpy_helper.from_array(b_zp, "z")])
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--shapes", default="transformer,mlp,resnet18")
    parser.add_argument("--alignment", action="store_true", help="only the operand-alignment table")
    args = parser.parse_args(argv)
    if args.alignment:
        alignment(args.repeat)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from kernelkit.session import Session
    from kernelkit.testing import single_op_model
    from kernelkit_numba import config
    from kernelkit_numba.kernels import qamx, qpack, qtile
    from qtile_gops import _ort_session

    try:
        import onnxruntime  # noqa: F401
        has_ort = True
    except ImportError:
        has_ort = False
    amx = qamx.available()
    print(f"vnni512={qtile.available('vnni512')} amx={amx}" + ("" if amx else f" ({qamx.unavailable_reason()})"))
    cols = ["vnni512 MatMulInteger", "amx MatMulInteger", "vnni512 alone", "amx alone",
            *(f"amx, blocks >= {f}" for f in FLOORS),
            "ort MatMulInteger", "amx / vnni512 (whole)", "DQMM us: kk vnni512", "kk amx", "ort"]
    print("GOP/s at 1 thread (2*M*K*N / median time), 8-bit weights\n")
    print("| shape (M, K, N) | what | " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * len(cols))
    rng = np.random.default_rng(0)
    block_floor = qpack.AMX_BLOCK_ROWS
    with config.serial():
        for group in args.shapes.split(","):
            for m, k, n, what in SHAPES[group]:
                a = rng.integers(0, 256, (m, k)).astype(np.uint8)
                b = rng.integers(-128, 128, (k, n)).astype(np.int8)
                bt = np.ascontiguousarray(b.T)
                ops = 2.0 * m * k * n
                row = {}
                base = qpack.PackedB(bt, None, 16)
                for name, variant, pb in (("vnni512", qtile.VARIANTS["vnni512"], base),
                                          ("amx", qamx.VARIANT, qamx.packed(base))):
                    if name == "amx" and not amx:
                        row[f"{name} MatMulInteger"] = row[f"{name} alone"] = None
                        row.update({f"amx, blocks >= {f}": None for f in FLOORS})
                        continue
                    out = np.empty((m, n), np.int32)
                    mm = (pb.column_terms(3), pb.zp, pb.has_zp, out)
                    run = lambda v=variant, pb=pb, x=mm, a=a: qpack.run_blocks(qpack.int32_blocks, v, pb, a, x)  # noqa: E731
                    row[f"{name} MatMulInteger"] = ops / _median(run, args.repeat) / 1e9
                    abuf = np.empty(m * pb.kq * 4, np.uint8)
                    qpack.pack_rows(a, 0, m, False, variant.mr, pb.kq, abuf, np.empty(m, np.int32))
                    cbuf = np.empty(m * pb.n_panels * 16, np.int32)
                    kind = qtile.KIND[name]
                    alone = lambda kind=kind, pb=pb, abuf=abuf, cbuf=cbuf, m=m: qtile.gemm_kind(  # noqa: E731
                        kind, abuf, pb.data, pb.kq, pb.n_panels, cbuf, pb.n_panels * 16, m)
                    row[f"{name} alone"] = ops / _median(alone, args.repeat) / 1e9
                    if name == "amx":
                        for floor in FLOORS:
                            qpack.AMX_BLOCK_ROWS = floor
                            try:
                                row[f"amx, blocks >= {floor}"] = ops / _median(run, args.repeat) / 1e9
                            finally:
                                qpack.AMX_BLOCK_ROWS = block_floor
                row["ort MatMulInteger"] = None
                if has_ort:
                    sess, _ = _ort_session(b, 3)
                    t = _median(lambda s=sess, a=a: s.run(None, {"a": a}), args.repeat)
                    row["ort MatMulInteger"] = ops / t / 1e9
                v, x = row["vnni512 MatMulInteger"], row["amx MatMulInteger"]
                row["amx / vnni512 (whole)"] = x / v if x and v else None
                # DynamicQuantizeMatMul as one node
                af = rng.standard_normal((m, k)).astype(np.float32)
                b_scale = rng.uniform(0.01, 0.02, n).astype(np.float32)
                b_zp = np.zeros(n, np.int8)
                for env in ("off", "on"):
                    key = "DQMM us: kk vnni512" if env == "off" else "kk amx"
                    if env == "on" and not amx:
                        row[key] = None
                        continue
                    os.environ[qamx.ENV] = env
                    model = single_op_model("DynamicQuantizeMatMul", [af, b, b_scale, b_zp], None, None, (1, 2, 3),
                                            "com.microsoft")
                    s = Session(model, vendors=["numba"], fallback=False, passes=False, threads=1)
                    row[key] = 1e6 * _median(lambda s=s, af=af: s.run(None, {"in0": af}), args.repeat)
                os.environ.pop(qamx.ENV, None)
                row["ort"] = None
                if has_ort:
                    so = _ort_dqmm(b, b_scale, b_zp)
                    row["ort"] = 1e6 * _median(lambda so=so, af=af: so.run(None, {"a": af}), args.repeat)
                cells = [("-" if row[c] is None else f"{row[c]:.2f}" if "/" in c else f"{row[c]:.1f}") for c in cols]
                print(f"| ({m}, {k}, {n}) | {group} {what} | " + " | ".join(cells) + " |", flush=True)


def _at32(n, dtype):
    """n elements of dtype starting 32 bytes past a 64-byte line (as Numba's own arrays may start)."""
    size = np.dtype(dtype).itemsize
    buf = np.zeros(n + 128 // size, dtype)
    skip = ((32 - buf.ctypes.data) % 64) // size
    return buf[skip:skip + n]


def _at64(n, dtype):
    size = np.dtype(dtype).itemsize
    buf = np.zeros(n + 64 // size, dtype)
    skip = (-buf.ctypes.data % 64) // size
    return buf[skip:skip + n]


ALIGN_SHAPES = [(128, 256, 256), (128, 256, 1024), (128, 1024, 256), (784, 1152, 128), (196, 2304, 256)]


def alignment(repeat: int) -> None:
    """The AMX product alone (all rows one block) with its operands on or off 64-byte lines: B's
    packing, A and C as the drivers allocate them (32 bytes past a line) or aligned, and the
    driver's choices (qamx._gemm_amx_ex: A copied to an aligned scratch, C blocks through one);
    each result checked against the VNNI product."""
    from kernelkit_numba import config
    from kernelkit_numba.kernels import qamx, qpack, qtile

    if not qamx.available():
        return
    cases = [("A, B, C off lines", False, False, False, False), ("B aligned", True, False, False, False),
             ("B aligned, A copied", True, False, True, False),
             ("B aligned, A copied, C via scratch", True, False, True, True),
             ("A, B, C aligned", True, True, False, False)]
    print("\nAMX product alone, GOP/s at 1 thread, by operand alignment\n")
    print("| shape (M, K, N) | " + " | ".join(c[0] for c in cases) + " | vnni512 alone |")
    print("|---|" + "---:|" * (len(cases) + 1))
    rng = np.random.default_rng(1)
    with config.serial():
        for m, k, n in ALIGN_SHAPES:
            a = rng.integers(0, 256, (m, k)).astype(np.uint8)
            bt = rng.integers(-128, 128, (n, k)).astype(np.int8)
            base = qpack.PackedB(bt, None, 16)
            pb = qamx.packed(base)
            ldc = pb.n_panels * 16
            want = np.empty(m * ldc, np.int32)
            abuf = np.empty(m * base.kq * 4, np.uint8)
            qpack.pack_rows(a, 0, m, False, 8, base.kq, abuf, np.empty(m, np.int32))
            vnni = lambda abuf=abuf, base=base, want=want, m=m, ldc=ldc: qtile.gemm_kind(  # noqa: E731
                2, abuf, base.data, base.kq, base.n_panels, want, ldc, m)
            t_vnni = _median(vnni, repeat)
            ops = 2.0 * m * k * n
            cells = []
            for _, b_line, ac_line, align_a, c_lines in cases:
                bd = pb.data if b_line else _at32(pb.data.size, np.int8)
                bd[:] = pb.data
                av = (_at64 if ac_line else _at32)(m * pb.kq * 4, np.uint8)
                qpack.pack_rows(a, 0, m, False, 1, pb.kq, av, np.empty(m, np.int32))
                cv = (_at64 if ac_line else _at32)(m * ldc, np.int32)
                run = lambda av=av, bd=bd, cv=cv, m=m, ldc=ldc, pb=pb, x=align_a, y=c_lines: qamx._gemm_amx_ex(  # noqa: E731
                    av, bd, pb.kq, pb.n_panels, cv, ldc, m, x, y)
                cells.append(f"{ops / _median(run, repeat) / 1e9:.1f}")
                if not np.array_equal(cv, want):
                    cells[-1] += " WRONG"
            print(f"| ({m}, {k}, {n}) | " + " | ".join(cells) + f" | {ops / t_vnni / 1e9:.1f} |", flush=True)


if __name__ == "__main__":
    main()

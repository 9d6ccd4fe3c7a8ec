"""The rows micro-kernel's in-register requantize, before and after session 5 (docs/quantization.md,
"MobileNetV2 int8 (issue 16, session 5)"), on MobileNetV2's 1x1 QLinearConv layers (int8, batch 1,
one thread): ``new`` is qtile's requantized tiles as they are (``cvt``: accumulators from the column
terms, clamp in float, ``cvtps2dq``, + zero point in int32), ``old`` the same kernels with the earlier
epilogue (``_rows_intrinsic(..., cvt=False)``: + terms, float32, * multiplier, rint, + zero point,
clamp, truncate), built here into copies of qpack.conv_rows and qconv._conv_rows_pixel_major. One
session each, runs interleaved, best of ``reps`` (CPU time); the outputs are checked equal.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_qrows_requant.py [reps=20]
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_qrows_requant.py --drivers [reps=20]

``--drivers``: the two drivers of the rows tiles instead (see ``drivers``).
"""
from __future__ import annotations

import inspect
import os
import sys

import numba
import numpy as np
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
from _timing import best_cpu_ms  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.config import jit  # noqa: E402
from kernelkit_numba.kernels import qconv, qpack, qtile  # noqa: E402

# (input channels, output channels, height = width): MobileNetV2's 1x1 layers at 224 x 224 (each once)
SHAPES = [(32, 16, 112), (16, 96, 112), (96, 24, 56), (24, 144, 56), (144, 24, 56), (144, 32, 28), (32, 192, 28),
          (192, 32, 28), (192, 64, 14), (64, 384, 14), (384, 64, 14), (384, 96, 14), (96, 576, 14), (576, 96, 14),
          (576, 160, 7), (160, 960, 7), (960, 160, 7), (960, 320, 7), (320, 1280, 7)]

_q_vnni = qtile._rows_intrinsic("vnni512", 8, 2, fused=True)
_q_avx2 = qtile._rows_intrinsic("avx2", 4, 2, fused=True)
_m_vnni = qtile._rows_intrinsic("vnni512", 8, 2, fused=True, masked=True)
_m_avx2 = qtile._rows_intrinsic("avx2", 4, 2, fused=True, masked=True)


@jit
def _old_rowsq_tile(kind, w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo):
    if kind == 2:
        _q_vnni(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo)
    else:
        _q_avx2(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo)


@jit
def _old_rowsm_tile(kind, w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo, n_valid):
    if kind == 2:
        _m_vnni(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo, n_valid)
    else:
        _m_avx2(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo, n_valid)


def _with_old_tiles(fn):
    """A copy of the Numba function ``fn`` (qpack.conv_rows, qconv._conv_rows_pixel_major) calling the
    earlier epilogue's tiles."""
    src = inspect.getsource(fn.py_func)
    src = src[src.index("def "):]
    src = src.replace("qtile._rowsq_tile(", "_old_rowsq_tile(").replace("qtile._rowsm_tile(", "_old_rowsm_tile(")
    scope = {"np": np, "qtile": qtile, "_old_rowsq_tile": _old_rowsq_tile, "_old_rowsm_tile": _old_rowsm_tile}
    exec(compile(src, f"<{fn.__name__} old epilogue>", "exec"), scope)
    return numba.njit(**config._FLAGS)(scope[fn.__name__])  # exec'd source: not cached


def session(rng, k: int, m: int, h: int):
    """A one-node QLinearConv 1x1 model (per-channel int8 weights, int32 bias)."""
    w = rng.integers(-127, 128, (m, k, 1, 1)).astype(np.int8)
    inits = [numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.int8(5), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.uniform(0.002, 0.01, m).astype(np.float32),
                                                                     "ws"),
             numpy_helper.from_array(np.zeros(m, np.int8), "wz"), numpy_helper.from_array(np.float32(0.05), "ys"),
             numpy_helper.from_array(np.int8(-3), "yz"),
             numpy_helper.from_array(rng.integers(-3000, 3000, m).astype(np.int32), "b")]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            kernel_shape=[1, 1])
    graph = helper.make_graph([node], "pw", [helper.make_tensor_value_info("x", TensorProto.INT8, (1, k, h, h))],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [1, m, h, h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return kernelkit.Session(convert(model), threads=1)


def main(reps: int = 20) -> None:
    rng = np.random.default_rng(0)
    kernels = {"new": (qpack.conv_rows, qconv._conv_rows_pixel_major),
               "old": (_with_old_tiles(qpack.conv_rows), _with_old_tiles(qconv._conv_rows_pixel_major))}
    print(f"1x1 QLinearConv, batch 1, 1 thread, best of {reps} (ms); int8 micro-kernel "
          f"{qtile.select(True).name if qtile.select(True) else 'off'}")
    print("| K -> M | H x W | old | new | new / old |")
    print("|---|---|---:|---:|---:|")
    total = {"old": 0.0, "new": 0.0}
    for k, m, h in SHAPES:
        x = rng.integers(-128, 128, (1, k, h, h)).astype(np.int8)
        sessions = {}
        for name in ("old", "new"):  # each session's prepared call keeps the kernels it was made with
            qpack.conv_rows, qconv._conv_rows_pixel_major = kernels[name]
            sessions[name] = session(np.random.default_rng(k * 1000 + m), k, m, h)
            sessions[name].run(None, {"x": x})
        qpack.conv_rows, qconv._conv_rows_pixel_major = kernels["new"]
        outs = {name: s.run(None, {"x": x})[0] for name, s in sessions.items()}
        assert np.array_equal(outs["old"], outs["new"])
        t = best_cpu_ms({name: (lambda s=s, x=x: s.run(None, {"x": x})) for name, s in sessions.items()}, reps)
        total["old"] += t["old"]
        total["new"] += t["new"]
        print(f"| {k} -> {m} | {h}x{h} | {t['old']:.3f} | {t['new']:.3f} | {t['new'] / t['old']:.2f} |")
    print(f"| sum | | {total['old']:.3f} | {total['new']:.3f} | {total['new'] / total['old']:.3f} |")


# (K, M, pixels) for the drivers' A/B: the 1x1 layers above and ResNet-18's 3x3 ones (K = 9 C)
DRIVER_SHAPES = [(k, m, h * h) for k, m, h in SHAPES] + [(576, 64, 3136), (1152, 128, 784), (2304, 256, 196),
                                                         (4608, 512, 49)]


def drivers(reps: int = 20) -> None:
    """qpack.conv_rows (each weight panel over the block's pixel tiles) against
    qconv._conv_rows_pixel_major (each pixel tile through every weight panel), the kernels alone on
    the same packed operands, interleaved; the outputs are checked equal."""
    rng = np.random.default_rng(1)
    variant = qtile.select(True)
    kind = qtile.KIND[variant.name] if variant is not None else 0
    if kind == 0:
        print("no int8 micro-kernel on this CPU (the pixel-major driver needs avx2 or vnni512)")
        return
    mr, nr = qtile.ROWS_MR[kind], qtile.ROWS_NR[kind]
    print(f"rows-kernel drivers ({variant.name}), 1 thread, best of {reps} (ms)")
    print("| K x M | pixels | conv_rows | pixel-major | pixel-major / conv_rows |")
    print("|---|---:|---:|---:|---:|")
    for k, m, n_pix in DRIVER_SHAPES:
        pb = qpack.PackedB(rng.integers(-127, 128, (m, k)).astype(np.int8), None, mr)
        kq, m_pad = pb.kq, pb.n_panels * pb.nr
        x = rng.integers(-128, 128, (4 * kq, n_pix)).astype(np.int8).reshape(-1)
        terms = rng.integers(-3000, 3000, m).astype(np.int32)
        mult = np.full(m, 2e-3, np.float32)
        outs = [np.empty((m, n_pix), np.int8) for _ in range(2)]
        block = qpack.rows_block(m_pad, nr, n_pix, 4 * kq, 1)
        blocks = -(-n_pix // block)
        tail = (x, n_pix, np.int64(-128), n_pix, block, terms, mult, np.float32(-3), np.float32(-128),
                np.float32(127))
        a_rows = (kind, pb.data, kq, m, m_pad, *tail, outs[0], 0, blocks)
        a_major = (kind, pb.data, kq, m, *tail, outs[1], 0, blocks)
        fns = {"conv_rows": lambda a=a_rows: qpack.conv_rows(*a),
               "pixel_major": lambda a=a_major: qconv._conv_rows_pixel_major(*a)}
        for f in fns.values():
            f()
        assert np.array_equal(outs[0], outs[1])
        t = best_cpu_ms(fns, reps)
        print(f"| {k} x {m} | {n_pix} | {t['conv_rows']:.3f} | {t['pixel_major']:.3f} | "
              f"{t['pixel_major'] / t['conv_rows']:.2f} |")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--drivers"]
    with config.num_threads(1):
        (drivers if "--drivers" in sys.argv else main)(*(int(a) for a in args))

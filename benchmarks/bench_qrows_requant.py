"""The rows micro-kernel's in-register requantize, before and after session 5 (docs/quantization.md,
"MobileNetV2 int8 (issue 16, session 5)"), on MobileNetV2's 1x1 QLinearConv layers (int8, batch 1,
one thread): ``new`` is qtile's requantized tiles as they are (``cvt``: accumulators from the column
terms, clamp in float, ``cvtps2dq``, + zero point in int32), ``old`` the same kernels with the earlier
epilogue (``_rows_intrinsic(..., cvt=False)``: + terms, float32, * multiplier, rint, + zero point,
clamp, truncate), built here into copies of qpack.conv_rows and qconv._conv_rows_pixel_major. One
session each, runs interleaved, best of ``reps`` (CPU time); the outputs are checked equal.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_qrows_requant.py [reps=20]
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


if __name__ == "__main__":
    with config.num_threads(1):
        main(*(int(a) for a in sys.argv[1:]))

"""QLinearConv, QLinearMatMul (ONNX) and QGemm (onnxruntime's com.microsoft contrib op): integer
products accumulated exactly into int32, then one requantize step

    y = saturate(round_half_to_even(float32(acc + bias) * multiplier) + y_zero_point)
    multiplier = float32(x_scale * w_scale[m]) / y_scale        (per output channel / column)

computed in float32 in that order, as onnxruntime's kernels do. The ``fuse_qdq`` pass builds these
ops from DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear groups; it may fuse a Relu or Clip
that sat before the QuantizeLinear into ``activation``, applied exactly as a clamp of the
quantized output (Q is monotone: Q(max(v, 0)) = max(Q(v), Q(0)) with Q(0) = y_zero_point).
"""
from __future__ import annotations

import numpy as np

from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import broadcast_shapes
from ._window import symbolic_out
from .conv import conv_geometry
from .integer import (
    CONV_ATTRS,
    INT8_TYPES,
    _flops,
    _int8,
    check_int8,
    conv_flops,
    conv_samples,
    int_conv,
    int_matmul,
    to_int32,
)
from .matmul import matmul_shapes
from .quantize import SCALE_TYPES, dequantize, quantize, saturate_round

QUANT_ACTIVATIONS = ("", "Relu", "Clip")
ACT_ATTRS = {"activation": ("string", ""), "activation_params": ("floats", ())}


# -- requantize helpers (shared with the numba kernels) --------------------------------------------
def multiplier(in_scale, w_scale, out_scale=None, alpha: float = 1.0) -> np.ndarray:
    """float32 ``alpha * in_scale * w_scale / out_scale`` (1-D for per-channel w_scale), evaluated
    left to right in float32 like onnxruntime."""
    m = np.float32(alpha) * np.float32(np.asarray(in_scale).reshape(())) * np.asarray(w_scale, np.float32).reshape(-1)
    if out_scale is not None:
        m = m / np.float32(np.asarray(out_scale).reshape(()))
    return m.astype(np.float32)


def clamp_bounds(dtype, y_scale, y_zero_point, activation: str = "", params=()) -> tuple[int, int]:
    """The quantized output range [lo, hi] after a fused activation: Relu -> [zp, max],
    Clip(a, b) -> [Q(a), Q(b)] (exact, since quantization is monotone)."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    zp = int(np.asarray(y_zero_point).reshape(()))
    if activation == "Relu":
        lo = max(lo, zp)
    elif activation == "Clip":
        p = tuple(params)
        if len(p) > 0 and np.isfinite(p[0]):
            lo = max(lo, int(quantize(np.float32(p[0]), y_scale, zp, dtype)))
        if len(p) > 1 and np.isfinite(p[1]):
            hi = min(hi, int(quantize(np.float32(p[1]), y_scale, zp, dtype)))
    elif activation:
        raise ValueError(f"fused activation {activation!r} is not one of {QUANT_ACTIVATIONS[1:]} for a quantized op")
    return lo, hi


def requantize(acc: np.ndarray, mult: np.ndarray, y_zero_point, bounds) -> np.ndarray:
    """int32 accumulators -> quantized output: round(float32(acc) * mult) + zp, clamped to bounds."""
    zp = np.asarray(y_zero_point)
    with np.errstate(over="ignore", invalid="ignore"):
        q = saturate_round(acc.astype(np.float32) * mult, zp, zp.dtype)
    return np.clip(q, *bounds).astype(zp.dtype, copy=False)


def check_activation(ctx) -> None:
    if ctx.attrs["activation"] not in QUANT_ACTIVATIONS:
        raise ctx.error(f"activation {ctx.attrs['activation']!r} is not one of {QUANT_ACTIVATIONS}")


def _scalar(ctx, i: int, name: str) -> None:
    if ctx.has(i) and (not ctx.inputs[i].is_static or ctx.inputs[i].size != 1):
        raise ctx.error(f"{name} must be a scalar (one element), got {ctx.inputs[i]}")


def _scale(ctx, i: int, name: str) -> None:
    if ctx.has(i) and ctx.inputs[i].dtype not in SCALE_TYPES:
        raise ctx.error(f"{name} must be float32 or float16, got {ctx.inputs[i].dtype}")


# -- QLinearConv ------------------------------------------------------------------------------------
def _conv_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(0, "x", None), (2, "x_zero_point", 0), (3, "w", None), (5, "w_zero_point", 3),
                     (7, "y_zero_point", None)])
    check_activation(ctx)
    for i, name in ((1, "x_scale"), (4, "w_scale"), (6, "y_scale")):
        _scale(ctx, i, name)
    for i, name in ((1, "x_scale"), (2, "x_zero_point"), (6, "y_scale"), (7, "y_zero_point")):
        _scalar(ctx, i, name)
    b = ctx.inputs[8] if ctx.has(8) else None
    if b is not None and b.dtype != "int32":
        raise ctx.error(f"B must be int32, got {b.dtype}")
    x, w, win = conv_geometry(ctx, ctx.inputs[0], ctx.inputs[3], b)
    return TensorSpec((x.shape[0], w.shape[0], *symbolic_out(ctx, win)), ctx.inputs[7].dtype)


@register_kernel("QLinearConv", device="cpu", vendor="reference", dtype=INT8_TYPES, priority=-100)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b=None, *,
                 auto_pad="NOTSET", dilations=(), group=1, kernel_shape=(), pads=(), strides=(), activation="",
                 activation_params=()):
    acc = to_int32(int_conv(x, w, x_zero_point, w_zero_point, auto_pad=auto_pad, dilations=dilations, group=group,
                            kernel_shape=kernel_shape, pads=pads, strides=strides))
    channel = (-1,) + (1,) * (x.ndim - 2)
    if b is not None:
        acc = (acc + b.reshape(channel)).astype(np.int32)  # int32 addition (wraps)
    mult = multiplier(x_scale, w_scale, y_scale).reshape(channel)
    return requantize(acc, mult, y_zero_point, clamp_bounds(y_zero_point.dtype, y_scale, y_zero_point, activation,
                                                            activation_params))


def _scales(rng, shape=()):
    return rng.uniform(0.002, 0.02, shape).astype(np.float32)


def _conv_samples(rng, dtype):
    for i, (x, w, xzp, wzp, attrs) in enumerate(conv_samples(rng, dtype)):
        m = w.shape[0]
        xzp = xzp if xzp is not None else np.zeros((), x.dtype)
        wzp = wzp if wzp is not None else np.zeros((), w.dtype)
        w_scale = _scales(rng, (m,) if i % 2 else ())
        if wzp.ndim and w_scale.ndim == 0:
            w_scale = _scales(rng, (m,))
        ydt = ("uint8", "int8")[i % 2]
        bias = rng.integers(-20000, 20000, m).astype(np.int32) if i % 3 else None
        extra = {} if i % 4 else {"activation": "Relu"}
        if i == 5:
            extra = {"activation": "Clip", "activation_params": [-0.5, 1.5]}
        yield [x, np.float32(rng.uniform(0.01, 0.05)), xzp, w, w_scale, wzp, np.float32(rng.uniform(0.05, 0.2)),
               _zp(rng, ydt), bias], {**attrs, **extra}


register_op("QLinearConv", inputs=["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                                   "y_zero_point", "B?"],
            outputs=["y"], attrs={**CONV_ATTRS, **ACT_ATTRS}, infer=_conv_infer, samples=_conv_samples,
            flops=conv_flops(0, 3))


# -- QLinearMatMul ----------------------------------------------------------------------------------
def _matmul_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(0, "a", None), (2, "a_zero_point", 0), (3, "b", None), (5, "b_zero_point", 3),
                     (7, "y_zero_point", None)])
    check_activation(ctx)
    for i, name in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")):
        _scale(ctx, i, name)
    for i, name in ((1, "a_scale"), (2, "a_zero_point"), (6, "y_scale"), (7, "y_zero_point")):
        _scalar(ctx, i, name)
    return TensorSpec(matmul_shapes(ctx, ctx.inputs[0], ctx.inputs[3])[-1], ctx.inputs[7].dtype)


def _column_multiplier(mult: np.ndarray) -> np.ndarray:
    return mult.reshape(()) if mult.size == 1 else mult  # per column: broadcasts over the last axis


@register_kernel("QLinearMatMul", device="cpu", vendor="reference", dtype=INT8_TYPES, priority=-100)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, *, activation="",
                   activation_params=()):
    acc = to_int32(int_matmul(a, b, a_zero_point, b_zero_point))
    mult = _column_multiplier(multiplier(a_scale, b_scale, y_scale))
    return requantize(acc, mult, y_zero_point, clamp_bounds(y_zero_point.dtype, y_scale, y_zero_point, activation,
                                                            activation_params))


def _zp(rng, dtype):
    return np.array(rng.integers(-10, 10) + (128 if dtype == "uint8" else 0), dtype)


def _matmul_samples(rng, dtype):
    for i, bdt in enumerate(("int8", "uint8")):
        ydt = ("uint8", "int8")[i]
        yield [_int8(rng, dtype, 3, 40), _scales(rng), _zp(rng, dtype), _int8(rng, bdt, 40, 5), _scales(rng),
               _zp(rng, bdt), np.float32(0.5), _zp(rng, ydt)], {}
        yield [_int8(rng, dtype, 2, 3, 3000), _scales(rng), _zp(rng, dtype), _int8(rng, bdt, 3000, 6),
               _scales(rng, (6,)), np.zeros(6, bdt) + _zp(rng, bdt), np.float32(2.0), _zp(rng, ydt)], \
            {"activation": "Relu"}
    yield [_int8(rng, dtype, 4, 8), _scales(rng), _zp(rng, dtype), _int8(rng, "int8", 2, 8, 3), _scales(rng),
           np.int8(0), np.float32(0.01), _zp(rng, "int8")], {"activation": "Clip", "activation_params": [-0.3, 0.6]}


register_op("QLinearMatMul", inputs=["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
                                     "y_zero_point"],
            outputs=["y"], attrs=ACT_ATTRS, infer=_matmul_infer, samples=_matmul_samples,
            flops=lambda ctx: _flops(matmul_shapes(ctx, ctx.inputs[0], ctx.inputs[3])))


# -- QGemm (com.microsoft) --------------------------------------------------------------------------
GEMM_ATTRS = {"alpha": ("float", 1.0), "transA": ("int", 0), "transB": ("int", 0), **ACT_ATTRS}


def _gemm_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(0, "A", None), (2, "a_zero_point", 0), (3, "B", None), (5, "b_zero_point", 3),
                     (8, "y_zero_point", None)])
    check_activation(ctx)
    for i, name in ((1, "a_scale"), (4, "b_scale"), (7, "y_scale")):
        _scale(ctx, i, name)
    for i, name in ((1, "a_scale"), (2, "a_zero_point"), (7, "y_scale"), (8, "y_zero_point")):
        _scalar(ctx, i, name)
    a, b = ctx.inputs[0], ctx.inputs[3]
    if a.rank != 2 or b.rank != 2:
        raise ctx.error(f"A {a} and B {b} must be 2-D")
    m = a.shape[1 if ctx.attrs["transA"] else 0]
    n = b.shape[0 if ctx.attrs["transB"] else 1]
    if ctx.has(6) and ctx.inputs[6].dtype != "int32":
        raise ctx.error(f"C must be int32, got {ctx.inputs[6].dtype}")
    if ctx.has(8) != ctx.has(7) and ctx.has(8):
        raise ctx.error("y_zero_point needs y_scale")
    if ctx.attrs["activation"] and not ctx.has(8):
        raise ctx.error("a fused activation needs a quantized output (y_zero_point)")
    return TensorSpec((m, n), ctx.inputs[8].dtype if ctx.has(8) else "float32")


@register_kernel("QGemm", domain="com.microsoft", device="cpu", vendor="reference", dtype=INT8_TYPES, priority=-100)
def qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None, *, alpha=1.0,
          transA=0, transB=0, activation="", activation_params=()):
    b_zp = np.asarray(b_zero_point)
    acc = to_int32(int_matmul(a.T if transA else a, b.T if transB else b, a_zero_point,
                              b_zp.reshape(-1) if b_zp.size > 1 else b_zp))
    if c is not None:
        acc = (acc + c).astype(np.int32)
    mult = _column_multiplier(multiplier(a_scale, b_scale, y_scale, alpha))
    if y_zero_point is None:
        return acc.astype(np.float32) * mult
    return requantize(acc, mult, y_zero_point, clamp_bounds(y_zero_point.dtype, y_scale, y_zero_point, activation,
                                                            activation_params))


def _gemm_samples(rng, dtype):
    for bdt in ("int8", "uint8") if dtype == "uint8" else ("int8",):  # the types onnxruntime's QGemm takes
        yield [_int8(rng, dtype, 3, 40), _scales(rng), _zp(rng, dtype), _int8(rng, bdt, 40, 5), _scales(rng),
               _zp(rng, bdt), rng.integers(-5000, 5000, 5).astype(np.int32), np.float32(0.5), _zp(rng, dtype)], {}
    yield [_int8(rng, dtype, 3000, 3), _scales(rng), _zp(rng, dtype), _int8(rng, "int8", 6, 3000), _scales(rng, (6,)),
           np.zeros(6, "int8"), rng.integers(-5000, 5000, (1, 6)).astype(np.int32), np.float32(2.0), _zp(rng, dtype)], \
        {"transA": 1, "transB": 1, "activation": "Relu"}
    yield [_int8(rng, dtype, 4, 8), _scales(rng), _zp(rng, dtype), _int8(rng, "int8", 8, 3), _scales(rng),
           np.int8(0), None, None, None], {"alpha": 0.5}  # float output
    yield [_int8(rng, dtype, 12, 40), _scales(rng), _zp(rng, dtype), _int8(rng, "int8", 7, 40), _scales(rng, (7,)),
           np.zeros(7, "int8"), rng.integers(-5000, 5000, 7).astype(np.int32), np.float32(0.5), _zp(rng, dtype)], \
        {"transB": 1}  # more rows than the integer dot-product path takes: BLAS


register_op("QGemm", domain="com.microsoft",
            inputs=["A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C?", "y_scale?", "y_zero_point?"],
            outputs=["Y"], attrs=GEMM_ATTRS, infer=_gemm_infer, samples=_gemm_samples)


# -- QLinearAdd (com.microsoft) ---------------------------------------------------------------------
def _add_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(0, "A", None), (2, "A_zero_point", 0), (3, "B", 0), (5, "B_zero_point", 0),
                     (7, "C_zero_point", 0)])
    for i, name in ((1, "A_scale"), (4, "B_scale"), (6, "C_scale")):
        _scale(ctx, i, name)
    for i, name in ((1, "A_scale"), (2, "A_zero_point"), (4, "B_scale"), (5, "B_zero_point"), (6, "C_scale"),
                    (7, "C_zero_point")):
        _scalar(ctx, i, name)
    return TensorSpec(broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[3].shape, where=ctx.where), ctx.inputs[0].dtype)


@register_kernel("QLinearAdd", domain="com.microsoft", device="cpu", vendor="reference", dtype=INT8_TYPES,
                 priority=-100)
def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    """onnxruntime's contrib op: ``C = Q(DQ(A) + DQ(B))`` per tensor, with broadcasting; computed as
    the op-by-op DequantizeLinear, Add, QuantizeLinear steps in float32 (fuse_qdq builds it from
    them, so the fused graph equals op by op bit for bit; onnxruntime's own kernel rounds its
    fixed-point way and may differ by one step)."""
    zp = np.zeros((), a.dtype) if c_zero_point is None else c_zero_point
    total = dequantize(a, a_scale, a_zero_point) + dequantize(b, b_scale, b_zero_point)
    return quantize(total, c_scale, zp, a.dtype)


def _add_samples(rng, dtype):
    yield [_int8(rng, dtype, 2, 3, 5), _scales(rng), _zp(rng, dtype), _int8(rng, dtype, 2, 3, 5), _scales(rng),
           _zp(rng, dtype), _scales(rng), _zp(rng, dtype)], {}
    yield [_int8(rng, dtype, 1, 8, 6, 6), np.float32(0.05), _zp(rng, dtype), _int8(rng, dtype, 1, 8, 6, 6),
           np.float32(0.02), _zp(rng, dtype), np.float32(0.04), _zp(rng, dtype)], {}  # a residual block's Add
    yield [_int8(rng, dtype, 4, 5), _scales(rng), None, _int8(rng, dtype, 5), _scales(rng), None, _scales(rng),
           None], {}  # broadcast, zero points left out


register_op("QLinearAdd", domain="com.microsoft",
            inputs=["A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale", "C_zero_point?"],
            outputs=["C"], infer=_add_infer, samples=_add_samples)

"""QuantizeLinear, DequantizeLinear (ONNX opset 21: per-tensor, per-axis and blocked scales) and
DynamicQuantizeLinear, plus the helpers every quantized op shares.

Rounding is ONNX's: ``y = saturate(round_half_to_even(x / scale) + zero_point)``, computed in
float32 as onnxruntime does (a true division, not a multiplication by 1/scale), so that
QuantizeLinear is bit-exact with onnxruntime. Dequantization is ``(x - zero_point) * scale`` with
the difference taken in integers and converted to float32 once.
"""
from __future__ import annotations

import numpy as np

from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random
from .cast import ONNX_DTYPES

QUANT_TYPES = ("int8", "uint8", "int16", "uint16")  # what QuantizeLinear writes
DEQUANT_TYPES = QUANT_TYPES + ("int32",)  # what DequantizeLinear reads
SCALE_TYPES = ("float32", "float16")


# -- helpers shared by the quantized ops ------------------------------------------------------------
def param(p, shape, axis: int = 1, block_size: int = 0) -> np.ndarray:
    """A scale or zero point laid out to broadcast against a tensor of ``shape``: per-tensor (one
    element), per-axis (1-D, one per element of ``axis``) or blocked (``shape`` with ``axis``
    divided into blocks of ``block_size``). Raises ValueError when the shapes disagree."""
    p = np.asarray(p)
    rank = len(shape)
    if block_size:
        if p.ndim != rank:
            raise ValueError(f"blocked quantization needs a parameter of rank {rank}, got shape {p.shape}")
        axis = axis % rank
        want = tuple(-(-d // block_size) if i == axis else d for i, d in enumerate(shape))
        if p.shape != want:
            raise ValueError(f"block_size {block_size} on axis {axis} of {tuple(shape)} needs shape {want}, "
                             f"got {p.shape}")
        p = np.repeat(p, block_size, axis=axis)
        return p[tuple(slice(0, d) for d in shape)]
    if p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    if p.ndim != 1 or rank == 0:
        raise ValueError(f"a per-axis parameter must be 1-D, got shape {p.shape} for a tensor of shape "
                         f"{tuple(shape)}")
    axis = axis % rank
    if p.shape[0] != shape[axis]:
        raise ValueError(f"per-axis parameter of length {p.shape[0]} does not match axis {axis} of {tuple(shape)}")
    return p.reshape([-1 if i == axis else 1 for i in range(rank)])


def saturate_round(v: np.ndarray, zero_point, dtype) -> np.ndarray:
    """``saturate(round_half_to_even(v) + zero_point)`` as ``dtype``, in float32 (v is overwritten
    when it is a float32 array)."""
    info = np.iinfo(dtype)
    q = np.asarray(np.rint(v), dtype=np.float32)
    q += np.asarray(zero_point, np.float32)
    np.clip(q, info.min, info.max, out=q)  # NaN stays NaN and casts as NumPy does (undefined in ONNX)
    return q.astype(dtype)


def quantize(x, scale, zero_point, dtype) -> np.ndarray:
    """``saturate(round(x / scale) + zero_point)``: the division is float32, like onnxruntime's."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        v = np.divide(np.asarray(x, np.float32), np.asarray(scale, np.float32), dtype=np.float32)
    return saturate_round(v, zero_point, dtype)


def dequantize(x, scale, zero_point, dtype="float32") -> np.ndarray:
    """``(x - zero_point) * scale``; the difference in int64, then float32 (as onnxruntime)."""
    diff = np.asarray(x, np.int64) - np.asarray(zero_point if zero_point is not None else 0, np.int64)
    y = diff.astype(np.float32) * np.asarray(scale, np.float32)
    return y.astype(dtype, copy=False)


def check_param(ctx: InferContext, i: int, name: str, x_shape, axis: int, block_size: int = 0) -> None:
    """Shape rule check of scale/zero point input ``i`` against the quantized tensor's shape."""
    if not ctx.has(i):
        return
    spec = ctx.inputs[i]
    if not spec.is_static:
        raise ctx.error(f"{name} must have a static shape, got {spec}")
    if spec.size == 1 and spec.rank <= 1 and not block_size:
        return
    rank = len(x_shape)
    if not block_size and spec.rank != 1:
        raise ctx.error(f"{name} {spec} must be a scalar or 1-D (per-axis)")
    if block_size and spec.rank != rank:
        raise ctx.error(f"{name} {spec} must have rank {rank} for block_size {block_size}")
    a = ctx.axis(axis, rank)
    dim = x_shape[a]
    if isinstance(dim, int):
        want = -(-dim // block_size) if block_size else dim
        if spec.shape[a if block_size else 0] != want:
            raise ctx.error(f"{name} {spec} does not match axis {a} of {tuple(x_shape)}")


# -- QuantizeLinear ---------------------------------------------------------------------------------
Q_ATTRS = {"axis": ("int", 1), "block_size": ("int", 0), "output_dtype": ("int", 0), "saturate": ("int", 1)}


def _q_dtype(ctx: InferContext) -> str:
    out = ctx.attrs["output_dtype"]
    named = ONNX_DTYPES.get(out) if out else None
    if out and named not in QUANT_TYPES:
        raise ctx.error(f"output_dtype {out} is not one of {QUANT_TYPES} (as ONNX numbers)")
    if ctx.has(2):
        zp = ctx.inputs[2].dtype
        if named is not None and named != zp:
            raise ctx.error(f"output_dtype {named} differs from y_zero_point's dtype {zp}")
        named = zp
    named = named or "uint8"
    if named not in QUANT_TYPES:
        raise ctx.error(f"quantized dtype {named} is not one of {QUANT_TYPES}")
    return named


def _q_infer(ctx: InferContext) -> TensorSpec:
    x, scale = ctx.inputs[0], ctx.inputs[1]
    a = ctx.attrs
    if scale.dtype not in SCALE_TYPES or x.dtype not in SCALE_TYPES + ("int32",):
        raise ctx.error(f"x {x.dtype} must be float32/float16/int32 and y_scale {scale.dtype} float32/float16")
    if a["block_size"] < 0:
        raise ctx.error(f"block_size {a['block_size']} must be >= 0")
    for i, name in ((1, "y_scale"), (2, "y_zero_point")):
        check_param(ctx, i, name, x.shape, a["axis"], a["block_size"])
    return TensorSpec(x.shape, _q_dtype(ctx))


@register_kernel("QuantizeLinear", device="cpu", vendor="reference", dtype=("float32", "float16", "int32"),
                 priority=-100)
def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, saturate=1):
    dtype = ONNX_DTYPES[output_dtype] if output_dtype else "uint8"
    zp = np.zeros((), dtype) if y_zero_point is None else param(y_zero_point, x.shape, axis, block_size)
    return quantize(x, param(y_scale, x.shape, axis, block_size), zp, zp.dtype)


def _q_samples(rng, dtype):
    def x(*shape):
        v = random(rng, shape, "float32", -3, 3)
        v.flat[:4] = [0.5, 1.5, -2.5, 2.5][:v.size]  # ties at the scale 1 samples: round half to even
        return v.astype(dtype) if dtype != "int32" else np.round(v * 40).astype("int32")

    one = np.array(1.0 if dtype != "int32" else 40.0, "float32")
    for zdt in ("uint8", "int8"):
        lo, hi = (0, 255) if zdt == "uint8" else (-128, 127)
        yield [x(2, 3, 4), one.astype(dtype if dtype == "float16" else "float32"), np.array(3, zdt)], {}
        yield [x(3, 5), np.array(0.02, "float32"), np.array(hi // 2 + lo // 2, zdt)], {}  # saturates
        yield [x(2, 4, 3), rng.uniform(0.01, 0.1, 4).astype("float32"), rng.integers(lo, hi, 4).astype(zdt)], {}
        yield [x(2, 3, 5), rng.uniform(0.01, 0.1, 5).astype("float32"), None], {"axis": -1}
        yield [x(4, 6), rng.uniform(0.01, 0.1, (4, 2)).astype("float32"),
               rng.integers(lo, hi, (4, 2)).astype(zdt)], {"axis": 1, "block_size": 4}
    yield [x(3, 4), np.array(0.05, "float32"), None], {"output_dtype": 3}  # int8 without zero point
    yield [x(3, 4), np.array(0.001, "float32"), np.array(-5, "int16")], {}


register_op("QuantizeLinear", inputs=["x", "y_scale", "y_zero_point?"], outputs=["y"], attrs=Q_ATTRS,
            infer=_q_infer, samples=_q_samples)


# -- DequantizeLinear -------------------------------------------------------------------------------
def _dq_infer(ctx: InferContext) -> TensorSpec:
    x, scale = ctx.inputs[0], ctx.inputs[1]
    a = ctx.attrs
    if x.dtype not in DEQUANT_TYPES or scale.dtype not in SCALE_TYPES:
        raise ctx.error(f"x {x.dtype} must be one of {DEQUANT_TYPES} and x_scale {scale.dtype} float32/float16")
    if ctx.has(2) and ctx.inputs[2].dtype != x.dtype:
        raise ctx.error(f"x_zero_point {ctx.inputs[2].dtype} must have x's dtype {x.dtype}")
    if a["block_size"] < 0:
        raise ctx.error(f"block_size {a['block_size']} must be >= 0")
    for i, name in ((1, "x_scale"), (2, "x_zero_point")):
        check_param(ctx, i, name, x.shape, a["axis"], a["block_size"])
    return TensorSpec(x.shape, scale.dtype)


@register_kernel("DequantizeLinear", device="cpu", vendor="reference", dtype=DEQUANT_TYPES, priority=-100)
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    zp = np.zeros((), x.dtype) if x_zero_point is None else param(x_zero_point, x.shape, axis, block_size)
    return dequantize(x, param(x_scale, x.shape, axis, block_size), zp, x_scale.dtype)


def _dq_samples(rng, dtype):
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -300), min(info.max, 300)

    def x(*shape):
        v = rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
        v.flat[:2] = [lo, hi]
        return v

    def zp(*shape):
        return np.zeros(shape, dtype) if dtype == "int32" else rng.integers(lo, hi, shape).astype(dtype)

    yield [x(2, 3, 4), np.array(0.05, "float32"), zp()], {}
    yield [x(3, 5), np.array(0.5, "float32"), None], {}
    yield [x(2, 4, 3), rng.uniform(0.01, 0.1, 4).astype("float32"), zp(4)], {}
    yield [x(2, 3, 5), rng.uniform(0.01, 0.1, 5).astype("float32"), zp(5)], {"axis": -1}
    yield [x(4, 6), rng.uniform(0.01, 0.1, (2, 6)).astype("float32"), zp(2, 6)], {"axis": 0, "block_size": 3}
    yield [x(3, 4), np.array(0.25, "float16"), zp()], {}


register_op("DequantizeLinear", inputs=["x", "x_scale", "x_zero_point?"], outputs=["y"],
            attrs={"axis": ("int", 1), "block_size": ("int", 0)}, infer=_dq_infer, samples=_dq_samples)


# -- DynamicQuantizeLinear --------------------------------------------------------------------------
def _dyn_infer(ctx: InferContext):
    x = ctx.inputs[0]
    if x.dtype != "float32":
        raise ctx.error(f"x must be float32, got {x.dtype}")
    return [TensorSpec(x.shape, "uint8"), TensorSpec((), "float32"), TensorSpec((), "uint8")]


def dynamic_params(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """(scale, zero point) of DynamicQuantizeLinear for a data range [lo, hi], in float32 as
    onnxruntime computes them; the range always includes 0 and a zero range gives scale 1."""
    lo, hi = np.float32(min(lo, 0.0)), np.float32(max(hi, 0.0))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.float32(0) - lo / scale
    zp = np.rint(zp if 0 <= zp <= 255 else min(max(zp, np.float32(0)), np.float32(255)))  # NaN stays NaN
    return scale, np.uint8(zp)


@register_kernel("DynamicQuantizeLinear", device="cpu", vendor="reference", dtype="float32", priority=-100)
def dynamic_quantize_linear(x):
    lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
    scale, zp = dynamic_params(lo, hi)
    return quantize(x, scale, zp, np.uint8), np.asarray(scale), np.asarray(zp)


def _dyn_samples(rng, dtype):
    yield [random(rng, (3, 8), dtype, -2, 3)], {}
    yield [random(rng, (2, 3, 5), dtype, 0.5, 4)], {}  # all positive: zero point 0
    yield [random(rng, (4, 4), dtype, -6, -1)], {}  # all negative: zero point 255
    yield [np.zeros((2, 3), dtype)], {}
    yield [np.array([-1.0, 0.0, 0.5, 1.5, 254.0], dtype)], {}


register_op("DynamicQuantizeLinear", inputs=["x"], outputs=["y", "y_scale", "y_zero_point"],
            infer=_dyn_infer, samples=_dyn_samples)

"""MatMulInteger and ConvInteger (ONNX opset 10+): int8/uint8 operands minus their zero points,
products accumulated exactly into int32.

The reference multiplies in float64 (BLAS), which is exact for every integer sum below 2**53:
an int8/uint8 dot product of length K is at most 255 * 255 * K, so any K below 10**11. The result
wraps to int32 as an int32 accumulator would.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import broadcast_shapes
from ._window import WINDOW_ATTRS, symbolic_out, window
from .conv import _conv, conv_geometry
from .matmul import matmul_shapes

INT8_TYPES = ("int8", "uint8")


def offset(x, zero_point, rows_axis: int | None = None) -> np.ndarray:
    """``x - zero_point`` in float64 (exact). A 1-D zero point of more than one element is per row
    (``rows_axis``: the axis it runs along) or per column (None: the last axis)."""
    x = np.asarray(x, np.float64)
    if zero_point is None:
        return x
    zp = np.asarray(zero_point, np.float64)
    if zp.ndim == x.ndim > 1:  # the N-D form ([..., M, 1] per row, [..., 1, N] per column)
        return x - zp
    if zp.size > 1 and rows_axis is not None:
        zp = zp.reshape([-1 if i == rows_axis % x.ndim else 1 for i in range(x.ndim)])
    elif zp.size == 1:
        zp = zp.reshape(())
    return x - zp


def to_int32(acc: np.ndarray) -> np.ndarray:
    """An exact float64 integer sum as int32, wrapping as an int32 accumulator does."""
    return np.asarray(acc).astype(np.int64).astype(np.int32)


def check_int8(ctx, pairs) -> None:
    """Each (input index, name) present must be int8/uint8; a zero point must match its operand."""
    for i, name, operand in pairs:
        if not ctx.has(i):
            continue
        dt = ctx.inputs[i].dtype
        if dt not in INT8_TYPES:
            raise ctx.error(f"{name} must be int8 or uint8, got {dt}")
        if operand is not None and ctx.has(operand) and ctx.inputs[operand].dtype != dt:
            raise ctx.error(f"{name} {dt} must have the dtype of input {operand} ({ctx.inputs[operand].dtype})")


# -- MatMulInteger ----------------------------------------------------------------------------------
def _mm_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(0, "A", None), (1, "B", None), (2, "a_zero_point", 0), (3, "b_zero_point", 1)])
    return TensorSpec(matmul_shapes(ctx, ctx.inputs[0], ctx.inputs[1])[-1], "int32")


def int_matmul(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
    """(A - a_zp) @ (B - b_zp) exactly, as float64; a 1-D a_zp is per row of A, b_zp per column of B."""
    return np.matmul(offset(a, a_zero_point, -2 if np.ndim(a) > 1 else -1), offset(b, b_zero_point))


@register_kernel("MatMulInteger", device="cpu", vendor="reference", dtype=INT8_TYPES, priority=-100)
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    return to_int32(int_matmul(a, b, a_zero_point, b_zero_point))


def _int8(rng, dtype, *shape):
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    v = rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
    v.flat[:2] = [lo, hi]  # the extremes: products of 255 * 128 must not saturate anywhere
    return v


def _mm_samples(rng, dtype):
    def zp(dt, *shape):
        return _int8(rng, dt, *shape)

    for bdt in ("int8", "uint8"):
        yield [_int8(rng, dtype, 3, 4), _int8(rng, bdt, 4, 5), zp(dtype), zp(bdt)], {}
        yield [_int8(rng, dtype, 2, 3, 40), _int8(rng, bdt, 40, 6), None, zp(bdt, 6)], {}  # per-column b_zp
        yield [_int8(rng, dtype, 4, 7), _int8(rng, bdt, 2, 7, 3), zp(dtype, 4), None], {}  # per-row a_zp
    yield [_int8(rng, dtype, 5, 3000), _int8(rng, "int8", 3000, 3), zp(dtype), None], {}  # K of several exact blocks
    yield [_int8(rng, dtype, 6), _int8(rng, "int8", 6, 2)], {}  # 1-D A


register_op("MatMulInteger", inputs=["A", "B", "a_zero_point?", "b_zero_point?"], outputs=["Y"],
            infer=_mm_infer, samples=_mm_samples,
            flops=lambda ctx: _flops(matmul_shapes(ctx, ctx.inputs[0], ctx.inputs[1])))


def _flops(shapes) -> int | None:
    batch, m, k, n, _ = shapes
    dims = (*batch, m, k, n)
    return 2 * math.prod(dims) if all(isinstance(d, int) for d in dims) else None


# -- ConvInteger ------------------------------------------------------------------------------------
CONV_ATTRS = {**WINDOW_ATTRS, "group": ("int", 1)}


def _conv_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(0, "x", None), (1, "w", None), (2, "x_zero_point", 0), (3, "w_zero_point", 1)])
    x, w, win = conv_geometry(ctx, ctx.inputs[0], ctx.inputs[1], None)
    return TensorSpec((x.shape[0], w.shape[0], *symbolic_out(ctx, win)), "int32")


def conv_flops(x_index: int, w_index: int):
    """A flops rule for an integer convolution reading X and W at these inputs (a multiply-add is 2)."""

    def flops(ctx) -> int | None:
        x, w, win = conv_geometry(ctx, ctx.inputs[x_index], ctx.inputs[w_index], None)
        dims = (x.shape[0], w.shape[0], w.shape[1], *win.out, *win.kernel)
        return 2 * math.prod(dims) if all(isinstance(d, int) for d in dims) else None

    return flops


def int_conv(x, w, x_zero_point, w_zero_point, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """Convolution of (x - x_zp) by (w - w_zp) exactly, as float64; the padding reads x_zp (a real
    zero). A 1-D w_zp is per output channel."""
    if x_zero_point is not None and np.size(x_zero_point) != 1:
        raise ValueError(f"x_zero_point must be a scalar, got shape {np.shape(x_zero_point)}")
    kernel = kernel_shape if kernel_shape else w.shape[2:]
    win = window(x.shape[2:], kernel, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad)
    return _conv(offset(x, x_zero_point), offset(w, w_zero_point, 0), win, group)


@register_kernel("ConvInteger", device="cpu", vendor="reference", dtype=INT8_TYPES, priority=-100)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=(), group=1,
                 kernel_shape=(), pads=(), strides=()):
    return to_int32(int_conv(x, w, x_zero_point, w_zero_point, auto_pad=auto_pad, dilations=dilations, group=group,
                             kernel_shape=kernel_shape, pads=pads, strides=strides))


def conv_samples(rng, dtype):
    """(x, w, x_zp, w_zp, attrs) cases shared by ConvInteger and QLinearConv."""
    yield (_int8(rng, dtype, 1, 3, 7, 7), _int8(rng, "int8", 4, 3, 3, 3), _int8(rng, dtype), _int8(rng, "int8"),
           {"pads": [1, 1, 1, 1]})
    yield (_int8(rng, dtype, 2, 4, 9, 8), _int8(rng, "int8", 6, 2, 3, 2), _int8(rng, dtype), None,
           {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]})
    yield (_int8(rng, dtype, 1, 4, 8, 8), _int8(rng, "int8", 4, 1, 3, 3), _int8(rng, dtype), _int8(rng, "int8", 4),
           {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]})  # depthwise, per-channel w_zp
    yield (_int8(rng, dtype, 1, 8, 6, 6), _int8(rng, "int8", 5, 8, 1, 1), None, None, {})  # pointwise
    yield (_int8(rng, dtype, 1, 2, 10, 9), _int8(rng, "int8", 3, 2, 3, 3), _int8(rng, dtype), None,
           {"dilations": [2, 3], "auto_pad": "SAME_UPPER"})
    yield (_int8(rng, dtype, 2, 3, 11), _int8(rng, "int8", 4, 3, 4), _int8(rng, dtype), None,
           {"strides": [3], "pads": [2, 1]})  # 1-D
    yield (_int8(rng, dtype, 1, 320, 5, 5), _int8(rng, "int8", 4, 320, 3, 3), _int8(rng, dtype), None,
           {"pads": [1, 1, 1, 1]})  # K = 2880: several exact fp32 blocks in the numba kernels
    yield (_int8(rng, dtype, 2, 3, 9, 7), _int8(rng, "int8", 6, 1, 3, 3), _int8(rng, dtype), None,
           {"group": 3, "dilations": [2, 1], "pads": [2, 1, 1, 0]})  # depthwise, channel multiplier 2
    # uint8 weights last: onnxruntime (1.32) pads an int8 x / uint8 w ConvInteger with something other
    # than x_zero_point at the border, and packages/converters/tests/test_versions.py takes the first
    # samples with onnxruntime as its oracle
    yield (_int8(rng, dtype, 1, 3, 7, 7), _int8(rng, "uint8", 4, 3, 3, 3), _int8(rng, dtype), _int8(rng, "uint8"),
           {"pads": [1, 1, 1, 1]})


def _conv_samples(rng, dtype):
    for x, w, xzp, wzp, attrs in conv_samples(rng, dtype):
        yield [x, w, xzp, wzp], attrs


register_op("ConvInteger", inputs=["x", "w", "x_zero_point?", "w_zero_point?"], outputs=["y"], attrs=CONV_ATTRS,
            infer=_conv_infer, samples=_conv_samples, flops=conv_flops(0, 1))


# -- MatMulIntegerToFloat (com.microsoft) ---------------------------------------------------------
def _to_float_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(0, "A", None), (1, "B", None), (4, "a_zero_point", 0), (5, "b_zero_point", 1)])
    for i, name in ((2, "a_scale"), (3, "b_scale"), (6, "bias")):
        if ctx.has(i) and ctx.inputs[i].dtype != "float32":
            raise ctx.error(f"{name} must be float32, got {ctx.inputs[i].dtype}")
    return TensorSpec(matmul_shapes(ctx, ctx.inputs[0], ctx.inputs[1])[-1], "float32")


@register_kernel("MatMulIntegerToFloat", domain="com.microsoft", device="cpu", vendor="reference", dtype=INT8_TYPES,
                 priority=-100)
def matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    """float32(int32 (A - a_zp) @ (B - b_zp)) * (a_scale * b_scale) [+ bias]: what a dynamic model's
    MatMulInteger -> Cast -> Mul(a_scale * b_scale) [-> Add(bias)] computes, in that order."""
    acc = to_int32(int_matmul(a, b, a_zero_point, b_zero_point)).astype(np.float32)
    y = acc * (np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32))
    return y if bias is None else y + bias


def _to_float_samples(rng, dtype):
    for bdt in ("int8", "uint8"):
        yield [_int8(rng, dtype, 3, 40), _int8(rng, bdt, 40, 5), np.float32(0.02), np.float32(0.01),
               _int8(rng, dtype), _int8(rng, bdt), rng.standard_normal(5).astype(np.float32)], {}
    yield [_int8(rng, dtype, 2, 4, 3000), _int8(rng, "int8", 3000, 6), np.float32(0.02),
           rng.uniform(0.001, 0.01, 6).astype(np.float32), _int8(rng, dtype), None, None], {}
    yield [_int8(rng, dtype, 20, 300), _int8(rng, "uint8", 300, 9), np.float32(0.02),  # more rows than a GEMV
           rng.uniform(0.001, 0.01, 9).astype(np.float32), _int8(rng, dtype), _int8(rng, "uint8", 9), None], {}


register_op("MatMulIntegerToFloat", domain="com.microsoft",
            inputs=["A", "B", "a_scale", "b_scale", "a_zero_point?", "b_zero_point?", "bias?"], outputs=["Y"],
            infer=_to_float_infer, samples=_to_float_samples)


# -- DynamicQuantizeMatMul (com.microsoft) --------------------------------------------------------
def _dyn_matmul_infer(ctx) -> TensorSpec:
    check_int8(ctx, [(1, "B", None), (3, "b_zero_point", 1)])
    for i, name in ((0, "A"), (2, "b_scale"), (4, "bias"), (5, "residual")):
        if ctx.has(i) and ctx.inputs[i].dtype != "float32":
            raise ctx.error(f"{name} must be float32, got {ctx.inputs[i].dtype}")
    if ctx.attrs["activation"] not in ("", "Relu", "Gelu"):
        raise ctx.error(f"activation {ctx.attrs['activation']!r} is not '', 'Relu' or 'Gelu'")
    shape = matmul_shapes(ctx, ctx.inputs[0], ctx.inputs[1])[-1]
    parts = list(ctx.attrs["split"] or ())
    if ctx.attrs["softmax"] and (len(parts) > 1 or ctx.attrs["activation"]):
        raise ctx.error("'softmax' normalizes whole rows of the product: it goes without 'split' and 'activation'")
    n_out = len(ctx.node.outputs)
    if ctx.has(5) or ctx.has(6) or ctx.has(7):
        if parts or ctx.attrs["activation"] or ctx.attrs["softmax"]:
            raise ctx.error("residual and norm inputs go with neither 'split' nor 'activation' nor 'softmax'")
        if ctx.has(7) and not ctx.has(6):
            raise ctx.error("norm_bias needs norm_scale")
        if ctx.has(5):
            shape = broadcast_shapes(shape, ctx.inputs[5].shape, where="DynamicQuantizeMatMul's residual")
        for i, name in ((6, "norm_scale"), (7, "norm_bias")):
            if ctx.has(i) and (ctx.inputs[i].dtype != "float32" or
                               broadcast_shapes(ctx.inputs[i].shape, shape[-1:], where=name) != tuple(shape[-1:])):
                raise ctx.error(f"{name} {ctx.inputs[i]} is not float32 over the last axis {shape[-1:]}")
        return TensorSpec(tuple(shape), "float32")
    if not parts:
        if n_out != 1:
            raise ctx.error(f"node has {n_out} outputs; more than one needs the 'split' attribute")
        return TensorSpec(shape, "float32")
    if len(parts) != n_out or min(parts) < 0 or (isinstance(shape[-1], int) and sum(parts) != shape[-1]):
        raise ctx.error(f"split {parts} does not cut the {shape[-1]} columns into the node's {n_out} outputs")
    return [TensorSpec(tuple(shape[:-1]) + (n,), "float32") for n in parts]


@register_kernel("DynamicQuantizeMatMul", domain="com.microsoft", device="cpu", vendor="reference", dtype="float32",
                 priority=-100)
def dynamic_quantize_matmul(a, b, b_scale, b_zero_point=None, bias=None, residual=None, norm_scale=None,
                            norm_bias=None, *, activation="", split=(), norm_epsilon=1e-5, softmax=0):
    """onnxruntime's fusion of DynamicQuantizeLinear(A) -> MatMulInteger -> Cast -> Mul [-> Add]: A
    quantized to uint8 as DynamicQuantizeLinear does, then MatMulIntegerToFloat's float32 steps;
    ``activation`` "Relu" or "Gelu" (kernelkit's, from the fuse_dynamic_relu pass): the Relu node's
    np.maximum, the Gelu node's erf form (approximate="none"); ``softmax`` 1 (kernelkit's, from the
    same pass): the Softmax node's steps over the last axis;
    ``split`` (kernelkit's, from merge_dynamic_matmul): the columns cut into one output per entry,
    as a Split on the last axis would; ``residual`` (kernelkit's input, from fuse_dynamic_add): the
    Add node after it, y + residual (same shape); ``norm_scale`` [``norm_bias``] (kernelkit's, from
    fuse_dynamic_norm): then the LayerNormalization node after it, over the last axis with
    ``norm_epsilon``."""
    from .quantize import dynamic_quantize_linear

    q, a_scale, a_zero_point = dynamic_quantize_linear(a)
    y = matmul_integer_to_float(q, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)
    if activation == "Relu":
        np.maximum(y, 0, out=y)
    elif activation == "Gelu":
        from .unary import _gelu

        y = _gelu(y, approximate="none")
    if softmax:  # the Softmax node's steps over the last axis
        from .softmax import _softmax

        y = _softmax(y, axis=-1)
    if residual is not None:  # as the Add node (broadcasting)
        y = np.add(y, residual, out=y) if residual.shape == y.shape else np.add(y, residual)
    if norm_scale is not None:
        from .layernorm import layer_normalization

        y = layer_normalization(y, norm_scale, norm_bias, axis=-1, epsilon=norm_epsilon)[0]
    return split_columns(y, split) if split else y


def split_columns(y: np.ndarray, split) -> tuple:
    """``y`` cut along its last axis into C-contiguous parts of ``split`` columns."""
    bounds = np.cumsum([0, *split])
    return tuple(np.ascontiguousarray(y[..., int(c0):int(c1)]) for c0, c1 in zip(bounds[:-1], bounds[1:]))


def _dyn_matmul_samples(rng, dtype):
    for bdt in ("int8", "uint8"):
        yield [rng.standard_normal((3, 40)).astype(dtype), _int8(rng, bdt, 40, 5), np.float32(0.01), _int8(rng, bdt),
               rng.standard_normal(5).astype(np.float32)], {}
    yield [rng.uniform(0.5, 3, (2, 4, 3000)).astype(dtype), _int8(rng, "int8", 3000, 6),  # all positive: zp 0
           rng.uniform(0.001, 0.01, 6).astype(np.float32), None, None], {}
    yield [rng.standard_normal((1, 200)).astype(dtype), _int8(rng, "int8", 200, 7), np.float32(0.02),
           _int8(rng, "int8", 7), None], {}  # one row (batch 1), per-column b_zero_point
    yield [rng.standard_normal((2, 10, 600)).astype(dtype), _int8(rng, "int8", 600, 7), np.float32(0.02),
           np.int8(3), rng.standard_normal(7).astype(np.float32)], {}  # more rows than a GEMV
    for rows in (1, 40):  # a fused Relu, Gelu, Softmax (batch 1 and more rows)
        for attrs in ({"activation": "Relu"}, {"activation": "Gelu"}, {"softmax": 1}):
            yield [rng.standard_normal((rows, 64)).astype(dtype), _int8(rng, "int8", 64, 9), np.float32(0.02),
                   None, rng.standard_normal(9).astype(np.float32)], attrs
    for shape, n, split in (((1, 64), 300, [100, 100, 100]), ((2, 40, 64), 44, [16, 20, 8])):  # kernelkit's split
        yield ([rng.standard_normal(shape).astype(dtype), _int8(rng, "int8", 64, n),
                rng.uniform(0.01, 0.02, n).astype(np.float32), _int8(rng, "int8", n),
                rng.standard_normal(n).astype(np.float32)], {"split": split}, {"n_outputs": len(split)})
    for shape in ((1, 300), (2, 40, 64)):  # a residual Add fused (kernelkit's input): batch 1 and more rows
        yield [rng.standard_normal(shape).astype(dtype), _int8(rng, "int8", shape[-1], 24), np.float32(0.02),
               np.int8(-3), rng.standard_normal(24).astype(np.float32),
               rng.standard_normal(shape[:-1] + (24,)).astype(np.float32)], {}
        # and the LayerNormalization after it (kernelkit's norm inputs)
        yield [rng.standard_normal(shape).astype(dtype), _int8(rng, "int8", shape[-1], 24), np.float32(0.02),
               np.int8(-3), rng.standard_normal(24).astype(np.float32),
               rng.standard_normal(shape[:-1] + (24,)).astype(np.float32), rng.uniform(0.5, 2, 24).astype(np.float32),
               rng.standard_normal(24).astype(np.float32)], {"norm_epsilon": 1e-3}


register_op("DynamicQuantizeMatMul", domain="com.microsoft",
            attrs={"activation": ("string", ""), "activation_params": ("floats", ()), "split": ("ints", ()),
                   "norm_epsilon": ("float", 1e-5), "softmax": ("int", 0)},
            inputs=["A", "B", "b_scale", "b_zero_point?", "bias?", "residual?", "norm_scale?", "norm_bias?"],
            outputs=["Y*"],
            infer=_dyn_matmul_infer, samples=_dyn_matmul_samples,
            flops=lambda ctx: _flops(matmul_shapes(ctx, ctx.inputs[0], ctx.inputs[1])))

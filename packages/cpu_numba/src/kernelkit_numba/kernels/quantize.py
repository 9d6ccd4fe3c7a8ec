"""QuantizeLinear, DequantizeLinear (per-tensor and per-axis) and DynamicQuantizeLinear as parallel
loops over (outer, axis, inner) views, in float32 with the reference's exact rounding:
``rint(x / scale)`` (a true float32 division, round half to even), plus the zero point, clamped.

Blocked scales (``block_size`` > 0) stay on the reference (``supports`` declines them)."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.ops.quantize import dynamic_params
from kernelkit.registry import register_kernel
from numba import prange

from .. import config
from .._base import NumbaKernel
from ..config import jit_exact, jit_parallel


@jit_parallel
def _quantize(x, scale, zp, lo, hi, y):
    """y[o, a, i] = clamp(rint(x[o, a, i] / scale[a]) + zp[a], lo, hi); scale/zp of length 1 broadcast."""
    outer, axis_n, inner = x.shape
    for r in prange(outer * axis_n):
        o = r // axis_n
        a = r - o * axis_n
        s = scale[a if scale.shape[0] > 1 else 0]
        z = np.float32(zp[a if zp.shape[0] > 1 else 0])
        src = x[o, a]
        dst = y[o, a]
        for i in range(inner):
            v = np.float32(np.rint(np.float32(src[i]) / s)) + z
            dst[i] = min(max(v, lo), hi)


@jit_parallel
def _dequantize(x, scale, zp, wide, y):
    """y[o, a, i] = float32(x[o, a, i] - zp[a]) * scale[a], the difference exact: in int64 for int32
    x (``wide``), else in int32, which vectorises (AVX2 has no int64 -> float32 conversion)."""
    outer, axis_n, inner = x.shape
    for r in prange(outer * axis_n):
        o = r // axis_n
        a = r - o * axis_n
        s = scale[a if scale.shape[0] > 1 else 0]
        z = np.int64(zp[a if zp.shape[0] > 1 else 0])
        src = x[o, a]
        dst = y[o, a]
        if wide:
            for i in range(inner):
                dst[i] = np.float32(np.int64(src[i]) - z) * s
        else:
            z32 = np.int32(z)
            for i in range(inner):
                dst[i] = np.float32(np.int32(np.int32(src[i]) - z32)) * s


@jit_parallel
def quantize_offset(x, scale, zp, y):
    """y[i] = float32(clamp(rint(x[i] / scale) + zp, 0, 255) - zp): DynamicQuantizeLinear's uint8
    value minus its zero point, straight to the float32 operand of an exact integer product."""
    n = x.shape[0]
    for i in prange(n):
        v = np.float32(np.rint(x[i] / scale)) + zp
        y[i] = min(max(v, np.float32(0)), np.float32(255)) - zp


def _view3(x: np.ndarray, axis: int) -> np.ndarray:
    """x as (outer, axis, inner) (a 0-d x as (1, 1, 1))."""
    if x.ndim == 0:
        return x.reshape(1, 1, 1)
    axis %= x.ndim
    return x.reshape(math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:]))


def not_blocked(specs, attrs) -> bool:
    """Per-tensor or per-axis parameters (blocked ones stay on the reference)."""
    return not attrs.get("block_size", 0)


class _PerAxis(NumbaKernel):
    """Shared: the axis the parameters run along, and flat parameter arrays."""

    def params(self, x, scale, zp, zp_dtype):
        axis = int(self.attrs.get("axis", 1)) if max(np.size(scale), np.size(zp)) > 1 else 0
        s = np.ascontiguousarray(scale, np.float32).reshape(-1)
        z = np.zeros(1, zp_dtype) if zp is None else np.ascontiguousarray(zp).reshape(-1)
        if s.size > 1 and (x.ndim == 0 or s.size != x.shape[axis % x.ndim]):
            raise ValueError(f"per-axis scale of length {s.size} does not match axis {axis} of {x.shape}")
        return axis, s, z


@register_kernel("QuantizeLinear", device="cpu", vendor="numba", dtype="float32", supports=not_blocked)
class QuantizeLinear(_PerAxis):
    def compute(self, x, y_scale, y_zero_point=None):
        from kernelkit.ops.cast import ONNX_DTYPES

        out = self.attrs.get("output_dtype", 0)
        dtype = np.dtype(y_zero_point.dtype if y_zero_point is not None else ONNX_DTYPES[out] if out else "uint8")
        axis, s, z = self.params(x, y_scale, y_zero_point, dtype)
        y = np.empty(x.shape, dtype)
        info = np.iinfo(dtype)
        _quantize(_view3(np.ascontiguousarray(x), axis), s, z, np.float32(info.min), np.float32(info.max),
                  _view3(y, axis))
        return y


@register_kernel("DequantizeLinear", device="cpu", vendor="numba", dtype=("int8", "uint8", "int32"),
                 supports=lambda specs, attrs: not_blocked(specs, attrs) and specs[1].dtype == "float32")
class DequantizeLinear(_PerAxis):
    def compute(self, x, x_scale, x_zero_point=None):
        axis, s, z = self.params(x, x_scale, x_zero_point, x.dtype)
        y = np.empty(x.shape, np.float32)
        _dequantize(_view3(np.ascontiguousarray(x), axis), s, z, x.dtype.itemsize >= 4, _view3(y, axis))
        return y


def quantize_flat(flat, scale, zp, y) -> None:
    """DynamicQuantizeLinear's uint8 values of a flat float32 array into ``y``."""
    _quantize(flat.reshape(1, 1, -1), np.array([scale], np.float32), np.array([zp], np.uint8), np.float32(0),
              np.float32(255), y.reshape(1, 1, -1))


def dynamic_range(x: np.ndarray):
    """(flat x, scale, zero point) of DynamicQuantizeLinear: a parallel min/max, then the
    reference's parameters."""
    flat = np.ascontiguousarray(x).reshape(-1)
    # NumPy's SIMD reductions (as the reference's x.min()/x.max(), NaN included): the Numba loop's
    # scalar min/max chain ran at 0.6 ns an element (75 us on the transformer's 128 x 1024)
    lo, hi = (flat.min(), flat.max()) if flat.size else (0.0, 0.0)
    return (flat, *dynamic_params(float(lo), float(hi)))


@register_kernel("DynamicQuantizeLinear", device="cpu", vendor="numba", dtype="float32")
class DynamicQuantizeLinear(NumbaKernel):
    """Range by a parallel min/max, parameters as the reference computes them, then quantize."""

    def compute(self, x):
        flat, scale, zp = dynamic_range(x)
        y = np.empty(x.shape, np.uint8)
        quantize_flat(flat, scale, zp, y.reshape(-1))
        return y, np.asarray(scale), np.asarray(zp)


@jit_exact
def _qlinear_add(a, b, sa, za, sb, zb, sc, zc, lo, hi, out, q0, q1):
    """out[i] = clamp(rint((float32(a[i] - za) * sa + float32(b[i] - zb) * sb) / sc) + zc) for i in
    [q0, q1): the DequantizeLinear, Add and QuantizeLinear kernels' float32 steps, each rounded on its
    own (no FMA contraction), so the fused node equals them bit for bit. In chunks through a float32
    buffer: with the int8 store in the same loop LLVM left the loop scalar (6x slower, measured)."""
    tmp = np.empty(512, np.float32)
    for c0 in range(q0, q1, 512):
        n = min(512, q1 - c0)
        x, y = a[c0:c0 + n], b[c0:c0 + n]
        for i in range(n):  # int32 differences (exact): int64 -> float32 has no AVX2 instruction
            fa = np.float32(np.int32(np.int32(x[i]) - za)) * sa
            fb = np.float32(np.int32(np.int32(y[i]) - zb)) * sb
            tmp[i] = min(max(np.float32(np.rint((fa + fb) / sc)) + zc, lo), hi)
        dst = out[c0:c0 + n]
        for i in range(n):
            dst[i] = tmp[i]


def _scalar(x, dtype):
    return np.zeros((), dtype) if x is None else np.asarray(x).reshape(())


@register_kernel("QLinearAdd", domain="com.microsoft", device="cpu", vendor="numba", dtype=("int8", "uint8"),
                 supports=lambda specs, attrs: specs[0].shape == specs[3].shape)
class QLinearAdd(NumbaKernel):
    """C = Q(DQ(A) + DQ(B)) of two equal-shaped tensors (the residual Add of a QDQ model) in one pass
    over the integers; broadcasting ones run on the reference."""

    def compute(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
        info = np.iinfo(a.dtype)
        out = np.empty(a.shape, a.dtype)
        args = (np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1),
                np.float32(_scalar(a_scale, np.float32)), np.int32(_scalar(a_zero_point, a.dtype)),
                np.float32(_scalar(b_scale, np.float32)), np.int32(_scalar(b_zero_point, a.dtype)),
                np.float32(_scalar(c_scale, np.float32)), np.float32(_scalar(c_zero_point, a.dtype)),
                np.float32(info.min), np.float32(info.max), out.reshape(-1))
        config.parallel_for(_qlinear_add, a.size, args, 8.0 * a.size)
        return out

"""``com.example::ChannelPoly``: schema, shape rule, samples and the NumPy reference kernel.

    y = act(scale * (c[0] + c[1]*x + c[2]*x**2 + ...) + bias[channel])

``bias`` is raw bytes: little-endian float32, one value per channel along ``axis`` (or empty).
"""
from __future__ import annotations

import kernelkit as kk
import numpy as np

from . import DOMAIN, OP

ACTIVATIONS = ("none", "relu")
DTYPES = ("float32", "float64")


def bias_values(bias: bytes) -> np.ndarray:
    """The per-channel bias carried as raw little-endian float32 bytes."""
    return np.frombuffer(bias, dtype="<f4")


def infer(ctx: kk.InferContext) -> kk.TensorSpec:
    x = ctx.inputs[0]
    if x.dtype not in DTYPES:
        raise ctx.error(f"X must be one of {DTYPES}, got {x.dtype}")
    if not ctx.attrs["coefficients"]:
        raise ctx.error("coefficients must hold at least one value")
    if ctx.attrs["activation"] not in ACTIVATIONS:
        raise ctx.error(f"activation {ctx.attrs['activation']!r} is not one of {ACTIVATIONS}")
    axis = ctx.axis(ctx.attrs["axis"], x.rank)
    bias = ctx.attrs["bias"]
    if len(bias) % 4:
        raise ctx.error(f"bias holds {len(bias)} bytes, not a whole number of float32 values")
    channels = x.shape[axis]
    if bias and isinstance(channels, int) and len(bias) // 4 != channels:
        raise ctx.error(f"bias holds {len(bias) // 4} values for {channels} channels on axis {axis}")
    return x


def samples(rng: np.random.Generator, dtype: str):
    for shape, axis, degree, act, with_bias in [((2, 3, 4), 1, 3, "none", True), ((1, 5, 3, 3), 1, 1, "relu", True),
                                                ((4, 6), -1, 4, "none", False), ((3, 2, 5), 0, 2, "relu", True),
                                                ((7,), 0, 0, "none", False)]:
        x = rng.uniform(-2, 2, size=shape).astype(dtype)
        channels = shape[axis]
        attrs = {"coefficients": rng.uniform(-1, 1, size=degree + 1).round(3).tolist(), "axis": axis,
                 "scale": round(float(rng.uniform(0.5, 2)), 3), "activation": act,
                 "bias": rng.uniform(-1, 1, size=channels).astype("<f4").tobytes() if with_bias else b""}
        yield [x], attrs


kk.register_op(OP, domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=infer, samples=samples,
               attrs={"coefficients": ("floats", kk.REQUIRED), "axis": ("int", 1), "scale": ("float", 1.0),
                      "activation": ("string", "none"), "bias": ("bytes", b"")},
               doc="y = act(scale * polynomial(x) + bias[channel]); bias as raw float32 bytes")


@kk.register_kernel(OP, domain=DOMAIN, device="cpu", vendor="reference", dtype=DTYPES, priority=-100)
def channel_poly(x, *, coefficients, axis=1, scale=1.0, activation="none", bias=b""):
    t = x.dtype.type
    y = np.full_like(x, t(coefficients[-1]))
    for c in reversed(coefficients[:-1]):  # Horner
        y = y * x + t(c)
    y = y * t(scale)
    if bias:
        shape = [1] * x.ndim
        shape[axis] = -1
        y = y + bias_values(bias).astype(x.dtype).reshape(shape)
    if activation == "relu":
        y = np.maximum(y, t(0))
    return y.astype(x.dtype, copy=False)

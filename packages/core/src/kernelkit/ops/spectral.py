"""Signal ops: DFT (complex values as a trailing axis of 2; real input has a trailing 1), STFT
(framed DFTs of a real or complex signal with an optional window), the window generators
HannWindow, HammingWindow, BlackmanWindow (``periodic`` or symmetric, ``output_datatype``) and
MelWeightMatrix (ONNX's triangular mel filter bank over the one-sided DFT bins).
Transforms run in float64 through ``numpy.fft``."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random
from .cast import ONNX_DTYPES


def _scalar(v, default, name="value"):
    """One integer from a scalar input (None: ``default``); anything else is a ValueError."""
    if v is None:
        return default
    v = np.asarray(v)
    if v.size != 1 or v.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold one number, got shape {v.shape}")
    return int(v.reshape(-1)[0])


def _complex(x):
    x = x.astype(np.float64)
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)


def _pack(c, dtype):
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


@register_kernel("DFT", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def dft(x, dft_length=None, axis=None, *, inverse=0, onesided=0):
    axis = _scalar(axis, -2, "axis")
    if x.ndim < 2 or x.shape[-1] not in (1, 2) or not -x.ndim <= axis < x.ndim - 1 and axis != -2:
        raise ValueError(f"input {x.shape} needs a last axis of 1 or 2 and a DFT axis before it, got axis {axis}")
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        raise ValueError("the last axis holds the complex parts; it cannot be the DFT axis")
    n = _scalar(dft_length, None, "dft_length")
    if n is not None and n < 1:
        raise ValueError(f"dft_length must be >= 1, got {n}")
    if n is not None:  # the output's DFT axis is n long (complex128 before the cast)
        check_tensor_bytes(x.shape[:axis] + (n,) + x.shape[axis + 1:-1] + (2,), np.complex128)
    c = _complex(x)
    if onesided and inverse:
        return np.fft.irfft(c, n=n, axis=axis)[..., None].astype(x.dtype)
    if onesided:
        return _pack(np.fft.rfft(c.real, n=n, axis=axis), x.dtype)
    return _pack((np.fft.ifft if inverse else np.fft.fft)(c, n=n, axis=axis), x.dtype)


@register_kernel("STFT", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def stft(signal, frame_step, window=None, frame_length=None, *, onesided=1):
    step = _scalar(frame_step, None, "frame_step")
    if signal.ndim != 3 or signal.shape[-1] not in (1, 2) or step < 1:
        raise ValueError(f"signal must be (batch, length, 1 or 2) and frame_step >= 1, got {signal.shape}, {step}")
    if frame_length is None and (window is None or window.ndim != 1):
        raise ValueError("STFT needs frame_length or a 1-D window")
    c = _complex(signal)  # (batch, length)
    length = _scalar(frame_length, None, "frame_length") if frame_length is not None else window.shape[0]
    if not 1 <= length <= c.shape[1] or window is not None and window.shape != (length,):
        raise ValueError(f"frame length {length} does not fit the signal {c.shape[1]} or the window")
    frames = (c.shape[1] - length) // step + 1
    check_tensor_bytes((c.shape[0], frames, length), np.complex128)
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = c[:, idx]
    if window is not None:
        framed = framed * window.astype(np.float64)
    spec = np.fft.rfft(framed.real, axis=-1) if onesided else np.fft.fft(framed, axis=-1)
    return _pack(spec, signal.dtype)


def _window(kind):
    def kernel(size, *, output_datatype=1, periodic=1):
        n = _scalar(size, None, "size")
        if n < 0 or output_datatype not in ONNX_DTYPES:
            raise ValueError(f"size {n} must be >= 0 and output_datatype a kernelkit dtype")
        check_tensor_bytes((n,), np.float64)
        denom = n if periodic else n - 1
        k = np.arange(n, dtype=np.float64)
        w = 2 * math.pi * k / max(denom, 1)
        if kind == "Hann":
            out = 0.5 - 0.5 * np.cos(w)
        elif kind == "Hamming":
            out = 25 / 46 - (21 / 46) * np.cos(w)
        else:
            out = 0.42 - 0.5 * np.cos(w) + 0.08 * np.cos(2 * w)
        return out.astype(ONNX_DTYPES[output_datatype])

    kernel.__name__ = f"{kind.lower()}_window"
    return kernel


@register_kernel("MelWeightMatrix", device="cpu", vendor="reference", dtype=("int32", "int64"), priority=-100)
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype=1):
    mels, n_fft = _scalar(num_mel_bins, None, "num_mel_bins"), _scalar(dft_length, None, "dft_length")
    rate = _scalar(sample_rate, None, "sample_rate")
    if mels < 1 or n_fft < 1 or rate < 1 or output_datatype not in ONNX_DTYPES:
        raise ValueError("num_mel_bins, dft_length and sample_rate must be >= 1, output_datatype a kernelkit dtype")
    check_tensor_bytes((n_fft // 2 + 1, mels), np.float64)
    low, high = (float(np.asarray(v).reshape(-1)[0]) for v in (lower_edge_hertz, upper_edge_hertz))
    to_mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    edges_mel = to_mel(low) + np.arange(mels + 2) * (to_mel(high) - to_mel(low)) / (mels + 2)
    edges = ((n_fft + 1) * (700 * (10 ** (edges_mel / 2595) - 1)) // rate).astype(np.int64)
    left, centre, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(n_fft // 2 + 1)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where((left <= j) & (j <= centre) & (centre > left), (j - left) / (centre - left), 0.0)
        rise = np.where((centre == left) & (j == centre), 1.0, rise)
        out = np.where((centre <= j) & (j < right), (right - j) / (right - centre), rise)
    return out.astype(ONNX_DTYPES[output_datatype])


def _mel_rule(ctx: InferContext) -> TensorSpec:
    dtype = ONNX_DTYPES.get(ctx.attrs["output_datatype"])
    if dtype is None:
        raise ctx.error(f"output_datatype {ctx.attrs['output_datatype']} is not a kernelkit dtype")
    try:
        n_fft = _scalar(ctx.value(1), None, "dft_length")
        mels = _scalar(ctx.value(0), None, "num_mel_bins")
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    return TensorSpec((n_fft // 2 + 1 if n_fft is not None else ctx.symbol(),
                       mels if mels is not None else ctx.symbol()), dtype)


def _mel_samples(rng, dtype):
    yield [np.array(8, dtype), np.array(64, dtype), np.array(8000, dtype), np.array(0, np.float32),
           np.array(4000, np.float32)], {}


def _dft_rule(ctx: InferContext) -> TensorSpec:
    try:
        return _dft_spec(ctx)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


def _dft_spec(ctx: InferContext) -> TensorSpec:
    x = ctx.inputs[0]
    if x.rank < 2:
        raise ValueError(f"input must have rank >= 2, got {x}")
    axis = _scalar(ctx.value(2), -2, "axis") if ctx.has(2) else -2
    if ctx.has(2) and ctx.value(2) is None:
        return TensorSpec(tuple(ctx.symbol() for _ in x.shape[:-1]) + (ctx.symbol(),), x.dtype)
    axis = ctx.axis(axis, x.rank)
    n = x.shape[axis]
    if ctx.has(1):
        n = _scalar(ctx.value(1), None, "dft_length") if ctx.value(1) is not None else ctx.symbol()
    a = ctx.attrs
    last = 1 if a["onesided"] and a["inverse"] else 2
    if last == 1 and not ctx.has(1):  # IRFFT's default length
        n = 2 * (n - 1) if isinstance(n, int) else ctx.symbol()
    if a["onesided"] and not a["inverse"] and isinstance(n, int):
        n = n // 2 + 1
    elif a["onesided"] and not a["inverse"]:
        n = ctx.symbol()
    return TensorSpec(x.shape[:axis] + (n,) + x.shape[axis + 1:-1] + (last,), x.dtype)


def _stft_rule(ctx: InferContext) -> TensorSpec:
    return TensorSpec((ctx.inputs[0].shape[0], ctx.symbol(), ctx.symbol(), 2), ctx.inputs[0].dtype)


def _window_rule(ctx: InferContext) -> TensorSpec:
    n = ctx.value(0)
    dtype = ONNX_DTYPES.get(ctx.attrs["output_datatype"])
    if dtype is None:
        raise ctx.error(f"output_datatype {ctx.attrs['output_datatype']} is not a kernelkit dtype")
    try:
        length = _scalar(n, None, "size") if n is not None else ctx.symbol()
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    return TensorSpec((length,), dtype)


def _dft_samples(rng, dtype):
    yield [random(rng, (2, 8, 1), dtype)], {}
    yield [random(rng, (2, 6, 2), dtype), np.array(8, np.int64), np.array(1, np.int64)], {"inverse": 1}
    yield [random(rng, (3, 8, 1), dtype)], {"onesided": 1}


def _stft_samples(rng, dtype):
    yield [random(rng, (2, 32, 1), dtype), np.array(8, np.int64), random(rng, (16,), dtype)], {}


def _window_samples(rng, dtype):
    yield [np.array(10, np.int64)], {}
    yield [np.array(7, np.int32)], {"periodic": 0, "output_datatype": 11}


register_op("DFT", inputs=["input", "dft_length?", "axis?"], outputs=["output"],
            attrs={"inverse": ("int", 0), "onesided": ("int", 0)}, infer=_dft_rule, samples=_dft_samples)
register_op("STFT", inputs=["signal", "frame_step", "window?", "frame_length?"], outputs=["output"],
            attrs={"onesided": ("int", 1)}, infer=_stft_rule, samples=_stft_samples)
for _kind in ("Hann", "Hamming", "Blackman"):
    register_op(f"{_kind}Window", inputs=["size"], outputs=["output"],
                attrs={"output_datatype": ("int", 1), "periodic": ("int", 1)}, infer=_window_rule,
                samples=_window_samples, dispatch_input=0)
    register_kernel(f"{_kind}Window", device="cpu", vendor="reference", dtype=("int32", "int64"),
                    priority=-100)(_window(_kind))
register_op("MelWeightMatrix", inputs=["num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                                       "upper_edge_hertz"], outputs=["output"], attrs={"output_datatype": ("int", 1)},
            infer=_mel_rule, samples=_mel_samples)

"""The fused ``activation`` attribute of Conv, ConvTranspose, Gemm and MatMul.

A fused node carries ``activation`` (one of ACTIVATIONS, or "" for none) and ``activation_params``
(floats). The meaning is the same on every backend and is defined here:

    Relu                y = max(x, 0)
    Clip      (lo, hi)  y = min(max(x, lo), hi)
    LeakyRelu (alpha,)  y = x if x >= 0 else alpha * x
    Sigmoid             y = 1 / (1 + exp(-x))
    HardSwish           y = x * max(0, min(1, x / 6 + 1 / 2))
    Tanh                y = tanh(x)
    Gelu      (approx,) y = x/2 * (1 + erf(x / sqrt 2)); approx=1 uses the tanh formula
"""
from __future__ import annotations

import math

import numpy as np

ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish", "Tanh", "Gelu")
ACTIVATION_ATTRS = {"activation": ("string", ""), "activation_params": ("floats", ())}

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    """Error function in the dtype of ``x`` (scipy's when installed, else a float64 vectorized one)."""
    try:
        from scipy.special import erf as sp_erf
    except ImportError:  # pragma: no cover - scipy is present in tests
        return _erf(x).astype(x.dtype)
    return sp_erf(x).astype(x.dtype, copy=False)


def apply_activation(y: np.ndarray, activation: str, params=()) -> np.ndarray:
    """Apply a fused activation to ``y`` (which the caller owns; it may be modified in place)."""
    if not activation:
        return y
    p = tuple(params)
    if activation == "Relu":
        return np.maximum(y, 0, out=y)
    if activation == "Clip":
        lo = p[0] if len(p) > 0 else -np.inf
        hi = p[1] if len(p) > 1 else np.inf
        return np.clip(y, lo, hi, out=y)
    if activation == "LeakyRelu":
        alpha = p[0] if p else 0.01
        return np.where(y >= 0, y, y * y.dtype.type(alpha)).astype(y.dtype, copy=False)
    if activation == "Sigmoid":
        return (1 / (1 + np.exp(-y))).astype(y.dtype, copy=False)
    if activation == "HardSwish":
        return (y * np.clip(y / 6 + 0.5, 0, 1)).astype(y.dtype, copy=False)
    if activation == "Tanh":
        return np.tanh(y, out=y)
    if activation == "Gelu":
        if p and p[0]:
            c = math.sqrt(2 / math.pi)
            return (0.5 * y * (1 + np.tanh(c * (y + 0.044715 * y**3)))).astype(y.dtype, copy=False)
        return (0.5 * y * (1 + erf(y / np.sqrt(2).astype(y.dtype)))).astype(y.dtype, copy=False)
    raise ValueError(f"unknown fused activation {activation!r}; known: {ACTIVATIONS}")

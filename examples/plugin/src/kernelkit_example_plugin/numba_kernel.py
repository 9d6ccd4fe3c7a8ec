"""The Numba kernel of ``com.example::ChannelPoly``: checks and reshapes in Python, then a private
``@njit`` loop over (outer, channel, inner) sees only arrays and scalars."""
from __future__ import annotations

import kernelkit as kk
import numba
import numpy as np

from . import DOMAIN, OP
from .op import DTYPES, bias_values


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _channel_poly(x, coefficients, bias, scale, relu, out):
    outer, channels, inner = x.shape
    top = len(coefficients) - 1
    for o in range(outer):
        for c in range(channels):
            b = bias[c]
            for i in range(inner):
                v = x[o, c, i]
                acc = coefficients[top]
                for k in range(top - 1, -1, -1):
                    acc = acc * v + coefficients[k]
                acc = acc * scale + b
                if relu and acc < 0:
                    acc = b - b  # +0.0 of acc's type, as np.maximum gives (acc - acc is NaN at -inf)
                out[o, c, i] = acc


@kk.register_kernel(OP, domain=DOMAIN, device="cpu", vendor="numba", dtype=DTYPES)
def channel_poly(x, *, coefficients, axis=1, scale=1.0, activation="none", bias=b""):
    axis = axis % x.ndim
    channels = x.shape[axis]
    x3 = np.ascontiguousarray(x).reshape(int(np.prod(x.shape[:axis])), channels, -1)
    t = x.dtype.type
    b = bias_values(bias).astype(x.dtype) if bias else np.zeros(channels, x.dtype)
    out = np.empty_like(x3)
    _channel_poly(x3, np.asarray(coefficients, x.dtype), b, t(scale), activation == "relu", out)
    return out.reshape(x.shape)

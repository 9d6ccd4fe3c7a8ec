"""The fused ``activation`` attribute of Conv, ConvTranspose, Gemm and MatMul: one table.

A fused node carries ``activation`` (a name in ACTIVATIONS, or "" for none) and
``activation_params`` (floats). ``ACTIVATIONS`` maps each name to an ``Activation``: its parameters
with their defaults, its NumPy definition, and how a standalone node of that op becomes fused
parameters. Every other view reads this table: the fusion pass (which ops fuse), the numba
epilogue codes and the OpenCL defines (defaults through ``resolve``). An unknown name, or more
parameters than the activation has, is an OpAttributeError everywhere.

    Relu                y = max(x, 0)
    Clip      (lo, hi)  y = min(max(x, lo), hi)                        lo = -inf, hi = +inf
    LeakyRelu (alpha,)  y = x if x >= 0 else alpha * x                 alpha = 0.01
    Sigmoid             y = 1 / (1 + exp(-x))
    HardSwish           y = x * max(0, min(1, x / 6 + 1 / 2))
    Tanh                y = tanh(x)
    Gelu      (approx,) y = x/2 * (1 + erf(x / sqrt 2)); approx != 0: the tanh formula    approx = 0
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import OpAttributeError

ACTIVATION_ATTRS = {"activation": ("string", ""), "activation_params": ("floats", ())}

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    """Error function in the dtype of ``x`` (scipy's when installed, else a float64 vectorized one)."""
    try:
        from scipy.special import erf as sp_erf
    except ImportError:  # pragma: no cover - scipy is present in tests
        return _erf(x).astype(x.dtype)
    return sp_erf(x).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class Activation:
    """One fusable activation. ``fn(y, *params)`` computes it in ``y``'s dtype (``y`` belongs to the
    caller and may be overwritten); ``fuse(attrs, extra)`` gives the ``activation_params`` of a
    standalone node of the op (``attrs`` complete, ``extra`` the constant data of its inputs after
    the first, None where absent), or None when that node cannot be fused."""

    name: str
    params: tuple[tuple[str, float], ...]
    fn: Callable
    fuse: Callable = lambda attrs, extra: ()

    @property
    def defaults(self) -> tuple[float, ...]:
        return tuple(default for _, default in self.params)


def _clip_fuse(attrs, extra):
    bounds = []
    for data, default in zip(list(extra) + [None, None], (-math.inf, math.inf)):
        if data is not None and np.size(data) != 1:
            return None
        bounds.append(float(np.reshape(data, ())) if data is not None else default)
    return tuple(bounds)


def _gelu(y, approx):
    if approx:
        c = math.sqrt(2 / math.pi)
        return 0.5 * y * (1 + np.tanh(c * (y + 0.044715 * (y * y * y))))  # not y**3: a powf call per value
    return 0.5 * y * (1 + erf(y / np.sqrt(2).astype(y.dtype)))


ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("Relu", (), lambda y: np.maximum(y, 0, out=y)),
    Activation("Clip", (("min", -math.inf), ("max", math.inf)), lambda y, lo, hi: np.clip(y, lo, hi, out=y),
               _clip_fuse),
    Activation("LeakyRelu", (("alpha", 0.01),), lambda y, alpha: np.where(y >= 0, y, y * y.dtype.type(alpha)),
               lambda attrs, extra: (attrs["alpha"],)),
    Activation("Sigmoid", (), lambda y: 1 / (1 + np.exp(-y))),
    Activation("HardSwish", (), lambda y: y * np.clip(y / 6 + 0.5, 0, 1)),
    Activation("Tanh", (), lambda y: np.tanh(y, out=y)),
    Activation("Gelu", (("approximate", 0.0),), _gelu,
               lambda attrs, extra: {"none": (), "tanh": (1.0,)}.get(attrs["approximate"])),
)}


def resolve(activation: str, params=(), where: str = "") -> tuple[float, ...]:
    """The complete ``activation_params`` of ``activation``: the given ones, then the defaults.
    An unknown name or too many parameters is an OpAttributeError naming ``where``."""
    entry = ACTIVATIONS.get(activation)
    prefix = f"{where}: " if where else ""
    if entry is None:
        raise OpAttributeError(f"{prefix}unknown fused activation {activation!r}; known: {list(ACTIVATIONS)}")
    given = tuple(float(p) for p in (params if params is not None else ()))
    if len(given) > len(entry.params):
        raise OpAttributeError(f"{prefix}fused activation {activation!r} takes at most {len(entry.params)} "
                               f"activation_params {[n for n, _ in entry.params]}, got {list(given)}")
    return given + entry.defaults[len(given):]


def apply_activation(y: np.ndarray, activation: str, params=(), where: str = "") -> np.ndarray:
    """Apply a fused activation to ``y`` (which the caller owns; it may be modified in place)."""
    if not activation:
        return y
    full = resolve(activation, params, where)
    return np.asarray(ACTIVATIONS[activation].fn(y, *full)).astype(y.dtype, copy=False)

"""Helpers shared by the op files: common shape rules, axis handling and sample generators."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import INT_TYPES
from ..geometry import normalize_axes  # noqa: F401  (used by the op files)
from ..ir import Dim, TensorSpec
from ..shape import InferContext, broadcast_shapes


def into(out: np.ndarray | None, y: np.ndarray) -> np.ndarray:
    """A kernel's result written into the ``out`` it was given (the ``out=`` convention of
    docs/architecture.md); with no ``out``, the result itself."""
    if out is None:
        return y
    np.copyto(out, y)
    return out


def with_out(fn):
    """``fn`` (inputs positional, attributes keyword-only) as a kernel that also takes ``out=``:
    for ops whose reference computes a fresh result anyway (the result is copied into ``out``)."""
    import functools
    import inspect

    @functools.wraps(fn)
    def kernel(*inputs, out=None, **attrs):
        return into(out, fn(*inputs, **attrs))

    sig = inspect.signature(fn)
    out_param = inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None)
    kernel.__signature__ = sig.replace(parameters=[*sig.parameters.values(), out_param])
    return kernel


def same_as_input(ctx: InferContext) -> TensorSpec:
    """Rule for ops whose output has the first input's shape and dtype."""
    return ctx.inputs[0]


def broadcast_rule(dtype: str | None = None):
    """Rule for elementwise ops over broadcast inputs; output dtype is ``dtype`` or the inputs'."""

    def rule(ctx: InferContext) -> TensorSpec:
        specs = [s for s in ctx.inputs if s is not None]
        if not specs:
            raise ctx.error("needs at least one input")
        dtypes = {s.dtype for s in specs}
        if len(dtypes) > 1:
            raise ctx.error(f"inputs have different dtypes {sorted(dtypes)}")
        shape = broadcast_shapes(*(s.shape for s in specs), where=ctx.where)
        return TensorSpec(shape, dtype or specs[0].dtype)

    return rule


def random(rng: np.random.Generator, shape, dtype: str, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """A random array of ``dtype`` in [low, high) (integers: rounded; bool: coin flips)."""
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(dtype).kind == "u":
        low, high = max(low, 0.0), max(high, 1.0)
    x = rng.uniform(low, high, size=shape)
    if np.dtype(dtype).kind in "iu":
        return np.asarray(np.round(x), dtype=dtype)
    return np.asarray(x, dtype=dtype)


# -- axes and integer lists given as inputs (opset 13+ style) ------------------------------------
def const_ints(ctx: InferContext, i: int) -> list[int] | None:
    """Input ``i`` as a list of Python ints when it is a known constant, else None. A ShapeError
    unless the input (known or not) is a 1-D integer tensor."""
    if not ctx.has(i):
        return None
    spec = ctx.inputs[i]
    if spec.dtype not in INT_TYPES or spec.rank != 1:
        raise ctx.error(f"input {i} must be a 1-D integer tensor, got {spec}")
    data = ctx.value(i)
    if data is None:
        return None
    data = np.asarray(data)
    return [int(v) for v in data.reshape(-1)]


def input_length(ctx: InferContext, i: int) -> int:
    """The static length of 1-D input ``i`` (e.g. a runtime shape or axes), or a ShapeError."""
    spec = ctx.inputs[i]
    if spec.rank != 1 or not isinstance(spec.shape[0], int):
        raise ctx.error(f"input {i} must be a 1-D tensor of static length, got {spec}")
    return spec.shape[0]


def ctx_axes(ctx: InferContext, axes, rank: int) -> list[int]:
    """``normalize_axes`` raising a ShapeError naming the node."""
    try:
        return normalize_axes(axes, rank)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


def product(dims) -> Dim:
    """Product of dims; a lone symbolic dim times ones stays that symbol, other symbolic mixes
    return None (the caller makes a fresh symbol)."""
    syms = [d for d in dims if isinstance(d, str)]
    known = math.prod(d for d in dims if isinstance(d, int))
    if not syms:
        return known
    if len(syms) == 1 and known == 1:
        return syms[0]
    return None


def trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C and ONNX semantics), exact for all int widths."""
    if np.any(b == 0):
        raise ZeroDivisionError("integer division by zero")
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    remainder = np.fmod(a, b)
    return ((a - remainder) // b).astype(np.result_type(a, b))

"""Split along ``axis`` into parts given by the ``split`` input (sizes) or the ``num_outputs``
attribute (opset 18: equal parts of ceil(dim / num_outputs), the last one smaller). Exactly one
of the two must be given (the converter maps older opsets' implicit equal split to num_outputs)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, random


def split_sizes(dim: int, split, num_outputs) -> list[int]:
    """The part sizes; raises ValueError when they cannot cover ``dim``."""
    if (split is None) == (num_outputs is None):
        raise ValueError("give exactly one of the 'split' input and the 'num_outputs' attribute")
    if split is not None:
        split = [int(s) for s in split]
        if any(s < 0 for s in split) or sum(split) != dim:
            raise ValueError(f"split {split} does not add up to dim {dim}")
        return split
    if num_outputs < 1:
        raise ValueError(f"num_outputs must be >= 1, got {num_outputs}")
    part = -(-dim // num_outputs)
    last = dim - part * (num_outputs - 1)
    if last < 0:
        raise ValueError(f"dim {dim} cannot be split into {num_outputs} parts of {part}")
    return [part] * (num_outputs - 1) + [last]


def _rule(ctx: InferContext) -> list[TensorSpec]:
    x = ctx.inputs[0]
    if x.rank == 0:
        raise ctx.error("input must have rank >= 1")
    axis = ctx.axis(ctx.attrs["axis"], x.rank)
    num_outputs, n_out = ctx.attrs["num_outputs"], len(ctx.node.outputs)
    split = const_ints(ctx, 1)
    if ctx.has(1) and num_outputs is not None:
        raise ctx.error("give exactly one of the 'split' input and the 'num_outputs' attribute")
    if not ctx.has(1) and num_outputs is None:
        raise ctx.error("needs the 'split' input or the 'num_outputs' attribute")
    if split is not None and len(split) != n_out or num_outputs is not None and num_outputs != n_out:
        raise ctx.error(f"node has {n_out} outputs but splits into {len(split) if split else num_outputs}")
    dim = x.shape[axis]
    if isinstance(dim, str) or (ctx.has(1) and split is None):
        sizes = [ctx.symbol() for _ in range(n_out)]
    else:
        try:
            sizes = split_sizes(dim, split, num_outputs)
        except ValueError as exc:
            raise ctx.error(str(exc)) from None
    return [TensorSpec(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes]


@register_kernel("Split", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def split(x, split=None, *, axis=0, num_outputs=None):
    sizes = split_sizes(x.shape[axis], None if split is None else list(split), num_outputs)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _samples(rng, dtype):
    x = random(rng, (4, 6), dtype)
    cases = [([x], {"axis": 1, "num_outputs": 3}), ([x], {"axis": 0, "num_outputs": 2}),
             ([random(rng, (2, 7), dtype)], {"axis": -1, "num_outputs": 3}),
             ([x, np.array([1, 2, 3], np.int64)], {"axis": 1}), ([x, np.array([4], np.int64)], {}),
             ([x, np.array([0, 4], np.int64)], {})]
    for inputs, attrs in cases:  # variadic outputs: tell the harness how many
        n = attrs.get("num_outputs") or len(inputs[1])
        yield inputs, attrs, {"n_outputs": n}


register_op("Split", inputs=["input", "split?"], outputs=["outputs*"], attrs={"axis": ("int", 0),
            "num_outputs": ("int", None)}, infer=_rule, samples=_samples)

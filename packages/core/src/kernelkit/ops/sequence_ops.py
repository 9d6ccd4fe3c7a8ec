"""ReverseSequence(input, sequence_lens): reverse the first ``sequence_lens[b]`` entries along
``time_axis`` for each batch entry b (along ``batch_axis``); Unique(X): the distinct values
(sorted, or in order of first occurrence with ``sorted=0``) of X or of its slices along ``axis``,
with their first indices, the inverse map and the counts (int64)."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES, NUMERIC_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


@register_kernel("ReverseSequence", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def reverse_sequence(x, sequence_lens, *, batch_axis=1, time_axis=0):
    out = x.copy()
    steps = x.shape[time_axis]
    for b, n in enumerate(np.asarray(sequence_lens).reshape(-1)):
        n = int(n)
        if not 0 <= n <= steps:
            raise ValueError(f"sequence_lens[{b}] = {n} is out of range for {steps} steps")
        src = [slice(None)] * x.ndim
        src[batch_axis], src[time_axis] = b, slice(n - 1 if n else 0, None, -1) if n else slice(0, 0)
        dst = list(src)
        dst[time_axis] = slice(0, n)
        out[tuple(dst)] = x[tuple(src)]
    return out


def _reverse_rule(ctx: InferContext) -> TensorSpec:
    x, lens = ctx.inputs
    if x.rank < 2 or lens.rank != 1:
        raise ctx.error(f"input must have rank >= 2 and sequence_lens rank 1, got {x} and {lens}")
    if {ctx.attrs["batch_axis"], ctx.attrs["time_axis"]} != {0, 1}:
        raise ctx.error("batch_axis and time_axis must be 0 and 1")
    return x


@register_kernel("Unique", device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)
def unique(x, *, axis=None, sorted=1):
    data = x.reshape(-1) if axis is None else np.moveaxis(x, axis, 0)
    flat = data.reshape(len(data), -1) if data.ndim > 1 else data
    values, first, inverse, counts = np.unique(flat, axis=0 if flat.ndim > 1 else None, return_index=True,
                                               return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    if not sorted:  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values, first, counts, inverse = values[order], first[order], counts[order], rank[inverse]
    if axis is not None:
        values = np.moveaxis(values.reshape((-1,) + data.shape[1:]), 0, axis)
    i64 = np.int64
    return values.astype(x.dtype), first.astype(i64), inverse.astype(i64), counts.astype(i64)


def _unique_rule(ctx: InferContext) -> list[TensorSpec]:
    x, axis = ctx.inputs[0], ctx.attrs["axis"]
    n = ctx.symbol()
    if axis is None:
        y = TensorSpec((n,), x.dtype)
        inverse = TensorSpec((x.shape[0] if x.rank == 1 else ctx.symbol(),), "int64")
    else:
        axis = ctx.axis(axis, x.rank)
        y = TensorSpec(x.shape[:axis] + (n,) + x.shape[axis + 1:], x.dtype)
        inverse = TensorSpec((x.shape[axis],), "int64")
    return [y, TensorSpec((n,), "int64"), inverse, TensorSpec((n,), "int64")]


def _reverse_samples(rng, dtype):
    yield [random(rng, (4, 3, 2), dtype), np.array([4, 1, 3], np.int64)], {}
    yield [random(rng, (3, 4), dtype), np.array([1, 2, 3], np.int64)], {"batch_axis": 0, "time_axis": 1}


def _unique_samples(rng, dtype):
    x = random(rng, (12,), dtype, -3, 3)
    yield [x], {}
    yield [x], {"sorted": 0}
    yield [np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], dtype)], {"axis": 0}


register_op("ReverseSequence", inputs=["input", "sequence_lens"], outputs=["Y"],
            attrs={"batch_axis": ("int", 1), "time_axis": ("int", 0)}, infer=_reverse_rule,
            samples=_reverse_samples)
register_op("Unique", inputs=["X"], outputs=["Y", "indices?", "inverse_indices?", "counts?"],
            attrs={"axis": ("int", None), "sorted": ("int", 1)}, infer=_unique_rule, samples=_unique_samples)

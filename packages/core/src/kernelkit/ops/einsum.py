"""Einsum(inputs..., equation): NumPy's ``einsum`` (explicit or implicit output, ellipses);
``optimize=True`` contracts pairwise through BLAS batched GEMMs. Integer inputs accumulate in
their own dtype."""
from __future__ import annotations

import numpy as np

from ..dtypes import NUMERIC_TYPES
from ..ir import TensorSpec
from ..registry import REQUIRED, register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _output_dims(equation: str, shapes) -> list:
    """The output's dims from the equation (symbolic dims pass through where a label maps them)."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, got {len(shapes)} inputs")
    sizes, ellipsis = {}, ()
    for term, shape in zip(terms, shapes):
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            ell = tuple(shape[len(head):len(head) + n_ell])
            ellipsis = ell if len(ell) >= len(ellipsis) else ellipsis
            labels = list(head) + [None] * n_ell + list(tail)
        else:
            labels = list(term)
        if len(labels) != len(shape):
            raise ValueError(f"term {term!r} does not match the rank of {tuple(shape)}")
        for label, dim in zip(labels, shape):
            if label is not None and (label not in sizes or sizes[label] == 1):
                sizes[label] = dim
    if not _:
        counts = {c: lhs.count(c) for c in set(lhs) if c.isalpha()}
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(c for c, n in counts.items() if n == 1))
    head, _, tail = rhs.partition("...")
    return [sizes[c] for c in head] + (list(ellipsis) if "..." in rhs else []) + [sizes[c] for c in tail]


def _rule(ctx: InferContext) -> TensorSpec:
    specs = ctx.inputs
    try:
        dims = _output_dims(ctx.attrs["equation"], [s.shape for s in specs])
    except (ValueError, KeyError) as exc:
        raise ctx.error(f"equation {ctx.attrs['equation']!r}: {exc}") from None
    return TensorSpec(tuple(dims), specs[0].dtype)


@register_kernel("Einsum", device="cpu", vendor="reference", dtype=NUMERIC_TYPES, priority=-100)
def einsum(*inputs, equation):
    out = np.einsum(equation.replace(" ", ""), *inputs, optimize=len(inputs) > 1)
    return np.asarray(out, dtype=inputs[0].dtype)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype)

    yield [r(2, 3, 4), r(2, 4, 5)], {"equation": "bij,bjk->bik"}
    yield [r(3, 4)], {"equation": "ij->ji"}
    yield [r(2, 3, 4, 5), r(2, 3, 5, 4)], {"equation": "...ij,...jk"}
    yield [r(3), r(3)], {"equation": "i,i"}
    yield [r(2, 4, 3, 8), r(2, 5, 3, 8)], {"equation": "bqhd,bkhd->bhqk"}


register_op("Einsum", inputs=["Inputs*"], outputs=["Output"], attrs={"equation": ("string", REQUIRED)},
            infer=_rule, samples=_samples)

"""Reshape(data, shape): 0 copies the input's dim (unless ``allowzero``, then it is a real 0) and
one -1 is inferred from the element count."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, input_length, product, random


def resolve_shape(in_shape, target, allowzero: int) -> list:
    """The output shape for ``target``; dims may be symbolic (str) on input. A -1 that cannot be
    computed statically comes back as None. Raises ValueError on an impossible request."""
    if sum(1 for t in target if t == -1) > 1:
        raise ValueError(f"shape {list(target)} has more than one -1")
    if any(t < -1 for t in target):
        raise ValueError(f"shape {list(target)} has a negative dim other than -1")
    if allowzero and 0 in target and -1 in target:
        raise ValueError(f"shape {list(target)} has both 0 and -1 with allowzero=1")
    out = []
    for i, t in enumerate(target):
        if t == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError(f"shape {list(target)} copies dim {i} of a rank-{len(in_shape)} input")
            out.append(in_shape[i])
        else:
            out.append(t)
    total, known = product(in_shape), product([d for d in out if d != -1])
    if -1 in out:
        if isinstance(total, int) and isinstance(known, int):
            if known == 0 or total % known:
                raise ValueError(f"cannot reshape {tuple(in_shape)} into {list(target)}")
            out[out.index(-1)] = total // known
        else:  # cancel symbols shared by input and output, then see what is left
            rest_in = list(in_shape)
            for d in out:
                if isinstance(d, str) and d in rest_in:
                    rest_in.remove(d)
            rest_out = [d for d in out if d != -1 and not (isinstance(d, str) and d in in_shape)]
            num, den = product(rest_in), product(rest_out)
            if isinstance(den, int) and den == 1 and num is not None:
                out[out.index(-1)] = num
            elif isinstance(num, int) and isinstance(den, int) and den and num % den == 0:
                out[out.index(-1)] = num // den
            else:
                out[out.index(-1)] = None
    elif isinstance(total, int) and isinstance(known, int) and total != known:
        raise ValueError(f"cannot reshape {tuple(in_shape)} ({total} elements) into {list(target)}")
    return out


def _rule(ctx: InferContext) -> TensorSpec:
    data = ctx.inputs[0]
    target = const_ints(ctx, 1)
    if target is None:
        return TensorSpec(tuple(ctx.symbol() for _ in range(input_length(ctx, 1))), data.dtype)
    try:
        shape = resolve_shape(data.shape, target, ctx.attrs["allowzero"])
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    return TensorSpec(tuple(ctx.symbol() if d is None else d for d in shape), data.dtype)


@register_kernel("Reshape", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def reshape(data, shape, *, allowzero=0):
    return data.reshape(resolve_shape(data.shape, [int(s) for s in shape], allowzero))


def _samples(rng, dtype):
    x = random(rng, (2, 3, 4), dtype)
    for shape in ([4, 6], [-1], [0, -1], [2, 0, 2, 2], [-1, 4, 1], [1, 24]):
        yield [x, np.array(shape, np.int64)], {}
    yield [random(rng, (0, 3), dtype), np.array([3, 0], np.int64)], {"allowzero": 1}
    yield [random(rng, (), dtype), np.array([1, 1], np.int64)], {}


register_op("Reshape", inputs=["data", "shape"], outputs=["reshaped"], attrs={"allowzero": ("int", 0)},
            infer=_rule, samples=_samples)

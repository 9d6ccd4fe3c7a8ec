"""LayerNormalization (ONNX opset 17+): normalize over axes [axis, rank); outputs Y and, when
asked for, Mean and InvStdDev (shape X.shape[:axis] + [1] * (rank - axis), dtype of X)."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import broadcast_shapes
from ._util import into, random
from ._window import compute_dtype

ATTRS = {"axis": ("int", -1), "epsilon": ("float", 1e-5), "stash_type": ("int", 1)}


def _infer(ctx) -> list[TensorSpec]:
    x = ctx.inputs[0]
    if x.rank < 1:
        raise ctx.error("X must have rank >= 1")
    axis = ctx.axis(ctx.attrs["axis"], x.rank)
    if ctx.attrs["stash_type"] != 1:
        raise ctx.error(f"stash_type {ctx.attrs['stash_type']} is not supported (only 1, float32)")
    for name, spec in zip(("Scale", "B"), ctx.inputs[1:]):
        if spec is not None and broadcast_shapes(spec.shape, x.shape[axis:], where=ctx.where) != x.shape[axis:]:
            raise ctx.error(f"{name} {spec} does not broadcast to the normalized shape {x.shape[axis:]}")
    stats = TensorSpec(x.shape[:axis] + (1,) * (x.rank - axis), x.dtype)
    return [x, stats, stats]


def _scratch(input_specs, attrs) -> int:
    """Room for the squared deviations (the variance's terms)."""
    x = input_specs[0]
    return x.size * np.promote_types(compute_dtype(np.dtype(x.dtype)), np.float32).itemsize if x.is_static else 0


@register_kernel("LayerNormalization", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100,
                 scratch=_scratch)
def layer_normalization(x, scale, b=None, *, axis=-1, epsilon=1e-5, output_count=3, out=None, scratch=None):
    ct = np.promote_types(compute_dtype(x.dtype), np.float32)
    axes = tuple(range(axis % x.ndim, x.ndim))
    xc = x.astype(ct, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    direct = out is not None and out.dtype == ct and output_count == 1
    y = np.subtract(xc, mean, out=out if direct else None)  # normalized in place below
    room = scratch is not None and scratch.nbytes >= y.nbytes
    squares = np.square(y, out=scratch[:y.nbytes].view(ct).reshape(y.shape) if room else None)
    inv_std = 1 / np.sqrt(squares.mean(axis=axes, keepdims=True) + ct.type(epsilon))
    y *= inv_std
    y *= scale.astype(ct, copy=False)
    if b is not None:
        y += b.astype(ct, copy=False)
    if output_count == 1:  # Mean and InvStdDev unused
        return (y if direct else into(out, y.astype(x.dtype, copy=False)),)
    return y.astype(x.dtype, copy=False), mean.astype(x.dtype), inv_std.astype(x.dtype)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype)

    yield [r(2, 3, 8), r(8), r(8)], {}
    yield [r(2, 3, 4), r(3, 4), None], {"axis": 1, "epsilon": 1e-3}
    yield [r(4, 6), r(6), r(6)], {"axis": -1}, {"n_outputs": 3}
    yield [r(2, 2, 3, 4), r(2, 3, 4), r(1)], {"axis": -3}, {"n_outputs": 3}
    yield [r(3, 5), r(5), r(5)], {"axis": 0}


register_op("LayerNormalization", inputs=["X", "Scale", "B?"], outputs=["Y", "Mean?", "InvStdDev?"],
            attrs=ATTRS, infer=_infer, samples=_samples)

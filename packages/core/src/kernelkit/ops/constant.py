"""Constant (a tensor given by exactly one of ``value``, ``value_float``, ``value_floats``,
``value_int``, ``value_ints``) and ConstantOfShape (a tensor of a runtime shape filled with the
one element of ``value``, default float32 0). Kernels of input-less ops key on the output dtype."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES, dtype_name
from ..errors import OpAttributeError
from ..ir import TensorSpec
from ..limits import check_tensor_bytes
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import const_ints, input_length, random

_CONSTANT_ATTRS = {"value": ("tensor", None), "value_float": ("float", None), "value_floats": ("floats", None),
                   "value_int": ("int", None), "value_ints": ("ints", None)}


def constant_value(where: str = "", *, value=None, value_float=None, value_floats=None, value_int=None,
                   value_ints=None) -> np.ndarray:
    """The array a Constant node stands for; OpAttributeError unless exactly one attribute is set."""
    given = {k: v for k, v in {"value": value, "value_float": value_float, "value_floats": value_floats,
                               "value_int": value_int, "value_ints": value_ints}.items() if v is not None}
    if len(given) != 1:
        raise OpAttributeError(f"{where}: Constant needs exactly one of {sorted(_CONSTANT_ATTRS)} "
                               f"(sparse_value and strings are unsupported), got {sorted(given) or 'none'}")
    (name, v), = given.items()
    if name == "value":
        dtype_name(v.dtype)  # raises a ShapeError for dtypes kernelkit lacks
        return np.array(v, copy=True)
    return np.array(v, dtype=np.float32 if "float" in name else np.int64)


def _constant_rule(ctx: InferContext) -> TensorSpec:
    return TensorSpec.of(constant_value(ctx.where, **ctx.attrs))


@register_kernel("Constant", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def constant(*, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None):
    return constant_value(value=value, value_float=value_float, value_floats=value_floats, value_int=value_int,
                          value_ints=value_ints)


def _fill(value, where: str = "") -> np.ndarray:
    if value is None:
        return np.zeros((), np.float32)
    if value.size != 1:
        raise OpAttributeError(f"{where}: ConstantOfShape 'value' must hold one element, got shape {value.shape}")
    dtype_name(value.dtype)
    return value.reshape(())


def _constant_of_shape_rule(ctx: InferContext) -> TensorSpec:
    fill = _fill(ctx.attrs["value"], ctx.where)
    if ctx.inputs[0].dtype != "int64":
        raise ctx.error(f"input must be int64, got {ctx.inputs[0].dtype}")
    shape = const_ints(ctx, 0)
    if shape is None:
        return TensorSpec(tuple(ctx.symbol() for _ in range(input_length(ctx, 0))), fill.dtype.name)
    if any(d < 0 for d in shape):
        raise ctx.error(f"shape {shape} has a negative dim")
    return TensorSpec(tuple(shape), fill.dtype.name)


@register_kernel("ConstantOfShape", device="cpu", vendor="reference", dtype="int64", priority=-100)
def constant_of_shape(shape, *, value=None):
    if np.any(shape < 0):
        raise ValueError(f"shape {shape.tolist()} has a negative dim")
    shape = tuple(int(d) for d in shape)
    fill = _fill(value)
    check_tensor_bytes(shape, fill.dtype)
    return np.full(shape, fill)


def _constant_samples(rng, dtype):
    yield [], {"value": random(rng, (2, 3), dtype)}
    yield [], {"value": random(rng, (), dtype)}
    if dtype == "float32":
        yield [], {"value_float": 1.5}
        yield [], {"value_floats": [1.0, -2.5, 3.25]}
    if dtype == "int64":
        yield [], {"value_int": -7}
        yield [], {"value_ints": [4, 5, 6]}


def _constant_of_shape_samples(rng, dtype):
    yield [np.array([2, 3], np.int64)], {}
    yield [np.array([4], np.int64)], {"value": np.array([7], np.int32)}
    yield [np.array([2, 1, 2], np.int64)], {"value": np.array([1.25], np.float64)}
    yield [np.array([], np.int64)], {"value": np.array([True])}
    yield [np.array([3, 0], np.int64)], {"value": np.array([2], np.int64)}


register_op("Constant", inputs=[], outputs=["output"], attrs=_CONSTANT_ATTRS, infer=_constant_rule,
            samples=_constant_samples)
register_op("ConstantOfShape", inputs=["input"], outputs=["output"], attrs={"value": ("tensor", None)},
            infer=_constant_of_shape_rule, samples=_constant_of_shape_samples)

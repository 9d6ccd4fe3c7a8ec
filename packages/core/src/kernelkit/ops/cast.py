"""Cast to the dtype named by ``to`` (an ONNX TensorProto dtype number), and CastLike (to the
dtype of a second input). Float to integer truncates toward zero; anything nonzero is True."""
from __future__ import annotations

import numpy as np

from ..dtypes import ALL_TYPES
from ..errors import OpAttributeError
from ..ir import TensorSpec
from ..registry import REQUIRED, register_kernel, register_op
from ..shape import InferContext
from ._util import random

# onnx.TensorProto.DataType numbers -> kernelkit dtype names (strings, bfloat16, float8 and
# complex types have no kernelkit dtype)
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
               9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
ONNX_DTYPE_NUMBERS = {name: number for number, name in ONNX_DTYPES.items()}


def cast_target(to: int, where: str = "") -> str:
    """The dtype name of Cast's ``to`` (an ONNX TensorProto number); OpAttributeError if unknown."""
    if to not in ONNX_DTYPES:
        raise OpAttributeError(f"{where}: attribute 'to' = {to} is not a supported ONNX dtype; "
                               f"supported: {ONNX_DTYPES}")
    return ONNX_DTYPES[to]


_target = cast_target


def _cast_rule(ctx: InferContext) -> TensorSpec:
    return TensorSpec(ctx.inputs[0].shape, _target(ctx.attrs["to"], ctx.where))


def _convert(x, dtype: str):
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dtype)


@register_kernel("Cast", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def cast(x, *, to, saturate=1):
    return _convert(x, _target(to))


@register_kernel("CastLike", device="cpu", vendor="reference", dtype=ALL_TYPES, priority=-100)
def cast_like(x, target_type, *, saturate=1):
    return _convert(x, target_type.dtype.name)


def _values(rng, dtype):
    if dtype == "bool":
        return random(rng, (3, 4), dtype)
    if np.dtype(dtype).kind == "u":
        return random(rng, (3, 4), dtype, 0, 100)
    return random(rng, (3, 4), dtype, -100, 100)


def _cast_samples(rng, dtype):
    x = _values(rng, dtype)
    for target in ("float32", "float64", "int64", "int32", "uint8", "bool", "float16"):
        if np.dtype(dtype).kind != "f" or target not in ("uint8",):  # negative floats -> uint: undefined
            yield [x], {"to": ONNX_DTYPE_NUMBERS[target]}


def _cast_like_samples(rng, dtype):
    x = _values(rng, dtype)
    for target in ("float32", "int64", "bool"):
        yield [x, np.zeros((1,), target)], {}


register_op("Cast", inputs=["input"], outputs=["output"], attrs={"to": ("int", REQUIRED), "saturate": ("int", 1)},
            infer=_cast_rule, samples=_cast_samples)
register_op("CastLike", inputs=["input", "target_type"], outputs=["output"], attrs={"saturate": ("int", 1)},
            infer=lambda ctx: TensorSpec(ctx.inputs[0].shape, ctx.inputs[1].dtype), samples=_cast_like_samples)

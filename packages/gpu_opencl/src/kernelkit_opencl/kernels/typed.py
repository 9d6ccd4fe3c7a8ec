"""Comparisons (bool out), boolean logic, Not, Where, Cast/CastLike and integer Add/Sub/Mul/Div/
Max/Min from one table-driven program (``typed.cl``), built once per device and element type
(``-D TA=...``); index.py and scan.py launch its other kernels.

Element types: float32, int32, int64, int8, uint8 and bool (stored as uchar 0/1). Cast targets
the same types plus float16 (stored with ``vstore_half``); float64 and the wider unsigned types
are declined through ``supports`` (the node runs on the CPU).
"""
from __future__ import annotations

import functools

import numpy as np
from kernelkit import InputError, ShapeError, broadcast_shapes, register_kernel
from kernelkit.ops.cast import ONNX_DTYPES

from ._common import launch_1d, launch_vec, source
from .elementwise import broadcast_strides, collapse

# kernelkit dtype -> OpenCL C storage type
CTYPES = {"float32": "float", "int32": "int", "int64": "long", "int8": "char", "uint8": "uchar", "bool": "uchar"}
NUMERIC = ("float32", "int32", "int64", "int8", "uint8")

# op: (expression of x, y of type TA; dtypes)
COMPARE = {
    "Equal": ("x == y", NUMERIC + ("bool",)),
    "Less": ("x < y", NUMERIC),
    "LessOrEqual": ("x <= y", NUMERIC),
    "Greater": ("x > y", NUMERIC),
    "GreaterOrEqual": ("x >= y", NUMERIC),
    "And": ("(x != 0) && (y != 0)", ("bool",)),
    "Or": ("(x != 0) || (y != 0)", ("bool",)),
    "Xor": ("(x != 0) != (y != 0)", ("bool",)),
}

# integer arithmetic (floats use elementwise.BINARY): op -> expression of x, y of type TA. Division
# by zero is refused in Python before launch; y == -1 negates (INT_MIN / -1 wraps, as NumPy).
INT_DTYPES = ("int32", "int64", "int8", "uint8")
ARITH = {
    "Add": "(UTA)x + (UTA)y",
    "Sub": "(UTA)x - (UTA)y",
    "Mul": "(UTA)x * (UTA)y",
    "Div": "(y == (TA)-1 && (TA)-1 < 0) ? (TA)((UTA)0 - (UTA)x) : x / y",
    "Max": "max(x, y)",
    "Min": "min(x, y)",
}
UNSIGNED = {"float": "float", "int": "uint", "long": "ulong", "char": "uchar", "uchar": "uchar"}

# cast target -> expression of x (float16 has its own kernel, cast_float16)
CAST = {name: f"({ctype})x" for name, ctype in CTYPES.items() if name != "bool"}
CAST["bool"] = "(uchar)(x != 0)"
CAST_TARGETS = tuple(CAST) + ("float16",)


@functools.cache
def program_source() -> str:
    rows = [f"COMPARE({name}, {expr})" for name, (expr, _) in COMPARE.items()]
    rows += [f"ARITH({name}, {expr})" for name, expr in ARITH.items()]
    rows += [f"CAST({name}, {CTYPES[name]}, {expr})" for name, expr in CAST.items()]
    return source("typed.cl") + "\n" + "\n".join(rows) + "\n"


def typed_kernel(device, name: str, dtype):
    """The ``cl.Kernel`` ``name`` of the typed program for element dtype ``dtype`` (built once)."""
    ctype = CTYPES[np.dtype(dtype).name]
    defines = {"TA": ctype, "UTA": UNSIGNED[ctype]}
    if ctype == "float":
        defines["TA_FLOAT"] = 1
    return device.memo(("typed", name, ctype), lambda: device.kernel(program_source(), name, defines))


def _broadcast_meta(dev, out_shape, *tensors):
    """(mode, meta) for kernels reading ``tensors`` broadcast to ``out_shape``."""
    if all(t.shape == tuple(out_shape) for t in tensors):
        return 0, dev.meta([0])
    dims, strides = collapse(out_shape, *(broadcast_strides(t.shape, out_shape) for t in tensors))
    return 1, dev.meta([len(dims), *dims, *(s for st in strides for s in st)])


def _launch_binary(op: str, name: str, a, b, out_dtype):
    """z = name(a, b) over the broadcast shape of two same-dtype device tensors (typed.cl)."""
    dev = a.device
    if a.dtype != b.dtype:
        raise ShapeError(f"{op}: inputs have different dtypes {a.dtype.name} and {b.dtype.name}")
    out_shape = tuple(broadcast_shapes(a.shape, b.shape, where=op))
    z = dev.empty(out_shape, out_dtype)
    if z.size:
        mode, meta = _broadcast_meta(dev, out_shape, a, b)
        launch_1d(dev, typed_kernel(dev, name, a.dtype), z.size,
                  (a.buffer, b.buffer, z.buffer, np.int32(z.size), meta, np.int32(mode)), [a, b], [z], op)
    return z


def _compare(op: str):
    def kernel(a, b):
        return _launch_binary(op, f"compare_{op}", a, b, np.bool_)

    kernel.__name__ = kernel.__qualname__ = f"opencl_{op.lower()}"
    kernel.__doc__ = f"{op}: bool z = {COMPARE[op][0]} with broadcasting (OpenCL, typed.COMPARE)"
    return kernel


def _arith(op: str):
    def kernel(a, b):
        if op == "Div" and a.dtype == b.dtype and b.size and not np.all(np.asarray(b.values())):
            raise InputError(f"Div: integer division by zero ({a.dtype.name})")  # blocks unless b is small
        return _launch_binary(op, f"arith_{op}", a, b, a.dtype)

    kernel.__name__ = kernel.__qualname__ = f"opencl_int_{op.lower()}"
    kernel.__doc__ = f"integer {op}: z = {ARITH[op]} with broadcasting (OpenCL, typed.ARITH)"
    if op in ("Max", "Min"):  # variadic, pairwise
        def variadic(*inputs):
            out = inputs[0]
            for other in inputs[1:]:
                out = kernel(out, other)
            return out if len(inputs) > 1 else kernel(out, out)

        variadic.__name__ = variadic.__qualname__ = kernel.__name__
        return variadic
    return kernel


def logical_not(x):
    dev = x.device
    y = dev.empty(x.shape, np.bool_)
    if x.size:
        launch_1d(dev, typed_kernel(dev, "logical_not", x.dtype), x.size,
                  (x.buffer, y.buffer, np.int32(x.size)), [x], [y], "Not")
    return y


def where(condition, x, y):
    dev = x.device
    if x.dtype != y.dtype:
        raise ShapeError(f"Where: X and Y have different dtypes {x.dtype.name} and {y.dtype.name}")
    out_shape = tuple(broadcast_shapes(condition.shape, x.shape, y.shape, where="Where"))
    z = dev.empty(out_shape, x.dtype)
    if z.size:
        mode, meta = _broadcast_meta(dev, out_shape, condition, x, y)
        launch_1d(dev, typed_kernel(dev, "where_select", x.dtype), z.size,
                  (condition.buffer, x.buffer, y.buffer, z.buffer, np.int32(z.size), meta, np.int32(mode)),
                  [condition, x, y], [z], "Where")
    return z


def _cast_to(x, target: str):
    dev = x.device
    y = dev.empty(x.shape, target)
    if x.size:
        launch = launch_vec if target == "float16" else launch_1d  # cast_float16: 4 per work-item
        launch(dev, typed_kernel(dev, f"cast_{target}", x.dtype), x.size,
               (x.buffer, y.buffer, np.int32(x.size)), [x], [y], f"cast_{target}")
    return y


def cast(x, *, to: int, saturate: int = 1):
    return _cast_to(x, ONNX_DTYPES[to])


def cast_like(x, target_type, *, saturate: int = 1):
    return _cast_to(x, target_type.dtype.name)


def _cast_supported(specs, attrs) -> bool:
    return ONNX_DTYPES.get(attrs["to"]) in CAST_TARGETS


def _cast_like_supported(specs, attrs) -> bool:
    return specs[1].dtype in CAST_TARGETS


def register() -> None:
    for op, (_, dtypes) in COMPARE.items():
        register_kernel(op, device="gpu", vendor="opencl", dtype=dtypes)(_compare(op))
    for op in ARITH:
        register_kernel(op, device="gpu", vendor="opencl", dtype=INT_DTYPES)(_arith(op))
    register_kernel("Not", device="gpu", vendor="opencl", dtype="bool")(logical_not)
    register_kernel("Where", device="gpu", vendor="opencl", dtype=tuple(CTYPES))(where)
    register_kernel("Cast", device="gpu", vendor="opencl", dtype=tuple(CTYPES), supports=_cast_supported)(cast)
    register_kernel("CastLike", device="gpu", vendor="opencl", dtype=tuple(CTYPES),
                    supports=_cast_like_supported)(cast_like)

"""Elementwise ops from one generator: a table of op -> OpenCL expression.

Every row becomes one kernel of a single program (``elementwise.cl`` plus one ``UNARY``/``BINARY``
line per row), built once per device and storage dtype. Unary expressions read ``x`` and the
parameters ``a``, ``b`` (taken from the node's attributes by the row's ``params``); binary ones
read ``x`` and ``y`` with NumPy broadcasting. float16 tensors are stored as half and computed in
float, which needs no ``cl_khr_fp16`` (the fp16 policy in docs/opencl.md).
"""
from __future__ import annotations

import functools

import numpy as np
from kernelkit import ShapeError, broadcast_shapes, register_kernel

from ._common import contiguous_strides, launch_vec, source, storage_defines

DTYPES = ("float32", "float16")


def _none(attrs):
    return 0.0, 0.0


# op: (OpenCL expression of float x and parameters a, b; attrs -> (a, b))
UNARY = {
    "Relu": ("(x < 0.0f ? 0.0f : x)", _none),  # NaN stays NaN, as in NumPy (fmax drops it)
    "LeakyRelu": ("(x >= 0.0f ? x : a * x)", lambda at: (at["alpha"], 0.0)),
    "Sigmoid": ("(1.0f / (1.0f + exp(-x)))", _none),
    "HardSigmoid": ("(x != x ? x : clamp(a * x + b, 0.0f, 1.0f))", lambda at: (at["alpha"], at["beta"])),
    "HardSwish": ("(x * clamp(x / 6.0f + 0.5f, 0.0f, 1.0f))", _none),
    "Tanh": ("tanh(x)", _none),
    "Elu": ("(x > 0.0f ? x : a * expm1(x))", lambda at: (at["alpha"], 0.0)),
    "Selu": ("(x > 0.0f ? b * x : b * (a * exp(x) - a))", lambda at: (at["alpha"], at["gamma"])),
    "Softplus": ("(x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x)))", _none),
    "Gelu": ("(a != 0.0f ? 0.5f * x * (1.0f + tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)))"
             " : 0.5f * x * (1.0f + erf(x * 0.7071067811865476f)))",
             lambda at: (1.0 if at["approximate"] == "tanh" else 0.0, 0.0)),
    "Erf": ("erf(x)", _none),
    "Exp": ("exp(x)", _none),
    "Log": ("log(x)", _none),
    "Sqrt": ("sqrt(x)", _none),
    "Reciprocal": ("(1.0f / x)", _none),
    "Neg": ("(-x)", _none),
    "Abs": ("fabs(x)", _none),
    "Floor": ("floor(x)", _none),
    "Ceil": ("ceil(x)", _none),
    "Identity": ("x", _none),
}

# op: OpenCL expression of float x, y
BINARY = {
    "Add": "(x + y)",
    "Sub": "(x - y)",
    "Mul": "(x * y)",
    "Div": "(x / y)",
    "Pow": "pow(x, y)",
    "Max": "((x != x || y != y) ? x + y : fmax(x, y))",  # NaN propagates, as in NumPy
    "Min": "((x != x || y != y) ? x + y : fmin(x, y))",
    "PRelu": "(x < 0.0f ? y * x : x)",
}


@functools.cache
def program_source() -> str:
    rows = [f"UNARY({name}, {expr})" for name, (expr, _) in UNARY.items()]
    rows += [f"BINARY({name}, {expr})" for name, expr in BINARY.items()]
    return source("elementwise.cl") + "\n" + "\n".join(rows) + "\n"


def ew_kernel(device, name: str, dtype):
    """The ``cl.Kernel`` ``name`` of the elementwise program for ``dtype`` (built once)."""
    return device.memo(("ew", name, dtype), lambda: device.kernel(program_source(), name, storage_defines(dtype)))


def _unary(op: str):
    expr, params = UNARY[op]

    def kernel(x, **attrs):
        dev = x.device
        y = dev.empty(x.shape, x.dtype)
        a, b = params(attrs)
        n = x.size
        if n:
            launch_vec(dev, ew_kernel(dev, f"unary_{op}", x.dtype), n,
                      (x.buffer, y.buffer, np.int32(n), np.float32(a), np.float32(b)), [x], [y], op)
        return y

    kernel.__name__ = kernel.__qualname__ = f"opencl_{op.lower()}"
    kernel.__doc__ = f"{op}: y = {expr} (OpenCL, generated from elementwise.UNARY)"
    return kernel


def collapse(shape, *strides_list):
    """Merge adjacent dims that are contiguous for every strides list (fewer index divisions)."""
    dims = [int(d) for d in shape]
    strides = [list(s) for s in strides_list]
    out_dims, out_strides = [], [[] for _ in strides]
    for i, d in enumerate(dims):
        if d == 1:
            continue
        if out_dims and all(s[i] * d == os_[-1] for s, os_ in zip(strides, out_strides)):
            out_dims[-1] *= d
            for s, os_ in zip(strides, out_strides):
                os_[-1] = s[i]
            continue
        out_dims.append(d)
        for s, os_ in zip(strides, out_strides):
            os_.append(s[i])
    return out_dims or [1], [s or [0] for s in out_strides]


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a contiguous ``shape`` broadcast to ``out_shape`` (0 on broadcast dims)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    return [0 if d == 1 and o != 1 else s for d, o, s in zip(shape, out_shape, contiguous_strides(shape))]


def binary(op: str, x, y, where: str = ""):
    """``op`` of two device tensors with NumPy broadcasting."""
    dev = x.device
    if x.dtype != y.dtype:
        raise ShapeError(f"{where or op}: inputs have different dtypes {x.dtype.name} and {y.dtype.name}")
    out_shape = tuple(broadcast_shapes(x.shape, y.shape, where=where or op))
    z = dev.empty(out_shape, x.dtype)
    n = z.size
    if not n:
        return z
    if x.shape == y.shape:
        mode, meta = 0, dev.meta([0])
    elif y.size == 1 and x.size == n:
        mode, meta = 1, dev.meta([0])
    elif x.size == 1 and y.size == n:
        mode, meta = 2, dev.meta([0])
    else:
        dims, (sa, sb) = collapse(out_shape, broadcast_strides(x.shape, out_shape),
                                  broadcast_strides(y.shape, out_shape))
        mode, meta = 3, dev.meta([len(dims), *dims, *sa, *sb])
    launch_vec(dev, ew_kernel(dev, f"binary_{op}", x.dtype), n,
              (x.buffer, y.buffer, z.buffer, np.int32(n), meta, np.int32(mode)), [x, y], [z], op)
    return z


def _binary(op: str):
    def kernel(x, y):
        return binary(op, x, y)

    kernel.__name__ = kernel.__qualname__ = f"opencl_{op.lower()}"
    kernel.__doc__ = f"{op}: z = {BINARY[op]} with broadcasting (OpenCL, generated from elementwise.BINARY)"
    return kernel


def _variadic(op: str):
    def kernel(*inputs):
        out = inputs[0]
        for other in inputs[1:]:
            out = binary(op, out, other)
        if len(inputs) == 1:
            out = binary(op, out, out)  # max(x, x) == x, as a fresh tensor
        return out

    kernel.__name__ = kernel.__qualname__ = f"opencl_{op.lower()}"
    kernel.__doc__ = f"{op} over any number of inputs with broadcasting (OpenCL, pairwise)"
    return kernel


def cast_half(x, *, to: int, saturate: int = 1):
    """Cast from float16 (half storage) to float32, or to float16 (a copy)."""
    dev = x.device
    y = dev.empty(x.shape, np.float32 if to == 1 else np.float16)
    if x.size:
        name = "to_float" if to == 1 else "unary_Identity"
        args = (x.buffer, y.buffer, np.int32(x.size)) if to == 1 else (x.buffer, y.buffer, np.int32(x.size),
                                                                       np.float32(0), np.float32(0))
        launch_vec(dev, ew_kernel(dev, name, x.dtype), x.size, args, [x], [y], f"cast float16->{y.dtype}")
    return y


def register() -> None:
    register_kernel("Cast", device="gpu", vendor="opencl", dtype="float16",
                    supports=lambda specs, attrs: attrs.get("to") in (1, 10))(cast_half)
    for op in UNARY:
        register_kernel(op, device="gpu", vendor="opencl", dtype=DTYPES)(_unary(op))
    for op in BINARY:
        maker = _variadic if op in ("Max", "Min") else _binary
        supports = _same_dtypes if op == "Pow" else None  # Pow's exponent may have another dtype
        register_kernel(op, device="gpu", vendor="opencl", dtype=DTYPES, supports=supports)(maker(op))


def _same_dtypes(specs, attrs) -> bool:
    return len({s.dtype for s in specs if s is not None}) == 1

"""The built-in defines OpenVINO puts before a custom layer's sources, and the user defines.

For every bound tensor (INPUT0, OUTPUT0, ...; numbered by port) it writes _DIMS, _DIMS_SIZE,
_TYPE, _FORMAT_<fmt>, _LOWER_PADDING, _UPPER_PADDING (and _SIZE), _PITCHES (and _SIZE) and
_OFFSET; arrays are always in BFYX order and pitches count elements. Tensors of rank below 4 are
padded with trailing 1s (N,C,L -> B=N, F=C, Y=L, X=1).
"""
from __future__ import annotations

import numpy as np
from kernelkit.errors import KernelBuildError

from .config import LayerConfig, format_value

CL_TYPES = {"float32": "float", "float16": "half", "float64": "double", "int8": "char", "uint8": "uchar",
            "int16": "short", "uint16": "ushort", "int32": "int", "uint32": "uint", "int64": "long",
            "uint64": "ulong"}
_ORDER = {"BFYX": "BFYX", "BYXF": "BYXF", "YXFB": "YXFB", "FYXB": "FYXB"}  # memory order, outermost first


def bfyx(shape, where: str) -> tuple[int, int, int, int]:
    """A shape as (B, F, Y, X)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > 4:
        raise KernelBuildError(f"{where}: custom OpenCL layers take tensors of rank <= 4 (BFYX), got {shape}")
    return shape + (1,) * (4 - len(shape))  # type: ignore[return-value]


def pitches(dims: tuple[int, ...], fmt: str) -> tuple[int, int, int, int]:
    """Element strides of a tensor stored in ``fmt``, listed in BFYX order."""
    order = _ORDER[fmt]
    size = dict(zip("BFYX", dims))
    out, step = {}, 1
    for axis in reversed(order):
        out[axis] = step
        step *= size[axis]
    return tuple(out[a] for a in "BFYX")  # type: ignore[return-value]


def _array(kind: str, values) -> str:
    body = ",".join(str(int(v)) for v in values)
    return f"({kind} []){{ {body}, }}" if values else f"({kind} []){{  }}"


def tensor_defines(prefix: str, dims, dtype: str, fmt: str, where: str) -> list[str]:
    cl_type = CL_TYPES.get(np.dtype(dtype).name)
    if cl_type is None:
        raise KernelBuildError(f"{where}: dtype {dtype} has no OpenCL type for custom layers")
    zeros = (0, 0, 0, 0)
    return [
        f"#define {prefix}_DIMS_SIZE 4",
        f"#define {prefix}_DIMS {_array('int', dims)}",
        f"#define {prefix}_TYPE {cl_type}",
        f"#define {prefix}_FORMAT_{fmt} ",
        f"#define {prefix}_LOWER_PADDING_SIZE 4",
        f"#define {prefix}_LOWER_PADDING {_array('int', zeros)}",
        f"#define {prefix}_UPPER_PADDING_SIZE 4",
        f"#define {prefix}_UPPER_PADDING {_array('int', zeros)}",
        f"#define {prefix}_PITCHES_SIZE 4",
        f"#define {prefix}_PITCHES {_array('int', pitches(dims, fmt))}",
        f"#define {prefix}_OFFSET 0",
    ]


def user_defines(layer: LayerConfig, attrs: dict, where: str) -> list[str]:
    """``#define`` lines of the config: static ones as written, bound ones from the node's attributes."""
    lines = []
    for d in layer.defines:
        if d.param is None:
            value = d.default if d.default is not None else ""
            text = format_value(d.type, value, d.where) if d.type and value != "" else value
            lines.append(f"#define {d.name} {text}".rstrip())
            continue
        value = attrs.get(d.param)
        if value is None or (isinstance(value, (tuple, list)) and not value and d.default is not None):
            value = d.default
        if value is None:
            raise KernelBuildError(f"{where}: define {d.name!r} ({d.where}) needs attribute {d.param!r}, "
                                   f"which the node lacks and the config gives no default for")
        lines.append(f"#define {d.name} {format_value(d.type, value, d.where)}")
    return lines


def program_source(layer: LayerConfig, node_name: str, inputs: list, outputs: list, attrs: dict,
                   global_ws: tuple[int, ...], local_ws: tuple[int, ...]) -> str:
    """The full program text: built-ins, user defines, then the sources in order.

    ``inputs``/``outputs`` are ``(port, dims, dtype, format)`` for each bound tensor."""
    where = f"node {node_name!r} (custom layer {layer.op_id} from {layer.file})"
    lines = ["// Custom Layer Built-ins",
             f"#define NUM_INPUTS {len(inputs)}",
             f"#define GLOBAL_WORKSIZE_SIZE {len(global_ws)}",
             f"#define GLOBAL_WORKSIZE {_array('size_t', global_ws)}",
             f"#define LOCAL_WORKSIZE_SIZE {len(local_ws)}",
             f"#define LOCAL_WORKSIZE {_array('size_t', local_ws)}"]
    for prefix, tensors in (("INPUT", inputs), ("OUTPUT", outputs)):
        for port, dims, dtype, fmt in tensors:
            lines += tensor_defines(f"{prefix}{port}", dims, dtype, fmt, where)
    lines += ["", f"// Layer {node_name} using Custom Layer {layer.op_id}", "// Custom Layer User Defines"]
    lines += user_defines(layer, attrs, where)
    return "\n".join(lines) + "\n" + layer.source_text()

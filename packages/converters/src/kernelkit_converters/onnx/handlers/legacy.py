"""Handlers that map older (or differently shaped) ONNX op versions onto opset 21's form.

One small function per rewrite, registered for the since_versions it covers.
"""
from __future__ import annotations

import numpy as np
from kernelkit.errors import ModelFormatError, UnsupportedOpError
from kernelkit.ir import TensorSpec, Value

from . import ConvertContext, OnnxNode, register_handler

REDUCE_AXES_ATTR = {  # op: since_versions that take ``axes`` as an attribute
    "ReduceSum": (11,), "ReduceMean": (11, 13), "ReduceMax": (11, 12, 13), "ReduceMin": (11, 12, 13),
    "ReduceProd": (11, 13),
}


def _axes_to_input(node: OnnxNode, ctx: ConvertContext):
    """Move the ``axes`` attribute to the second input (absent attribute: absent input)."""
    attrs = dict(node.attrs)
    axes = attrs.pop("axes", None)
    inputs = [node.input(0)]
    if axes is not None:
        inputs.append(ctx.constant(np.asarray(axes, np.int64), f"{node.name}_axes"))
    return [ctx.make_node(node, inputs=inputs, attrs=attrs)]


for _op, _versions in REDUCE_AXES_ATTR.items():
    register_handler(_op, *_versions)(_axes_to_input)
register_handler("Squeeze", 11)(_axes_to_input)
register_handler("Unsqueeze", 11)(_axes_to_input)


@register_handler("Split", 11, 13)
def split_legacy(node: OnnxNode, ctx: ConvertContext):
    """Split 11 takes ``split`` as an attribute; 11 and 13 split equally into the outputs without it
    (opset 18+ says so with ``num_outputs``)."""
    attrs = dict(node.attrs)
    split = attrs.pop("split", None)
    inputs = [node.input(0)]
    if split is not None:
        inputs.append(ctx.constant(np.asarray(split, np.int64), f"{node.name}_split"))
    elif node.input(1):
        inputs.append(node.input(1))
    else:
        attrs["num_outputs"] = len(node.outputs)
    return [ctx.make_node(node, inputs=inputs, attrs=attrs)]


@register_handler("Softmax", 11)
@register_handler("LogSoftmax", 11)
def softmax_legacy(node: OnnxNode, ctx: ConvertContext):
    """Before opset 13 Softmax flattens the input to 2-D at ``axis`` (default 1) and normalises each
    row: Flatten -> Softmax(axis=-1) -> Reshape back to the input's shape. When ``axis`` is the
    last axis this is the opset-13 op."""
    x = node.input(0)
    axis = int(node.attrs.get("axis", 1))
    spec = ctx.spec(x)
    if spec is not None and (axis % max(spec.rank, 1) == spec.rank - 1 or spec.rank <= 1):
        return [ctx.make_node(node, attrs={"axis": -1})]
    base = node.name
    flat, rows, shape = ctx.fresh(f"{base}_2d"), ctx.fresh(f"{base}_rows"), ctx.fresh(f"{base}_shape")
    return [
        ctx.make_node(node, op="Flatten", inputs=[x], outputs=[flat], attrs={"axis": axis},
                      name=ctx.fresh(f"{base}_flatten")),
        ctx.make_node(node, inputs=[flat], outputs=[rows], attrs={"axis": -1}),
        ctx.make_node(node, op="Shape", inputs=[x], outputs=[shape], attrs={}, name=ctx.fresh(f"{base}_shapeof")),
        ctx.make_node(node, op="Reshape", inputs=[rows, shape], attrs={}, name=ctx.fresh(f"{base}_reshape")),
    ]


@register_handler("Dropout", 10)
def dropout_10(node: OnnxNode, ctx: ConvertContext):
    """Dropout 10 takes ``ratio`` as an attribute; opset 12+ as an input (inference ignores it)."""
    attrs = dict(node.attrs)
    ratio = attrs.pop("ratio", 0.5)
    inputs = [node.input(0), ctx.constant(np.asarray(ratio, np.float32), f"{node.name}_ratio")]
    return [ctx.make_node(node, inputs=inputs, attrs=attrs)]


@register_handler("Resize", 11, 13, 18, 19)
def resize(node: OnnxNode, ctx: ConvertContext):
    """Exporters mark an absent roi/scales with an empty constant (opset 11 required the inputs):
    turn those into absent inputs. ``tf_half_pixel_for_nn`` (opset 11 only) is not supported."""
    if node.attrs.get("coordinate_transformation_mode") in ("tf_half_pixel_for_nn", b"tf_half_pixel_for_nn"):
        raise UnsupportedOpError(f"{ctx.source}: {node.where}: coordinate_transformation_mode "
                                 f"'tf_half_pixel_for_nn' (removed in opset 13) is not supported")
    inputs = list(node.inputs)
    for i in (1, 2):
        data = ctx.const_value(node.input(i))
        if data is not None and data.size == 0:
            inputs[i] = ""
    while inputs and not inputs[-1]:
        inputs.pop()
    return [ctx.make_node(node, inputs=inputs)]


_CONSTANT_FIELDS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                    "value_ints": np.int64}


@register_handler("Constant", 11, 12, 13, 19, 21, 23, 24, 25)
def constant(node: OnnxNode, ctx: ConvertContext):
    """Constant nodes become graph constants."""
    if len(node.attrs) != 1:
        raise ModelFormatError(f"{ctx.source}: {node.where}: Constant needs exactly one value attribute, "
                               f"got {sorted(node.attrs)}")
    (key, value), = node.attrs.items()
    if key == "value":
        data = np.asarray(value)
    elif key in _CONSTANT_FIELDS:
        data = np.asarray(value, _CONSTANT_FIELDS[key])
    else:
        raise UnsupportedOpError(f"{ctx.source}: {node.where}: Constant with {key!r} is not supported "
                                 f"(kernelkit has no string or sparse tensors)")
    data = np.array(data, copy=True)
    data.flags.writeable = False
    out = node.outputs[0]
    ctx.graph.values[out] = Value(out, TensorSpec.of(data), data)
    return []

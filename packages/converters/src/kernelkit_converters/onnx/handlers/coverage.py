"""Handlers for the ops added to cover what exporters emit and ONNX's node tests (issue 14).

``SAME_FORM`` lists, as standard.py does, the ONNX ``since_version``s whose inputs and attributes
already are kernelkit's form (later versions only add dtypes); the functions below rewrite the
versions that differ.
"""
from __future__ import annotations

import numpy as np
from kernelkit.errors import UnsupportedOpError

from . import passthrough, register_handler
from .legacy import _axes_to_input, softmax_legacy

SAME_FORM: dict[str, tuple[int, ...]] = {
    # elementwise
    "Mod": (10, 13, 28), "BitShift": (11, 28), "BitwiseAnd": (18,), "BitwiseOr": (18,), "BitwiseXor": (18,),
    "BitwiseNot": (18,), "Mish": (18, 22), "Celu": (12, 28), "Softsign": (1, 22), "Swish": (24,), "Shrink": (9,),
    "ThresholdedRelu": (10, 22), "Sign": (9, 13), "Round": (11, 22), "Sin": (7, 22), "Cos": (7, 22),
    "Tan": (7, 22), "Asin": (7, 22), "Acos": (7, 22), "Atan": (7, 22), "Sinh": (9, 22), "Cosh": (9, 22),
    "Asinh": (9, 22), "Acosh": (9, 22), "Atanh": (9, 22), "IsNaN": (9, 13, 20), "IsInf": (10, 20),
    # reductions (axes as an input from 18; 11 and 13 below)
    "ReduceL1": (18,), "ReduceL2": (18,), "ReduceSumSquare": (18,), "ReduceLogSum": (18, 28),
    "ReduceLogSumExp": (18, 28),
    # indexing
    "GatherND": (11, 12, 13), "ScatterND": (11, 13, 16, 18), "ScatterElements": (11, 13, 16, 18),
    "Trilu": (14,), "OneHot": (11, 28), "NonZero": (9, 13), "Compress": (11, 28),
    "ReverseSequence": (10, 28), "Unique": (11, 28), "CumProd": (26,), "EyeLike": (9, 22), "Hardmax": (13,),
    "Einsum": (12, 28), "Det": (11, 22), "SwiGLU": (28,), "TensorScatter": (24,), "BitCast": (26,),
    "CenterCropPad": (18,), "AffineGrid": (20,), "Col2Im": (18,), "MaxUnpool": (11, 22),
    "LpPool": (11, 18, 22),  # 11 lacks dilations and ceil_mode (defaults)
    "DeformConv": (19, 22),
    # signal
    "DFT": (20,), "STFT": (17,), "HannWindow": (17,), "HammingWindow": (17,), "BlackmanWindow": (17,),
    "MelWeightMatrix": (17,),
    # normalization
    "LpNormalization": (1, 22), "GroupNormalization": (21,), "RMSNormalization": (23,),
    "MeanVarianceNormalization": (9, 13),
    # recurrent (7 lacks ``layout``: its default 0 is 7's form) and detection
    "RNN": (7, 14, 22), "GRU": (7, 14, 22), "LSTM": (7, 14, 22), "NonMaxSuppression": (11,),
    "RoiAlign": (16, 22),
    # attention and losses
    "GridSample": (20, 22), "Attention": (23, 24, 25), "RotaryEmbedding": (23,),
    "LinearAttention": (27,), "CausalConvWithState": (27,), "NegativeLogLikelihoodLoss": (12, 13, 22),
    "SoftmaxCrossEntropyLoss": (12, 13),
}

for _op, _versions in SAME_FORM.items():
    register_handler(_op, *_versions)(passthrough)
for _op in ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"):
    register_handler(_op, 11, 13)(_axes_to_input)


@register_handler("Scatter", 11)
def scatter(node, ctx):
    """Scatter (deprecated in opset 11) is ScatterElements."""
    return [ctx.make_node(node, op="ScatterElements")]


register_handler("Hardmax", 11)(softmax_legacy)  # "flatten to 2-D at axis", as Softmax 11


@register_handler("RoiAlign", 10)
def roi_align_10(node, ctx):
    """RoiAlign 10 has no ``coordinate_transformation_mode``: it behaved as ``output_half_pixel``."""
    return [ctx.make_node(node, attrs={**node.attrs, "coordinate_transformation_mode": "output_half_pixel"})]


@register_handler("GroupNormalization", 18)
def group_normalization_18(node, ctx):
    """GroupNormalization 18 takes scale and bias per group; opset 21 per channel: each group's
    value repeated over its channels (Reshape to (G, 1), Expand to (G, C/G), Reshape to (C,))."""
    groups = int(node.attrs["num_groups"])
    spec = ctx.spec(node.input(0))
    channels = spec.shape[1] if spec is not None and spec.rank >= 2 else None
    if not isinstance(channels, int) or groups <= 0 or channels % groups:
        raise UnsupportedOpError(f"{ctx.source}: {node.where}: GroupNormalization 18 needs a static channel "
                                 f"count divisible by num_groups={groups}, got {spec}")
    col = ctx.constant(np.array([groups, 1], np.int64), f"{node.name}_col")
    wide = ctx.constant(np.array([groups, channels // groups], np.int64), f"{node.name}_wide")
    flat = ctx.constant(np.array([channels], np.int64), f"{node.name}_flat")
    nodes, inputs = [], [node.input(0)]
    for i in (1, 2):
        steps = [ctx.fresh(f"{node.name}_in{i}_{k}") for k in range(3)]
        for op, src, shape, dst in (("Reshape", node.input(i), col, steps[0]), ("Expand", steps[0], wide, steps[1]),
                                    ("Reshape", steps[1], flat, steps[2])):
            nodes.append(ctx.make_node(node, op=op, inputs=[src, shape], outputs=[dst], attrs={},
                                       name=ctx.fresh(f"{node.name}_{op.lower()}")))
        inputs.append(steps[2])
    return nodes + [ctx.make_node(node, inputs=inputs)]


@register_handler("GridSample", 16)
def grid_sample_16(node, ctx):
    """GridSample 16 names its modes bilinear/bicubic (20: linear/cubic) and is 2-D only."""
    mode = node.attrs.get("mode", "bilinear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return [ctx.make_node(node, attrs={**node.attrs, "mode": mode})]


@register_handler("DFT", 17)
def dft_17(node, ctx):
    """DFT 17 takes ``axis`` (default 1) as an attribute; 20 as an input (default -2)."""
    attrs = dict(node.attrs)
    axis = ctx.constant(np.array(attrs.pop("axis", 1), np.int64), f"{node.name}_axis")
    inputs = [node.input(0), node.input(1), axis]
    return [ctx.make_node(node, inputs=inputs, attrs=attrs)]


register_handler("FlexAttention", 1, domain="ai.onnx.preview")(passthrough)  # without score_mod/prob_mod

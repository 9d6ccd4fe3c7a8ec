"""ONNX op versions whose inputs and attributes already are opset 21's: copied as they are.

Each row lists the ONNX ``since_version``s (opset 11 onwards) reviewed to match opset 21: later
versions only add dtypes, or attributes whose default is opset 21's behaviour (a non-default value
of such an attribute is rejected by ``ConvertContext.make_node``). Versions that need rewriting are
in ``legacy.py``.
"""
from __future__ import annotations

from . import passthrough, register_handler

SAME_AS_OPSET21: dict[str, tuple[int, ...]] = {
    # neural-network ops
    "Conv": (11, 22), "ConvTranspose": (11, 22), "Gemm": (11, 13), "MatMul": (9, 13),
    "BatchNormalization": (9, 14, 15),  # 9 lacks training_mode (inference = its default 0)
    "InstanceNormalization": (6, 22), "LayerNormalization": (17,), "LRN": (1, 13),
    "PRelu": (9, 16), "Clip": (11, 12, 13), "MaxPool": (11, 12, 22),
    "AveragePool": (11, 19, 22),  # 11 lacks dilations (default 1)
    "GlobalAveragePool": (1, 22), "GlobalMaxPool": (1, 22), "Softmax": (13,), "LogSoftmax": (13,),
    "Pad": (11, 13, 18, 19, 21, 23, 24, 25),  # 11/13 lack the axes input
    "Dropout": (12, 13, 22), "DepthToSpace": (11, 13, 28), "SpaceToDepth": (1, 13, 28),
    # quantization (10/13 lack later attributes, whose defaults are opset 21's; 23+ add `precision`
    # (QuantizeLinear) and `output_dtype` (DequantizeLinear), dropped at their default 0)
    "QuantizeLinear": (10, 13, 19, 21, 23, 24, 25, 28), "DequantizeLinear": (10, 13, 19, 21, 23, 24, 25, 28),
    "DynamicQuantizeLinear": (11,), "MatMulInteger": (10,), "ConvInteger": (10,), "QLinearConv": (10,),
    "QLinearMatMul": (10, 21),
    # elementwise and logic
    "Pow": (7, 12, 13, 15), "Add": (7, 13, 14), "Sub": (7, 13, 14), "Mul": (7, 13, 14),
    "Div": (7, 13, 14), "Max": (8, 12, 13), "Min": (8, 12, 13), "Mean": (8, 13), "Sum": (8, 13),
    "Equal": (11, 13, 19), "Less": (9, 13), "Greater": (9, 13), "Not": (1,), "And": (7,), "Or": (7,),
    "Where": (9, 16), "Xor": (7,), "GreaterOrEqual": (12, 16), "LessOrEqual": (12, 16),
    # reductions (axes as input: ReduceSum from 13, the others from 18; earlier ones in legacy.py)
    "ReduceSum": (13,), "ReduceMean": (18,), "ReduceMax": (18, 20), "ReduceMin": (18, 20),
    "ReduceProd": (18,), "ArgMax": (11, 12, 13), "ArgMin": (11, 12, 13),
    # tensor ops
    "Flatten": (11, 13, 21, 23, 24, 25), "Reshape": (5, 13, 14, 19, 21, 23, 24, 25),
    "Transpose": (1, 13, 21, 23, 24, 25), "Concat": (11, 13), "Split": (18,), "Slice": (11, 13),
    "Gather": (11, 13), "GatherElements": (11, 13), "Squeeze": (13, 21, 23, 24, 25),
    "Unsqueeze": (13, 21, 23, 24, 25), "Expand": (8, 13), "Tile": (6, 13),
    "Cast": (9, 13, 19, 21, 23, 24, 25, 28), "CastLike": (15, 19, 21, 23, 24, 25),
    "Shape": (1, 13, 15, 19, 21, 23, 24, 25),
    "Size": (1, 13, 19, 21, 23, 24, 25), "ConstantOfShape": (9, 20, 21, 23, 24, 25),
    "Range": (11, 27), "TopK": (11, 24), "CumSum": (11, 14),
    # unary table
    "Relu": (6, 13, 14), "LeakyRelu": (6, 16), "Sigmoid": (6, 13), "HardSigmoid": (6, 22),
    "HardSwish": (14, 22), "Tanh": (6, 13), "Elu": (6, 22), "Selu": (6, 22), "Softplus": (1, 22),
    "Gelu": (20,), "Erf": (9, 13), "Exp": (6, 13), "Log": (6, 13), "Sqrt": (6, 13),
    "Reciprocal": (6, 13), "Neg": (6, 13), "Abs": (6, 13), "Floor": (6, 13), "Ceil": (6, 13),
    "Identity": (1, 13, 14, 16, 19, 21, 23, 24, 25),
}

for _op, _versions in SAME_AS_OPSET21.items():
    register_handler(_op, *_versions)(passthrough)

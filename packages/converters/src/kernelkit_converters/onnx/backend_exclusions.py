"""ONNX backend node tests kernelkit does not run, each with its reason (the only such list).

Keys are regular expressions matched against the test name without the ``_cpu`` suffix
(``re.fullmatch``). ``EXCLUDED`` applies to every vendor; ``VENDOR_EXCLUDED[vendor]`` to one.
"""
from __future__ import annotations

_NOT_OURS = "bfloat16, float8, float4, int4, int2 and e8m0 are not kernelkit dtypes (kernelkit.dtypes.DTYPES)"
_INFERENCE = "training mode is not supported: kernelkit is an inference runtime"

EXCLUDED: dict[str, str] = {
    # dtypes kernelkit does not have
    r"cast(like)?_.*(BFLOAT16|FLOAT8|FLOAT4|INT4|UINT4|INT2|UINT2|e8m0).*": _NOT_OURS,
    r".*_(bfloat16|bf16|float8e\w*|float4e2m1|u?int4|u?int2)(_.*)?": _NOT_OURS,
    r"(de)?quantizelinear_.*(e4m3fn|e5m2|float4e2m1|int4|int2).*": _NOT_OURS,
    r"equal_string(_broadcast)?": "string tensors are not supported",
    r"identity_(opt|sequence)": "optional and sequence types are not supported",
    # attribute modes kernelkit does not implement
    r"spacetodepth_crd_mode_example": "SpaceToDepth mode CRD (opset 28) is not supported",
    r"flexattention_(score_mod|prob_mod|causal_mask|soft_cap|relative_positional)": (
        "FlexAttention's score_mod/prob_mod are subgraphs: control flow is not supported"),
    r"batchnorm_(epsilon|example)_training_mode": _INFERENCE,
    r"training_dropout.*": _INFERENCE,
    # test data
    r"roialign_aligned_(false|true)": (
        "the expected output is written rounded to 4 digits (e.g. 0.3510 for 0.35105); kernelkit agrees with "
        "onnxruntime to 3e-7 (packages/converters/tests/test_coverage_ops.py::test_roialign_matches_onnxruntime)"),
    r"averagepool_2d_ceil_last_window_starts_on_pad": (
        "the expected output is written rounded to 4 digits (0.1511) and checked by ONNX with rtol 1e-3; "
        "kernelkit gives 0.15105554, equal to onnxruntime and ReferenceEvaluator, but kernelkit's fp32 "
        "rtol is 1e-4 (packages/converters/tests/test_handlers.py::"
        "test_averagepool_ceil_last_window_on_pad_matches_onnxruntime checks it)"),
}

_CONTROL = "control flow (subgraph attributes) is not supported"
_SEQUENCE = "sequence, map and optional values are not supported (tensors only)"
_STRING = "string tensors are not supported"
_RANDOM = "random-number ops are not supported (outputs are not reproducible against test data)"
_TRAINING = "training ops (ai.onnx.preview.training) are not supported: kernelkit is an inference runtime"
_ML = "the ai.onnx.ml domain (classical ML) is not supported"

# Ops kernelkit does not implement: a node test using one (while it is not registered) is excluded
# with the op's reason. Any other op missing from kernelkit's set fails its tests.
UNSUPPORTED_OPS: dict[str, str] = {
    **dict.fromkeys(["If", "Loop", "Scan"], _CONTROL),
    **dict.fromkeys(["SequenceEmpty", "SequenceLength", "SequenceInsert", "SequenceMap", "SequenceAt",
                     "SequenceConstruct", "SequenceErase", "SplitToSequence", "ConcatFromSequence",
                     "Optional", "OptionalHasElement", "OptionalGetElement"], _SEQUENCE),
    **dict.fromkeys(["StringSplit", "StringNormalizer", "StringConcat", "RegexFullMatch", "TfIdfVectorizer",
                     "ImageDecoder"], _STRING + " (string or encoded-image inputs)"),
    **dict.fromkeys(["Bernoulli", "RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal",
                     "Multinomial"], _RANDOM),
    **dict.fromkeys(["ai.onnx.preview.training::Momentum", "ai.onnx.preview.training::Adagrad",
                     "ai.onnx.preview.training::Adam", "ai.onnx.preview.training::Gradient"], _TRAINING),
    **dict.fromkeys(["ai.onnx.ml::LabelEncoder", "ai.onnx.ml::TreeEnsemble", "ai.onnx.ml::ArrayFeatureExtractor",
                     "ai.onnx.ml::Binarizer"], _ML),
}

VENDOR_EXCLUDED: dict[str, dict[str, str]] = {
    "numba": {},
    "opencl": {},
}


def exclusions(vendor: str) -> dict[str, str]:
    """Pattern -> reason for ``vendor``."""
    return {**EXCLUDED, **VENDOR_EXCLUDED.get(vendor, {})}

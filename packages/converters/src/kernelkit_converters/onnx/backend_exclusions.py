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
    r"(de)?quantizelinear_.*(e4m3fn|e5m2|float4e2m1|int4|int2).*": _NOT_OURS,
    r"range_(bfloat16|float16)_type_positive_delta": "Range in float16/bfloat16 is opset 27; kernelkit's Range "
                                                     "takes opset 21's types",
    r"reduce_(max|min)_(bool_inputs|empty_set_bool)": "ReduceMax/ReduceMin over bool (opset 20) is not supported",
    r"equal_string(_broadcast)?": "string tensors are not supported",
    r"identity_(opt|sequence)": "optional and sequence types are not supported",
    # attribute modes kernelkit does not implement
    r"resize_.*(cubic|antialias).*": "Resize implements modes nearest and linear without antialias",
    r"resize_tf_crop_and_resize.*": "Resize coordinate_transformation_mode tf_crop_and_resize is not supported",
    r"spacetodepth_crd_mode_example": "SpaceToDepth mode CRD (opset 28) is not supported",
    r"batchnorm_(epsilon|example)_training_mode": _INFERENCE,
    r"training_dropout.*": _INFERENCE,
    # test data
    r"averagepool_2d_ceil_last_window_starts_on_pad": (
        "the expected output is written rounded to 4 digits (0.1511) and checked by ONNX with rtol 1e-3; "
        "kernelkit gives 0.15105554, equal to onnxruntime and ReferenceEvaluator, but kernelkit's fp32 "
        "rtol is 1e-4 (packages/converters/tests/test_handlers.py::"
        "test_averagepool_ceil_last_window_on_pad_matches_onnxruntime checks it)"),
}

VENDOR_EXCLUDED: dict[str, dict[str, str]] = {
    "numba": {},
    "opencl": {},
}


def exclusions(vendor: str) -> dict[str, str]:
    """Pattern -> reason for ``vendor``."""
    return {**EXCLUDED, **VENDOR_EXCLUDED.get(vendor, {})}

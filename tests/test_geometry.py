"""kernelkit.geometry is the one public home of conv/pool windows, ConvTranspose resolution, pads,
resize plans and axes: the shape rules, the reference kernels and both backends use the same
functions, and no backend reaches into a private helper of kernelkit.ops."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
from kernelkit import geometry

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = [ROOT / "packages" / "cpu_numba" / "src", ROOT / "packages" / "gpu_opencl" / "src"]


def _private_core_imports(file: Path) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kernelkit."):
            parts = node.module.split(".")
            if any(p.startswith("_") for p in parts) or (
                    parts[1] == "ops" and any(a.name.startswith("_") for a in node.names)):
                bad.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith("kernelkit.") and "._" in a.name]
    return bad


def test_backends_import_no_private_core_helper():
    offenders = {str(f.relative_to(ROOT)): bad for src in BACKENDS for f in sorted(src.rglob("*.py"))
                 if (bad := _private_core_imports(f))}
    assert offenders == {}


@pytest.mark.parametrize("module, name, public", [
    ("kernelkit_numba.kernels.pool", "window", "window"),
    ("kernelkit_numba.kernels.conv_transpose", "_resolve", "conv_transpose_geometry"),
    ("kernelkit_numba.kernels.pad", "_resolve", "pad_widths"),
    ("kernelkit_numba.kernels.resize", "_plan", "resize_plan"),
    ("kernelkit_numba.kernels.resize", "_source", "source_coordinates"),
    ("kernelkit_numba.kernels.gather", "_checked", "checked_indices"),
    ("kernelkit_numba.kernels.topk", "_k", "topk_count"),
    ("kernelkit_opencl.kernels.conv", "window", "window"),
    ("kernelkit_opencl.kernels.conv_transpose", "_resolve", "conv_transpose_geometry"),
    ("kernelkit_opencl.kernels.index", "pad_widths", "pad_widths"),
    ("kernelkit_opencl.kernels.resize", "_nearest", "nearest_index"),
    ("kernelkit_opencl.kernels.reduce", "normalize_axes", "normalize_axes"),
    ("kernelkit_opencl.kernels.shape_ops", "_clamped", "clamped_range"),
    ("kernelkit.ops.conv_transpose", "_resolve", "conv_transpose_geometry"),  # the shape rule's, too
    ("kernelkit.ops.resize", "_plan", "resize_plan"),
])
def test_backends_and_shape_rules_share_one_function(module, name, public):
    pytest.importorskip(module.split(".")[0])
    assert getattr(importlib.import_module(module), name) is getattr(geometry, public)


def test_window_resolves_auto_pad_and_ceil_mode():
    win = geometry.window((7, 6), (3, 2), strides=(2, 2), auto_pad="SAME_UPPER")
    assert win.out == (4, 3) and win.begin == (1, 0) and win.end == (1, 0)
    win = geometry.window((5,), (2,), strides=(2,), ceil_mode=True)
    assert win.out == (3,)  # the last window starts inside the input
    assert geometry.window(("H",), (3,), pads=(1, 1)).out == (None,)  # symbolic stays unknown
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        geometry.window((2,), (3,), dilations=(2,))


def test_conv_transpose_geometry_follows_the_onnx_formula():
    # out = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads
    strides, dilations, begin, end, out = geometry.conv_transpose_geometry(
        (5, 4), (3, 3), strides=(2, 3), dilations=(1, 2), pads=(1, 0, 1, 2), auto_pad="NOTSET",
        output_padding=(1, 0), output_shape=())
    assert out == [2 * 4 + 1 + 2 + 1 - 2, 3 * 3 + 0 + 4 + 1 - 2] and begin == [1, 0] and end == [1, 2]
    *_, out = geometry.conv_transpose_geometry((5,), (3,), strides=(2,), dilations=(), pads=(), auto_pad="SAME_UPPER",
                                               output_padding=(), output_shape=())
    assert out == [10]


def test_pads_resize_and_axes():
    assert geometry.pad_widths((2, 3), np.array([1, -1, 0, 2]), None) == [(1, 0), (-1, 2)]
    assert geometry.pad_widths((2, 3, 4), [1, 2], [-1]) == [(0, 0), (0, 0), (1, 2)]
    scale, out = geometry.resize_plan((1, 3, 4, 6), None, np.array([8, 8]), [2, 3], "not_larger")
    assert out == [1, 3, 5, 8] and scale[2:] == pytest.approx([4 / 3, 4 / 3])  # one ratio: 8/6 fits both
    src = geometry.source_coordinates(np.arange(4, dtype=np.float64), 2, 2.0, "half_pixel")
    np.testing.assert_allclose(src, [-0.25, 0.25, 0.75, 1.25])
    np.testing.assert_array_equal(geometry.nearest_index(np.array([0.5, 1.5, 2.2]), "round_prefer_ceil"), [1, 2, 2])
    assert geometry.normalize_axes([-1, 0], 3) == [2, 0]
    with pytest.raises(ValueError, match="repeat"):
        geometry.normalize_axes([1, -2], 3)
    np.testing.assert_array_equal(geometry.checked_indices(np.array([-1, 0]), 4), [3, 0])
    assert geometry.topk_count(np.array([2]), 5) == 2 and geometry.clamped_range(4, -3, None) == slice(1, 4)

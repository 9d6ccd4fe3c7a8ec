"""kernelkit graph (CLI and kernelkit.tools.graph): DOT always; SVG/PNG through Graphviz's dot."""
from __future__ import annotations

import re
import shutil

import kernelkit as kk
import pytest
from kernelkit import tools
from kernelkit.errors import FallbackWarning
from kernelkit.testing import isolate_registries


@pytest.fixture
def mixed(monkeypatch):
    """An Add kernel of another vendor at a higher priority: two (device, vendor) colours."""
    isolate_registries(monkeypatch)
    kk.register_kernel("Add", device="cpu", vendor="other", dtype="float32", priority=1000)(lambda a, b: a + b)


def _nodes(dot):
    return dict(re.findall(r'^\s*(n\d+) \[label="([^"]*)"', dot, re.M))


def test_dot_marks_placement_fusion_and_shapes(run_cli, conv_kkm, tmp_path, mixed):
    out = tmp_path / "g.dot"
    code, stdout, err = run_cli("graph", conv_kkm, "-o", out, "--batch", 2, "--vendors", "other,reference")
    assert code == 0 and f"wrote {out}" in stdout, err
    dot = out.read_text()
    assert dot.startswith('digraph "conv_net" {') and dot.rstrip().endswith("}")
    labels = _nodes(dot)
    assert labels == {"n0": r"conv\nConv\ncpu/reference\nfused: Relu", "n1": r"y\nAdd\ncpu/other"}
    assert re.search(r"n0 \[.*peripheries=2", dot)  # the fused node has a double border
    fill = dict(re.findall(r'^\s*(n\d+) \[.*fillcolor="(#[0-9a-f]+)"', dot, re.M))
    assert fill["n0"] != fill["n1"]
    assert 'in0 -> n0 [label="float32[2,3,8,8]"]' in dot
    assert 'n0 -> n1 [label="float32[2,4,8,8]"]' in dot and 'n1 -> out0 [label="float32[2,4,8,8]"]' in dot
    assert 'label="cpu/other"' in dot and 'label="cpu/reference"' in dot  # the legend


def test_graph_without_passes_and_on_stdout(run_cli, conv_kkm):
    text = tools.graph(conv_kkm, passes=False, vendors=["reference"])
    assert [lab.split(r"\n")[1] for lab in _nodes(text).values()] == ["Conv", "Relu", "Add"]
    code, out, _ = run_cli("graph", conv_kkm, "--no-passes", "--vendors", "reference")
    assert code == 0 and out == text


@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".png", b"\x89PNG")])
def test_svg_and_png_through_graphviz(run_cli, conv_kkm, tmp_path, suffix, magic):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not on PATH (the DOT tests above always run)")
    out = tmp_path / f"g{suffix}"
    code, _, err = run_cli("graph", conv_kkm, "-o", out, "--vendors", "reference")
    assert code == 0, err
    data = out.read_bytes()
    assert data.startswith(magic)
    if suffix == ".svg":
        assert b"fused: Relu" in data and b"float32[1,4,8,8]" in data


def test_graph_errors(run_cli, conv_kkm, tmp_path, monkeypatch):
    code, _, err = run_cli("graph", conv_kkm, "-o", tmp_path / "g.jpg")
    assert code == 2 and "KK_INPUT" in err and ".svg" in err
    monkeypatch.setattr(shutil, "which", lambda name: None)
    code, _, err = run_cli("graph", conv_kkm, "-o", tmp_path / "g.svg")
    assert code == 2 and "error[KK_GRAPHVIZ]" in err and "dot" in err
    assert not (tmp_path / "g.svg").exists()


def test_dot_marks_device_copies(conv_model, monkeypatch):
    """A fake 'acc' device running only Add: the Conv output is copied cpu->acc (dashed edge)."""
    isolate_registries(monkeypatch)
    kk.register_device("acc", lambda options: kk.Device())
    kk.register_kernel("Add", device="acc", vendor="accv", dtype="float32")(lambda a, b: a + b)
    with pytest.warns(FallbackWarning, match="fell back from device 'acc'"):
        dot = tools.graph(conv_model(), device="acc", batch=1)
    assert re.search(r'n0 -> n1 \[label="float32\[1,4,8,8\]  copy cpu->acc", style=dashed', dot), dot
    assert r"y\nAdd\nacc/accv" in dot and r"conv\nConv\ncpu/" in dot

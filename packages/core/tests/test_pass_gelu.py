"""fuse_gelu: the erf form of GELU written in Div/Erf/Add/Mul nodes becomes one Gelu node (both
exporters' orders, Mul by 1/sqrt 2), and so does the tanh form GPT-2's exports write (Pow/Mul/Add/Tanh,
a Gelu with approximate="tanh"), equal to the op-by-op block within float32 tolerance on the
reference and on numba; it leaves blocks with other constants or shared intermediates alone."""
from __future__ import annotations

import math

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit.testing import assert_close, isolate_registries


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    isolate_registries(monkeypatch)


def _c(g, v):
    return g.constant(np.array(v, np.float32))


SQRT2 = math.sqrt(2)


def gelu_model(form: str, sqrt2=SQRT2, half=0.5, one=1.0, extra_reader=False, before="MatMul"):
    """x (2, 5, 16) [@ W] -> GELU written out in ``form``: "half_first" 0.5 * x * (1 + erf(x / sqrt 2))
    (the zoo's, onnxruntime's quantizer's), "torch" x * (1 + erf(x / sqrt 2)) * 0.5, "mul" with
    x * (1 / sqrt 2) and the operands swapped."""
    g = GraphBuilder("gelu")
    x = g.input("x", (2, 5, 16))
    if before == "MatMul":
        x = g.op("MatMul", x, g.constant(np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32)))
    if form == "mul":
        scaled = g.op("Mul", _c(g, 1 / sqrt2), x)
    else:
        scaled = g.op("Div", x, _c(g, sqrt2))
    erf = g.op("Erf", scaled)
    plus = g.op("Add", _c(g, one), erf) if form == "mul" else g.op("Add", erf, _c(g, one))
    if form == "torch":
        y = g.op("Mul", g.op("Mul", x, plus), _c(g, half))
    else:
        y = g.op("Mul", plus, g.op("Mul", _c(g, half), x)) if form == "mul" else \
            g.op("Mul", g.op("Mul", x, _c(g, half)), plus)
    g.output(y)
    if extra_reader:
        g.output(erf)
    return g.build()


def _run(model, vendors, passes=True):
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32) * 3
    sess = Session(model, vendors=vendors, passes=passes)
    return sess, sess.run(None, {"x": x})


@pytest.mark.parametrize("form", ["half_first", "torch", "mul"])
@pytest.mark.parametrize("vendors", [["reference"], ["numba"]])
def test_gelu_block_becomes_one_node(form, vendors):
    if vendors == ["numba"]:
        pytest.importorskip("kernelkit_numba")
    model = gelu_model(form)
    sess, got = _run(model, vendors)
    ops = [n.op_id for n in sess.graph.nodes]
    assert sess.passes_fired.get("fuse_gelu") == 1
    assert "Erf" not in ops and "Div" not in ops and ops.count("Mul") == 0
    assert ops in (["Gelu"], ["MatMul"]) or ops == ["MatMul", "Gelu"]  # folded into the MatMul where it can
    _, want = _run(model, ["reference"], passes=False)
    assert_close(got[0], want[0])
    x = want[0]
    assert np.abs(x).max() > 1  # a real range of values, not all near 0


def test_a_lone_gelu_block_runs_as_gelu():
    sess, got = _run(gelu_model("half_first", before=None), ["reference"])
    assert [n.op_id for n in sess.graph.nodes] == ["Gelu"]
    _, want = _run(gelu_model("half_first", before=None), ["reference"], passes=False)
    assert_close(got[0], want[0])


@pytest.mark.parametrize("change", [dict(sqrt2=1.5), dict(half=0.25), dict(one=2.0), dict(extra_reader=True)])
def test_other_blocks_are_left_alone(change):
    model = gelu_model("half_first", before=None, **change)
    sess, got = _run(model, ["reference"])
    assert "fuse_gelu" not in sess.passes_fired
    assert "Erf" in [n.op_id for n in sess.graph.nodes]
    _, want = _run(model, ["reference"], passes=False)
    for g, w in zip(got, want):
        assert_close(g, w)


def gelu_tanh_model(swapped=False, cubic=0.044715, power=3.0, extra_reader=False):
    """x (2, 5, 16) @ W + b -> GELU's tanh form as GPT-2's exports write it:
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) (``swapped``: the other operand orders)."""
    g = GraphBuilder("gelu_tanh")
    x = g.input("x", (2, 5, 16))
    rng = np.random.default_rng(1)
    x = g.op("Add", g.op("MatMul", x, g.constant(rng.standard_normal((16, 16)).astype(np.float32))),
             g.constant(rng.standard_normal(16).astype(np.float32)))
    cube = g.op("Mul", _c(g, cubic), g.op("Pow", x, _c(g, power))) if swapped else \
        g.op("Mul", g.op("Pow", x, _c(g, power)), _c(g, cubic))
    inner = g.op("Add", cube, x) if swapped else g.op("Add", x, cube)
    tanh = g.op("Tanh", g.op("Mul", _c(g, math.sqrt(2 / math.pi)), inner) if swapped else
                g.op("Mul", inner, _c(g, math.sqrt(2 / math.pi))))
    plus = g.op("Add", _c(g, 1.0), tanh) if swapped else g.op("Add", tanh, _c(g, 1.0))
    y = g.op("Mul", plus, g.op("Mul", _c(g, 0.5), x)) if swapped else g.op("Mul", g.op("Mul", x, _c(g, 0.5)), plus)
    g.output(y)
    if extra_reader:
        g.output(tanh)
    return g.build()


@pytest.mark.parametrize("swapped", [False, True])
@pytest.mark.parametrize("vendors", [["reference"], ["numba"]])
def test_gelu_tanh_block_becomes_one_node(swapped, vendors):
    if vendors == ["numba"]:
        pytest.importorskip("kernelkit_numba")
    model = gelu_tanh_model(swapped)
    sess, got = _run(model, vendors)
    ops = [n.op_id for n in sess.graph.nodes]
    assert sess.passes_fired.get("fuse_gelu") == 1
    # once kernelkit_converters.onnx is imported (an earlier test of the run), its MatMul + Add -> Gemm
    # pass runs too and the Gelu folds into the Gemm's activation
    assert ops in (["MatMul", "Add", "Gelu"], ["Reshape", "Gemm", "Reshape"])
    if ops[-1] == "Gelu":
        assert sess.graph.nodes[-1].attrs == {"approximate": "tanh"}
    _, want = _run(model, ["reference"], passes=False)
    assert_close(got[0], want[0])
    assert np.abs(want[0]).max() > 1 and want[0].min() < -0.1


@pytest.mark.parametrize("change", [dict(cubic=0.05), dict(power=2.0), dict(extra_reader=True)])
def test_other_tanh_blocks_are_left_alone(change):
    model = gelu_tanh_model(**change)
    sess, got = _run(model, ["reference"])
    assert "fuse_gelu" not in sess.passes_fired
    assert "Tanh" in [n.op_id for n in sess.graph.nodes]
    _, want = _run(model, ["reference"], passes=False)
    for g, w in zip(got, want):
        assert_close(g, w)

"""fuse_silu: x * Sigmoid(x) written as Sigmoid and Mul nodes (either operand order, after a Conv as
in EfficientNet and YOLO) becomes one Swish node named as the Mul, equal to the pair within float32
tolerance on the reference and on numba (in place too); a Sigmoid read elsewhere, a Mul by another
tensor, or a device whose vendor has no Swish keeps the pair."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit.registry import register_kernel
from kernelkit.testing import assert_close, isolate_registries


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    isolate_registries(monkeypatch)


SHAPE = (1, 8, 6, 6)


def silu_model(swapped=False, extra_reader=False, other=False, conv=True):
    """x (1, 8, 6, 6) [-> Conv 3x3] -> h * Sigmoid(h) (``other``: h * Sigmoid(x), not a SiLU)."""
    g = GraphBuilder("silu")
    x = g.input("x", SHAPE)
    h = x
    if conv:
        w = np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.3
        h = g.op("Conv", x, g.constant(w), pads=[1, 1, 1, 1])
    gate = g.op("Sigmoid", x if other else h)
    y = g.op("Mul", gate, h) if swapped else g.op("Mul", h, gate)
    g.output(y)
    if extra_reader:
        g.output(gate)
    return g.build()


def _run(model, vendors, passes=True, x=None):
    if x is None:
        x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32) * 4
    sess = Session(model, vendors=vendors, passes=passes)
    return sess, sess.run(None, {"x": x})


@pytest.mark.parametrize("swapped", [False, True])
@pytest.mark.parametrize("vendors", [["reference"], ["numba"]])
def test_silu_becomes_one_swish_node(swapped, vendors):
    if vendors == ["numba"]:
        pytest.importorskip("kernelkit_numba")
    model = silu_model(swapped)
    sess, got = _run(model, vendors)
    ops = [n.op_id for n in sess.graph.nodes]
    assert sess.passes_fired.get("fuse_silu") == 1
    assert ops == ["Conv", "Swish"]
    mul_name = [n.name for n in model.graph.nodes if n.op_id == "Mul"][0]
    assert sess.graph.nodes[-1].name == mul_name
    _, want = _run(model, ["reference"], passes=False)
    assert_close(got[0], want[0])
    assert np.abs(want[0]).max() > 1 and want[0].min() < -0.1  # both branches of the sigmoid


def test_numba_swish_matches_the_pair_on_edge_values():
    pytest.importorskip("kernelkit_numba")
    model = silu_model(conv=False)
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32) * 30
    x.reshape(-1)[:8] = [np.nan, np.inf, -np.inf, 0.0, -87.5, 88.5, -100.0, 100.0]
    sess, got = _run(model, ["numba"], x=x)
    assert [n.op_id for n in sess.graph.nodes] == ["Swish"]
    _, want = _run(model, ["reference"], passes=False, x=x)
    assert_close(got[0], want[0])
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))


@pytest.mark.parametrize("change", [dict(extra_reader=True), dict(other=True)])
def test_other_pairs_are_left_alone(change):
    model = silu_model(**change)
    sess, got = _run(model, ["reference"])
    assert "fuse_silu" not in sess.passes_fired
    assert "Sigmoid" in [n.op_id for n in sess.graph.nodes]
    _, want = _run(model, ["reference"], passes=False)
    for g, w in zip(got, want):
        assert_close(g, w)


def test_a_vendor_without_swish_keeps_its_sigmoid():
    """A vendor with a Sigmoid and a Mul but no Swish: fusing would hand the node to the reference."""
    @register_kernel("Sigmoid", device="cpu", vendor="mine", dtype="float32")
    def sigmoid(x):
        return (1 / (1 + np.exp(-x))).astype(np.float32)

    @register_kernel("Mul", device="cpu", vendor="mine", dtype="float32")
    def mul(a, b):
        return a * b

    model = silu_model(conv=False)
    sess, got = _run(model, ["mine", "reference"])
    assert "fuse_silu" not in sess.passes_fired
    assert [n.op_id for n in sess.graph.nodes] == ["Sigmoid", "Mul"]
    _, want = _run(model, ["reference"], passes=False)
    assert_close(got[0], want[0])

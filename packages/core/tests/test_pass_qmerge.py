"""merge_dynamic_matmul: sibling DynamicQuantizeMatMul nodes on one input become one node over the
concatenated weights that writes the siblings' outputs (its ``split`` attribute), bit for bit the
unmerged graph's (reference and numba, per-tensor and per-column scales and zero points, int8 and
uint8 weights, with and without bias); siblings that cannot merge stay as they are."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit.testing import isolate_registries

OP = "com.microsoft::DynamicQuantizeMatMul"


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    isolate_registries(monkeypatch)


def _siblings(kinds, k=40, bias=True, dtype=np.int8, seed=0):
    """x (N, 5, k) -> one DynamicQuantizeMatMul per entry of ``kinds`` ("tensor": per-tensor scale and
    zero point, "column": per-column ones, "plain": per-tensor scale, no zero point), each an output."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder("siblings")
    x = g.input("x", ("N", 5, k))
    info = np.iinfo(dtype)
    for i, kind in enumerate(kinds):
        n = 8 + 4 * i
        b = rng.integers(info.min, info.max + 1, (k, n)).astype(dtype)
        if kind == "column":
            scale, zp = rng.uniform(0.001, 0.01, n).astype(np.float32), rng.integers(-9, 9, n).astype(dtype)
        else:
            scale, zp = np.float32(rng.uniform(0.001, 0.01)), (dtype(3) if kind == "tensor" else None)
        inputs = [x, g.constant(b), g.constant(scale), None if zp is None else g.constant(np.asarray(zp, dtype))]
        if bias is True or (bias is not False and bias[i]):
            inputs.append(g.constant(rng.standard_normal(n).astype(np.float32)))
        g.output(g.op("DynamicQuantizeMatMul", *inputs, domain="com.microsoft"))
    return g.build()


def _two_thread_paths(monkeypatch, vendors, threads):
    """numba at two threads: every DynamicQuantizeMatMul product on the threads, few rows in column
    shards (both off by default on the Xeon's measurements: kernelkit_numba.kernels.qgemm)."""
    if vendors == ["numba"] and threads > 1:
        monkeypatch.setattr("kernelkit_numba.kernels.qgemm.COLUMN_SHARD_OPS", 1 << 20)
        monkeypatch.setattr("kernelkit_numba.kernels.qgemm.INT8_WORK", 32.0)


def _agree(fused, plain, xv):
    """``fused`` and ``plain`` equal bit for bit run after run, on ``xv``, -1.5 ``xv`` and ``xv`` again
    (numba's serial call binds its arguments on a first run and calls straight on the next:
    qgemm._bind_small); returns the last runs' outputs."""
    for x in (xv, (xv * -1.5).astype(np.float32), xv):
        got, want = fused.run(None, {"x": x}), plain.run(None, {"x": x})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    return got, want


def _runs(model, vendors):
    x = (np.random.default_rng(1).standard_normal((2, 5, model.graph.spec("x").shape[-1])) * 3).astype(np.float32)
    merged = Session(model, vendors=vendors)
    plain = Session(model, vendors=vendors, passes=["fuse_qdq"])  # every pass but the merge: none applies
    return (merged, *_agree(merged, plain, x))


@pytest.mark.parametrize("vendors", [["reference"], ["numba"]])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("bias", [True, False])
def test_siblings_merge_bit_for_bit(vendors, dtype, bias):
    if vendors == ["numba"]:
        pytest.importorskip("kernelkit_numba")
    model = _siblings(["tensor", "column", "plain"], bias=bias, dtype=dtype)
    sess, got, want = _runs(model, vendors)
    assert [n.op_id for n in sess.graph.nodes] == [OP]
    assert sess.graph.nodes[0].attrs["split"] == [8, 12, 16]
    assert sess.passes_fired["merge_dynamic_matmul"] == 1
    assert [o.name for o in sess.get_outputs()] == model.graph.outputs
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_siblings_with_and_without_bias_merge_apart():
    """Two with bias merge; the one without stays apart (its missing bias is not + 0.0, which turns
    -0.0 into +0.0); an input read by one DynamicQuantizeMatMul only is left as it is."""
    model = _siblings(["tensor", "column", "plain"], bias=[True, False, True])
    sess, got, want = _runs(model, ["reference"])
    assert sorted(n.op_id for n in sess.graph.nodes) == [OP, OP]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    sess, _, _ = _runs(_siblings(["tensor"]), ["reference"])
    assert [n.op_id for n in sess.graph.nodes] == [OP] and "merge_dynamic_matmul" not in sess.passes_fired


@pytest.mark.parametrize("vendors, threads", [(["reference"], 1), (["numba"], 1), (["numba"], 2)])
@pytest.mark.parametrize("rows, n", [(1, 24), (40, 24), (1, 1000), (130, 300)])
@pytest.mark.parametrize("act", ["Relu", "Gelu", "Softmax"])
def test_activation_after_dynamic_matmul_fuses_bit_for_bit(vendors, rows, n, act, threads, monkeypatch):
    """DynamicQuantizeMatMul -> Relu (an MLP's hidden layer), Gelu (a transformer's first feed-forward
    product) or Softmax (a classifier's head) into one node with that activation, equal to the pair
    bit for bit (batch 1: the one-call path, column shards at two threads, never for a Softmax, which
    needs whole rows; 40 and 130 rows: row blocks), -0.0 and all."""
    if vendors == ["numba"]:
        pytest.importorskip("kernelkit_numba")
    _two_thread_paths(monkeypatch, vendors, threads)
    rng = np.random.default_rng(rows + n)
    g = GraphBuilder("mlp")
    x = g.input("x", ("N", 1100))
    b = g.constant(rng.integers(-128, 128, (1100, n)).astype(np.int8))
    y = g.op("DynamicQuantizeMatMul", x, b, g.constant(np.float32(0.001)), None,
             g.constant(rng.standard_normal(n).astype(np.float32)), domain="com.microsoft")
    g.output(g.op(act, y))
    model = g.build()
    xv = rng.standard_normal((rows, 1100)).astype(np.float32)
    fused = Session(model, vendors=vendors, threads=threads)
    attrs = fused.graph.nodes[0].attrs
    assert [n.op_id for n in fused.graph.nodes] == [OP]
    assert attrs["softmax"] == 1 if act == "Softmax" else attrs["activation"] == act
    plain = Session(model, vendors=vendors, passes=False, threads=threads)
    (got,), (want,) = _agree(fused, plain, xv)
    np.testing.assert_array_equal(got, want)
    if act == "Softmax":
        np.testing.assert_allclose(want.sum(axis=-1), 1.0, rtol=1e-5)
    else:
        assert (want == 0).any() if act == "Relu" else (want < 0).any()
    assert (want > 0).any()


def test_softmax_fuses_over_the_last_axis_only():
    """A Softmax over another axis than the last stays a node (the epilogue normalizes whole rows)."""
    rng = np.random.default_rng(5)
    g = GraphBuilder("head")
    x, x2 = g.input("x", (2, 3, 64)), g.input("x2", (2, 3, 64))  # two inputs: not merged
    b = g.constant(rng.integers(-128, 128, (64, 10)).astype(np.int8))
    y = g.op("DynamicQuantizeMatMul", x, b, g.constant(np.float32(0.01)), domain="com.microsoft")
    y2 = g.op("DynamicQuantizeMatMul", x2, b, g.constant(np.float32(0.02)), domain="com.microsoft")
    g.output(g.op("Softmax", y, axis=1), g.op("Softmax", y2, axis=2))
    sess = Session(g.build(), vendors=["reference"])
    ops = [(n.op_id, n.attrs.get("softmax", 0)) for n in sess.graph.nodes]
    assert ops.count(("Softmax", 0)) == 1 and (OP, 1) in ops


@pytest.mark.parametrize("vendors", [["reference"], ["numba"]])
@pytest.mark.parametrize("rows", [1, 40])
@pytest.mark.parametrize("threads", [1, 2])
def test_residual_add_after_dynamic_matmul_fuses_bit_for_bit(vendors, rows, threads, monkeypatch):
    """DynamicQuantizeMatMul -> Add (a transformer's residual: the product on either side, the other
    operand computed before or after the product, one that broadcasts) into the node's residual
    input, equal to the unfused graph bit for bit (batch 1, 40 rows; numba at one and two threads,
    i.e. the one-call, column-shard and row-block paths). A product read by something else, or one
    with a fused Relu, keeps its Add."""
    if vendors == ["numba"]:
        pytest.importorskip("kernelkit_numba")
    _two_thread_paths(monkeypatch, vendors, threads)
    rng = np.random.default_rng(rows)
    g = GraphBuilder("residual")
    x = g.input("x", ("N", 800))
    b = g.constant(rng.integers(-128, 128, (800, 800)).astype(np.int8))
    s, bias = g.constant(np.float32(0.01)), g.constant(rng.standard_normal(800).astype(np.float32))
    dq = lambda a: g.op("DynamicQuantizeMatMul", a, b, s, g.constant(np.int8(5)), bias, domain="com.microsoft")  # noqa: E731
    y1 = dq(x)
    r1 = g.op("Sigmoid", x)  # computed after the product in the node order
    b2 = g.constant(rng.integers(-100, 100, (800, 800)).astype(np.int8))
    h = g.op("Add", r1, y1)  # product on the right
    y2 = g.op("DynamicQuantizeMatMul", h, b2, s, None, g.constant(rng.standard_normal(800).astype(np.float32)),
              domain="com.microsoft")
    h2 = g.op("Add", y2, g.constant(rng.standard_normal(800).astype(np.float32)))  # broadcasts
    y3 = dq(h2)
    g.output(g.op("Add", y3, g.op("Tanh", y3)))  # y3 read twice: stays
    model = g.build()
    xv = (rng.standard_normal((rows, 800)) * 2).astype(np.float32)
    fused = Session(model, vendors=vendors, threads=threads)
    assert fused.passes_fired.get("fuse_dynamic_add") == 2
    assert [n.op_id for n in fused.graph.nodes].count("Add") == 1
    plain = Session(model, vendors=vendors, threads=threads, passes=["fuse_qdq"])
    (got,), (want,) = _agree(fused, plain, xv)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("vendors, threads", [(["reference"], 1), (["numba"], 1), (["numba"], 2)])
@pytest.mark.parametrize("rows", [1, 40, 130])
def test_layer_norm_after_dynamic_matmul_fuses_bit_for_bit(vendors, rows, threads, monkeypatch):
    """DynamicQuantizeMatMul [+ residual] -> LayerNormalization (a transformer's post-norm) into the
    node's norm inputs, equal to the unfused graph bit for bit (with and without the residual and the
    norm's bias; batch 1, 40 and 130 rows; numba at one and two threads). A norm over more than the
    last axis, or one whose Mean output is read, stays a node."""
    if vendors == ["numba"]:
        pytest.importorskip("kernelkit_numba")
    _two_thread_paths(monkeypatch, vendors, threads)
    rng = np.random.default_rng(rows)
    g = GraphBuilder("post_norm")
    x = g.input("x", ("N", 4, 256))
    s = g.constant(np.float32(0.01))

    def dq(a, k, n):
        return g.op("DynamicQuantizeMatMul", a, g.constant(rng.integers(-128, 128, (k, n)).astype(np.int8)), s,
                    g.constant(np.int8(3)), g.constant(rng.standard_normal(n).astype(np.float32)),
                    domain="com.microsoft")

    def params(n):
        return g.constant(rng.uniform(0.5, 2, n).astype(np.float32)), g.constant(rng.standard_normal(n).astype(
            np.float32))

    h = g.op("LayerNormalization", g.op("Add", x, dq(x, 256, 256)), *params(256), epsilon=1e-3)  # residual + norm
    h = g.op("LayerNormalization", dq(h, 256, 256), params(256)[0], axis=2)  # no residual, no bias
    h = g.op("LayerNormalization", dq(h, 256, 256), *params((4, 256)), axis=-2)  # two axes: stays
    y, mean, _ = g.op("LayerNormalization", dq(h, 256, 256), *params(256), outputs=3)  # Mean read: stays
    g.output(g.op("Add", y, mean))
    model = g.build()
    xv = rng.standard_normal((rows // 4 + 1, 4, 256)).astype(np.float32)
    fused = Session(model, vendors=vendors, threads=threads)
    assert fused.passes_fired.get("fuse_dynamic_norm") == 2
    assert [n.op_id for n in fused.graph.nodes].count("LayerNormalization") == 2
    plain = Session(model, vendors=vendors, threads=threads, passes=["fuse_qdq"])
    (got,), (want,) = _agree(fused, plain, xv)
    np.testing.assert_array_equal(got, want)

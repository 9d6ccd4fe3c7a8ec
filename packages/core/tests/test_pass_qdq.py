"""The fuse_qdq pass: QDQ groups become integer ops; the graph without the pass runs op by op.

The fused group computes onnxruntime's way (int32 accumulators, one float32 requantize), op by op
computes a float32 sum divided by y_scale: they may differ by one quantization step on values
within float32 rounding of a .5 boundary, never more (checked here on every output element)."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session

RNG = np.random.default_rng(0)


def _qdq_conv(activation=None, bias_scale_factor=1.0, extra_reader=False, per_axis_q=False):
    """x (float) -> Q -> DQ -> Conv(DQ(W int8 per channel), DQ(bias int32)) [-> act] -> Q -> DQ."""
    g = GraphBuilder("qdq_conv")
    x = g.input("x", ("N", 4, 9, 9))
    xs, xzp = g.constant(np.float32(0.03)), g.constant(np.uint8(120))
    wq = RNG.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, 6).astype(np.float32)
    bq = RNG.integers(-3000, 3000, 6).astype(np.int32)
    xq = g.op("QuantizeLinear", x, xs, xzp)
    xd = g.op("DequantizeLinear", xq, xs, xzp)
    wd = g.op("DequantizeLinear", g.constant(wq), g.constant(ws), g.constant(np.zeros(6, np.int8)), axis=0)
    bd = g.op("DequantizeLinear", g.constant(bq), g.constant((np.float32(0.03) * ws * bias_scale_factor)
                                                             .astype(np.float32)), axis=0)
    y = g.op("Conv", xd, wd, bd, pads=[1, 1, 1, 1])
    if activation == "Relu":
        y = g.op("Relu", y)
    elif activation == "Clip":
        y = g.op("Clip", y, g.constant(np.float32(0)), g.constant(np.float32(0.5)))
    ys = g.constant(np.float32(0.02) if not per_axis_q else np.full(6, 0.02, np.float32))
    yq = g.op("QuantizeLinear", y, ys, g.constant(np.int8(-5) if not per_axis_q else np.full(6, -5, np.int8)))
    g.output(yq)
    if extra_reader:
        g.output(y)
    return g.build()


def _run(model, passes, x):
    sess = Session(model, vendors=["reference"], fallback=False, passes=passes)
    return sess, sess.run(None, {"x": x})


X = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32) * 2


@pytest.mark.parametrize("activation", [None, "Relu", "Clip"])
def test_conv_group_becomes_qlinearconv_within_one_step_of_op_by_op(activation):
    model = _qdq_conv(activation)
    fused, (got,) = _run(model, None, X)
    _, (want,) = _run(model, False, X)
    ops = [n.op for n in fused.graph.nodes]
    assert ops == ["QuantizeLinear", "QLinearConv"], ops
    conv = fused.graph.nodes[1]
    assert conv.attrs.get("activation", "") == (activation or "")
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1 and np.mean(diff) < 0.01, (diff.max(), np.mean(diff))


def test_groups_that_do_not_qualify_stay_op_by_op():
    for model in (_qdq_conv(bias_scale_factor=1.5), _qdq_conv(per_axis_q=True), _qdq_conv(extra_reader=True)):
        sess, _ = _run(model, None, X)
        assert "QLinearConv" not in [n.op for n in sess.graph.nodes]
        assert "Conv" in [n.op for n in sess.graph.nodes]
        # the weights' DequantizeLinear nodes no fusion took are folded into float constants
        dq_of_constants = [n for n in sess.graph.nodes if n.op == "DequantizeLinear"
                           and sess.graph.values[n.inputs[0]].data is not None]
        assert not dq_of_constants


def test_without_the_pass_the_weights_stay_int8_and_run_op_by_op():
    model = _qdq_conv("Relu")
    sess, (got,) = _run(model, ["fold_constants"], X)
    assert [n.op for n in sess.graph.nodes].count("DequantizeLinear") == 3  # x, W, bias: not folded
    _, (want,) = _run(model, False, X)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int8 and got.shape == (2, 6, 9, 9)


def _qdq_matmul(gemm: bool):
    g = GraphBuilder("qdq_mm")
    x = g.input("x", (5, 40))
    xs, xzp = g.constant(np.float32(0.05)), g.constant(np.int8(2))
    bq = RNG.integers(-127, 128, (40, 7)).astype(np.int8)
    bs = np.float32(0.01)
    xd = g.op("DequantizeLinear", g.op("QuantizeLinear", x, xs, xzp), xs, xzp)
    bd = g.op("DequantizeLinear", g.constant(bq), g.constant(bs), g.constant(np.int8(0)))
    if gemm:
        cd = g.op("DequantizeLinear", g.constant(RNG.integers(-500, 500, 7).astype(np.int32)),
                  g.constant(np.float32(0.05) * bs))
        y = g.op("Gemm", xd, bd, cd)
    else:
        y = g.op("MatMul", xd, bd)
    ys, yzp = g.constant(np.float32(0.1)), g.constant(np.int8(0))
    g.output(g.op("DequantizeLinear", g.op("QuantizeLinear", g.op("Relu", y), ys, yzp), ys, yzp))
    return g.build()


@pytest.mark.parametrize("gemm", [False, True], ids=["matmul", "gemm"])
def test_matmul_and_gemm_groups(gemm):
    model = _qdq_matmul(gemm)
    x = RNG.standard_normal((5, 40)).astype(np.float32)
    fused, (got,) = _run(model, None, x)
    _, (want,) = _run(model, False, x)
    ops = [n.op_id for n in fused.graph.nodes]
    assert ops == ["QuantizeLinear", "com.microsoft::QGemm" if gemm else "QLinearMatMul", "DequantizeLinear"], ops
    assert np.max(np.abs(got - want)) <= 0.1 + 1e-6  # at most one step of y_scale


def test_maxpool_and_reshape_between_equal_qdq_pairs_run_on_integers():
    g = GraphBuilder("qdq_pool")
    x = g.input("x", (1, 3, 8, 8))
    s, z = g.constant(np.float32(0.04)), g.constant(np.int8(-3))
    q = g.op("QuantizeLinear", x, s, z)
    p = g.op("MaxPool", g.op("DequantizeLinear", q, s, z), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    q2 = g.op("QuantizeLinear", p, s, z)
    r = g.op("Reshape", g.op("DequantizeLinear", q2, s, z), g.constant(np.array([1, -1], np.int64)))
    g.output(g.op("DequantizeLinear", g.op("QuantizeLinear", r, s, z), s, z))
    model = g.build()
    xv = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    fused, (got,) = _run(model, None, xv)
    _, (want,) = _run(model, False, xv)
    assert [n.op for n in fused.graph.nodes] == ["QuantizeLinear", "MaxPool", "Reshape", "DequantizeLinear"]
    assert fused.graph.spec(fused.graph.nodes[1].outputs[0]).dtype == "int8"
    np.testing.assert_array_equal(got, want)  # exact: max and reshape commute with dequantization


def _dynamic(readers: int = 1, extra_reader: bool = False):
    """DynamicQuantizeLinear -> ``readers`` x (MatMulInteger -> Cast -> Mul(a_scale * b_scale) -> Add(bias)),
    as onnxruntime's quantize_dynamic writes it (the attention projections share one quantized input);
    ``extra_reader``: the quantized input is a graph output too."""
    g = GraphBuilder("dynamic")
    x = g.input("x", ("N", 30))
    xq, xs, xzp = g.op("DynamicQuantizeLinear", x, outputs=3)
    for i in range(readers):
        ws = g.constant(RNG.uniform(0.001, 0.01, 8).astype(np.float32))
        scale = g.op("Mul", xs, ws)
        acc = g.op("MatMulInteger", xq, g.constant(RNG.integers(-127, 128, (30, 8)).astype(np.int8)), xzp,
                   g.constant(np.int8(i)))
        y = g.op("Mul", g.op("Cast", acc, to=1), scale)
        g.output(g.op("Add", y, g.constant(RNG.standard_normal(8).astype(np.float32))))
    if extra_reader:
        g.output(xq)
    return g.build()


@pytest.mark.parametrize("readers", [1, 3])
def test_dynamic_chain_becomes_dynamic_quantize_matmul(readers):
    """MatMulInteger -> Cast -> Mul [-> Add] becomes MatMulIntegerToFloat (the same float32 steps in
    the same order), and the DynamicQuantizeLinear feeding only such nodes folds into each of them:
    com.microsoft::DynamicQuantizeMatMul, bit-identical to op by op."""
    model = _dynamic(readers)
    xv = RNG.standard_normal((4, 30)).astype(np.float32)
    fused, got = _run(model, None, xv)
    _, want = _run(model, False, xv)
    # three readers of one input: merged (merge_dynamic_matmul) into one node writing the three outputs
    assert [n.op_id for n in fused.graph.nodes] == ["com.microsoft::DynamicQuantizeMatMul"]
    assert len(fused.graph.nodes[0].outputs) == readers
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    numba, got_numba = Session(model), Session(model).run(None, {"x": xv})
    assert {numba.placement()[n.name] for n in numba.graph.nodes} == {("cpu", "numba")}
    for g, w in zip(got_numba, want):
        np.testing.assert_array_equal(g, w)


def test_dynamic_quantize_read_elsewhere_stays_separate():
    model = _dynamic(1, extra_reader=True)
    xv = RNG.standard_normal((4, 30)).astype(np.float32)
    fused, got = _run(model, None, xv)
    _, want = _run(model, False, xv)
    assert [n.op_id for n in fused.graph.nodes] == ["DynamicQuantizeLinear", "com.microsoft::MatMulIntegerToFloat"]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _qdq_add(relu: bool = False, out_dtype=np.int8):
    """Two quantized branches -> DQ, DQ -> Add [-> Relu] -> Q -> DQ: a residual block's join."""
    g = GraphBuilder("qdq_add")
    x = g.input("x", ("N", 4, 9, 9))
    branches = []
    for i, (scale, zp) in enumerate(((0.03, -3), (0.011, 7))):
        s, z = g.constant(np.float32(scale)), g.constant(np.int8(zp))
        t = g.op("Mul", x, g.constant(np.float32(1 + i)))
        branches.append(g.op("DequantizeLinear", g.op("QuantizeLinear", t, s, z), s, z))
    y = g.op("Add", *branches)
    if relu:
        y = g.op("Relu", y)
    ys, yz = g.constant(np.float32(0.045)), g.constant(np.zeros((), out_dtype) + 2)
    g.output(g.op("DequantizeLinear", g.op("QuantizeLinear", y, ys, yz), ys, yz))
    return g.build()


def test_residual_add_becomes_qlinear_add_equal_to_op_by_op():
    model = _qdq_add()
    fused, (got,) = _run(model, None, X)
    _, (want,) = _run(model, False, X)
    assert "com.microsoft::QLinearAdd" in [n.op_id for n in fused.graph.nodes]
    assert "Add" not in [n.op_id for n in fused.graph.nodes]
    np.testing.assert_array_equal(got, want)  # the same float32 steps: bit for bit
    numba = Session(model)
    assert numba.placement()[next(n.name for n in numba.graph.nodes if n.op == "QLinearAdd")] == ("cpu", "numba")
    np.testing.assert_array_equal(numba.run(None, {"x": X})[0], want)


@pytest.mark.parametrize("relu,out_dtype", [(True, np.int8), (False, np.uint8)], ids=["relu-between", "dtypes-differ"])
def test_add_groups_that_do_not_qualify_stay_op_by_op(relu, out_dtype):
    model = _qdq_add(relu, out_dtype)
    fused, (got,) = _run(model, None, X)
    _, (want,) = _run(model, False, X)
    assert "Add" in [n.op_id for n in fused.graph.nodes]
    np.testing.assert_array_equal(got, want)

"""fuse_matmul_bias: Add(MatMul(A, W), b) over a (batch, seq, K) input with a constant W and a constant
per-column bias becomes one MatMul(A, W, b) named as the Add (a following Gelu then fuses into it too),
equal to the pair on the reference and on numba (fgemm's tiles and the BLAS path, one and two threads);
a 2-D A, a bias that is not per column or not constant, and a product read elsewhere keep the pair."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit.testing import assert_close


def linear_model(k=8, n=5, seq=6, bias_shape=None, swapped=False, gelu=False, rank=3, extra_reader=False,
                 bias_input=False, static=False):
    """x (N, seq, k) @ W (k, n) + b [-> Gelu]; ``rank`` 2: x is (seq, k)."""
    rng = np.random.default_rng(3)
    g = GraphBuilder("linear")
    x = g.input("x", (2 if static else "N", seq, k) if rank == 3 else (seq, k))
    w = g.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    mm = g.op("MatMul", x, w)
    b = g.input("b", bias_shape or (n,)) if bias_input else \
        g.constant(rng.uniform(-1, 1, bias_shape or (n,)).astype(np.float32))
    y = g.op("Add", b, mm) if swapped else g.op("Add", mm, b)
    g.output(g.op("Gelu", y, approximate="tanh") if gelu == "tanh" else g.op("Gelu", y) if gelu else y)
    if extra_reader:
        g.output(g.op("Relu", mm))
    return g.build()


def _run(model, vendors, passes=True, threads=1, feeds=None):
    sess = Session(model, vendors=vendors, passes=passes, threads=threads, fallback=False)
    return sess, sess.run(None, feeds)


def _x(seq, k, rank=3, batch=2):
    return np.random.default_rng(0).standard_normal((batch, seq, k) if rank == 3 else (seq, k)).astype(np.float32)


CASES = [
    {},
    {"swapped": True, "bias_shape": (1, 1, 5)},
    {"gelu": True},
    {"k": 64, "n": 48, "seq": 16, "gelu": True},  # numba: fgemm's tiles, the bias and Gelu in their epilogue
    {"k": 64, "n": 48, "seq": 16, "gelu": "tanh"},  # numba: the tanh form as a pass after the tiles
]


@pytest.mark.parametrize("kw", CASES)
@pytest.mark.parametrize("vendors, threads", [(["reference"], 1), (["numba", "reference"], 1),
                                              (["numba", "reference"], 2)])
def test_linear_layer_becomes_one_matmul(kw, vendors, threads):
    if "numba" in vendors:
        pytest.importorskip("kernelkit_numba")
    model = linear_model(**kw)
    feeds = {"x": _x(kw.get("seq", 6), kw.get("k", 8))}
    sess, got = _run(model, vendors, threads=threads, feeds=feeds)
    assert sess.passes_fired.get("fuse_matmul_bias") == 1
    ops = [s.op for s in sess.plan.kernel_steps()]
    assert ops == ["MatMul"]
    add_name = [n.name for n in model.graph.nodes if n.op_id == "Add"][0]
    assert [n.name for n in sess.graph.nodes] == [add_name]
    _, want = _run(model, ["reference"], passes=False, feeds=feeds)
    assert_close(got[0], want[0])


@pytest.mark.parametrize("kw", [
    {"rank": 2},  # a 2-D A: Gemm's (the converters' onnx_matmul_add_to_gemm)
    {"static": True},  # static rows: the converters' Reshape -> Gemm -> Reshape
    {"bias_shape": (6, 5)},  # a bias per (row, column), not per column
    {"bias_shape": (6, 1)},  # per row
    {"bias_input": True},  # not a constant
    {"extra_reader": True},  # the product is read elsewhere
])
def test_pass_leaves_other_adds_alone(kw):
    model = linear_model(**kw)
    feeds = {"x": _x(6, 8, kw.get("rank", 3))}
    if kw.get("bias_input"):
        feeds["b"] = np.ones(5, np.float32)
    sess, got = _run(model, ["reference"], feeds=feeds)
    assert "fuse_matmul_bias" not in sess.passes_fired
    _, want = _run(model, ["reference"], passes=False, feeds=feeds)
    for g_, w_ in zip(got, want):
        assert_close(g_, w_)


def test_the_reference_kernel_takes_a_bias_and_checks_it():
    from kernelkit.errors import KernelkitError

    g = GraphBuilder("mmb")
    x = g.input("x", (2, 3, 4))
    g.output(g.op("MatMul", x, g.constant(np.ones((4, 5), np.float32)), g.constant(np.arange(5, dtype=np.float32))))
    x_ = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    got = Session(g.build(), vendors=["reference"], passes=False).run(None, {"x": x_})[0]
    assert_close(got, x_ @ np.ones((4, 5), np.float32) + np.arange(5, dtype=np.float32))
    with pytest.raises(KernelkitError, match="bias"):  # 4 values for 5 columns
        bad = GraphBuilder("bad")
        xb = bad.input("x", (2, 3, 4))
        bad.output(bad.op("MatMul", xb, bad.constant(np.ones((4, 5), np.float32)),
                          bad.constant(np.ones(4, np.float32))))
        Session(bad.build(), vendors=["reference"], passes=False)

"""Numba kernels under the hot memory plan (issue 11, session 12; ``kernelkit.memory.HOT``): a small
residual CNN (conv, in-place Relu and residual Add, a Concat, pooling, a Gemm head) gives the same
outputs bit for bit under the best-fit plan and under ``place_hot``'s (forced: this graph's best-fit
plans are the warmer ones), at one and two threads, and agrees with the reference."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session, memory
from kernelkit.testing import assert_close


def _cnn(rng):
    g = GraphBuilder("hot_cnn")
    x = g.input("x", (1, 8, 12, 12), "float32")

    def conv(t, cin, cout, name):
        w = g.constant((rng.standard_normal((cout, cin, 3, 3)) * 0.2).astype(np.float32), f"{name}_w")
        b = g.constant(rng.standard_normal(cout).astype(np.float32), f"{name}_b")
        return g.op("Relu", g.op("Conv", t, w, b, pads=[1, 1, 1, 1], name=name), name=f"{name}_relu")

    h = conv(x, 8, 16, "c0")
    for i in range(3):
        h = g.op("Add", h, conv(conv(h, 16, 16, f"c{i}a"), 16, 16, f"c{i}b"), name=f"res{i}")
    h = g.op("Concat", h, conv(h, 16, 16, "side"), axis=1, name="cat")
    h = g.op("Flatten", g.op("GlobalAveragePool", h, name="gap"), name="flat")
    w = g.constant((rng.standard_normal((10, 32)) * 0.1).astype(np.float32), "fc_w")
    g.output(g.op("Gemm", h, w, transB=1, name="fc"))
    return g.build()


def _hot_only(blocks, clock=None, info=None):
    """``place_best`` that always keeps ``place_hot``'s plan (this graph's best-fit plans are warmer)."""
    top = memory.place_hot(blocks, clock)
    info.update(hot=True, best_fit_bytes=top)
    return top


@pytest.mark.parametrize("threads", [1, 2])
def test_hot_and_best_fit_plans_give_the_same_outputs(monkeypatch, threads):
    model = _cnn(np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    monkeypatch.setattr(memory, "HOT", False)
    best_fit = Session(model, vendors=["numba", "reference"], fallback=False, threads=threads)
    best_fit.run(None, {"x": x})  # planned now
    monkeypatch.setattr(memory, "HOT", True)
    monkeypatch.setattr(memory, "place_best", _hot_only)
    hot = Session(model, vendors=["numba", "reference"], fallback=False, threads=threads)
    hot.run(None, {"x": x})
    assert hot.memory()["hot_plan"] and not best_fit.memory()["hot_plan"]
    offsets = [{s: o for s, (o, _, _) in sess._executor.last_memory.placed.items()} for sess in (best_fit, hot)]
    assert offsets[0] != offsets[1]  # the two plans differ
    reference = Session(model, vendors=["reference"], fallback=False)
    for seed in range(2, 4):  # the arenas are reused
        x = np.random.default_rng(seed).standard_normal((1, 8, 12, 12)).astype(np.float32)
        outs = [sess.run(None, {"x": x})[0] for sess in (best_fit, hot)]
        np.testing.assert_array_equal(outs[0], outs[1])
        assert_close(outs[1], reference.run(None, {"x": x})[0])

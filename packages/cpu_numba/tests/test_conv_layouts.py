"""The numba Conv layout variants (NHWC, NCHW8c, NCHW16c) inside sessions: chosen only when asked,
declining what they cannot hold, and agreeing with the default-layout run (the per-kernel check
against the reference is tests/test_conformance.py)."""
from __future__ import annotations

import warnings

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close

LAYOUTS = ("NHWC", "NCHW8c", "NCHW16c")


def _r(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def _block(rng):
    """An inverted-residual block: 1x1 expand + Clip(0, 6), depthwise stride 2, 1x1 project, then a
    3x3 conv with a fused Relu, a residual Add and a channel Concat."""
    g = kk.GraphBuilder("block")
    x = g.input("x", (2, 16, 9, 9))
    e = g.op("Conv", x, _r(rng, 32, 16, 1, 1), _r(rng, 32), activation="Clip", activation_params=[0.0, 6.0])
    d = g.op("Conv", e, _r(rng, 32, 1, 3, 3), _r(rng, 32), group=32, pads=[1, 1, 1, 1], strides=[2, 2], name="dw")
    p = g.op("Conv", d, _r(rng, 16, 32, 1, 1), name="project")
    c = g.op("Conv", p, _r(rng, 16, 16, 3, 3), _r(rng, 16), pads=[1, 1, 1, 1], activation="Relu", name="dense")
    g.output(g.op("Concat", g.op("Add", p, c, name="add"), d, axis=1, name="cat"))
    return g.build()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_numba_session_in_a_layout_agrees_with_the_default(layout):
    rng = np.random.default_rng(3)
    model, feeds = _block(rng), {"x": _r(rng, 2, 16, 9, 9)}
    want = kk.Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numba has its own LayoutReorder: no fallback to another vendor
        sess = kk.Session(model, vendors=["numba"], threads=1, options={"layout": layout})
    lay = sess.layouts()
    assert all(lay[n] == layout for n in ("dw", "project", "dense", "add", "cat"))
    assert {sess.plan.steps[i].key.vendor for i in range(len(sess.plan.steps))} == {"numba"}
    assert sum(1 for n in sess.graph.nodes if n.op_id == "LayoutReorder") == 2  # in and out, nothing between
    assert_close(sess.run(None, feeds)[0], want)


def test_variants_are_not_chosen_unasked():
    rng = np.random.default_rng(4)
    sess = kk.Session(_block(rng), vendors=["numba"], threads=1)
    assert set(sess.layouts().values()) == {""}
    assert all(s.key.layout == "" for s in sess.plan.kernel_steps())


def test_convs_a_variant_cannot_hold_keep_the_default_layout():
    rng = np.random.default_rng(5)
    g = kk.GraphBuilder("odd")
    x = g.input("x", (1, 12, 6, 6))
    a = g.op("Conv", x, _r(rng, 12, 4, 3, 3), group=3, pads=[1, 1, 1, 1], name="grouped")  # neither dense nor depthwise
    b = g.op("Conv", a, _r(rng, 24, 12, 1, 1), name="twelve")  # 12 channels: no 8- or 16-block
    g.output(b)
    model, feeds = g.build(), {"x": _r(rng, 1, 12, 6, 6)}
    want = kk.Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    blocked = kk.Session(model, vendors=["numba"], threads=1, options={"layout": "NCHW8c"})
    assert blocked.layouts() == {"grouped": "", "twelve": ""}
    nhwc = kk.Session(model, vendors=["numba"], threads=1, options={"layout": "NHWC"})
    assert nhwc.layouts()["grouped"] == "" and nhwc.layouts()["twelve"] == "NHWC"
    for sess in (blocked, nhwc):
        assert_close(sess.run(None, feeds)[0], want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_fused_residual_runs_in_a_layout(layout):
    """Relu(Add(Conv(x), x)): fuse_residual gives the conv Z (the layout variants take it, laid out
    like Y, added before the Relu) and the result agrees with the default layout."""
    rng = np.random.default_rng(5)
    g = kk.GraphBuilder("residual")
    x = g.input("x", (2, 16, 9, 9))
    c = g.op("Conv", x, _r(rng, 16, 16, 3, 3), _r(rng, 16), pads=[1, 1, 1, 1], name="conv")
    g.output(g.op("Relu", g.op("Add", c, x, name="add"), name="relu"))
    model, feeds = g.build(), {"x": _r(rng, 2, 16, 9, 9)}
    want = kk.Session(model, vendors=["reference"]).run(None, feeds)[0]
    sess = kk.Session(model, vendors=["numba"], threads=1, options={"layout": layout})
    assert sess.passes_fired.get("fuse_residual") == 1
    assert [n.op_id for n in sess.graph.nodes if n.op_id != "LayoutReorder"] == ["Conv"]
    assert sess.layouts()["conv"] == layout
    assert_close(sess.run(None, feeds)[0], want)

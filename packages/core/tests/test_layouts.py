"""Layouts: layout strings and re-laying (kernelkit.layout), layout variants in the registry, and the
layout pass on small graphs — reorders only at boundaries, weights re-laid once, axes remapped,
outputs equal to the default-layout run. The reference's NHWC kernels make the variants here."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import cli
from kernelkit.errors import ConfigError, FallbackWarning, RegistryError, ShapeError
from kernelkit.layout import from_layout, parse, physical_shape, reorder, to_layout
from kernelkit.passes import passes
from kernelkit.registry import KernelKey, candidates
from kernelkit.testing import assert_close, isolate_registries

REF = ["reference"]
NHWC = {"layout": "NHWC"}


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def _r(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


# -- layout strings ------------------------------------------------------------------------------
def test_layouts_re_lay_as_their_strings_say(rng):
    x = _r(rng, 2, 16, 3, 5)
    assert np.array_equal(to_layout(x, "NHWC"), x.transpose(0, 2, 3, 1))
    assert np.array_equal(to_layout(x, "NCHW8c"), x.reshape(2, 2, 8, 3, 5).transpose(0, 1, 3, 4, 2))
    assert np.array_equal(to_layout(x, "NCHW16c"), x.reshape(2, 1, 16, 3, 5).transpose(0, 1, 3, 4, 2))
    w = _r(rng, 16, 8, 3, 3)
    assert np.array_equal(to_layout(w, "HWIO"), w.transpose(2, 3, 1, 0))
    assert np.array_equal(to_layout(w, "OIHW8i8o"), w.reshape(2, 8, 1, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1))
    for name in ("NHWC", "NCHW8c", "NCHW16c", "NCHW"):
        assert np.array_equal(from_layout(to_layout(x, name), name), x)
        assert to_layout(x, name).shape == physical_shape(x.shape, name)
    assert np.array_equal(reorder(to_layout(x, "NHWC"), "NHWC", "NCHW8c"), to_layout(x, "NCHW8c"))
    assert physical_shape(("N", 16, 4, 4), "NCHW8c") == ("N", 2, 4, 4, 8)


@pytest.mark.parametrize("bad", ["NCHWc", "NCHW8x", "NCHW1c", "NCHWW", "NHW", "nchw", "NCHW8c8c", "", "OIHW8c"])
def test_an_unknown_layout_string_is_a_shape_error(bad):
    with pytest.raises(ShapeError, match="layout"):
        parse(bad)


def test_a_blocked_axis_that_does_not_divide_is_a_shape_error(rng):
    with pytest.raises(ShapeError, match="multiple of 8"):
        to_layout(_r(rng, 1, 12, 2, 2), "NCHW8c")
    with pytest.raises(ShapeError, match="different axes"):
        reorder(_r(rng, 1, 8, 2, 2), "NCHW", "HWIO")


# -- registry ------------------------------------------------------------------------------------
def test_a_layout_variant_has_its_own_key_and_is_no_default_candidate(monkeypatch):
    isolate_registries(monkeypatch)
    kk.register_kernel("Relu", device="cpu", vendor="v", dtype="float32", layout="NHWC")(lambda x: x)
    kk.register_kernel("Relu", device="cpu", vendor="v", dtype="float32")(lambda x: x)  # same key, default layout
    with pytest.raises(RegistryError, match="already registered"):
        kk.register_kernel("Relu", device="cpu", vendor="v", dtype="float32", layout="NHWC")(lambda x: x)
    assert kk.kernels("Relu", vendor="v") == [KernelKey("Relu", "cpu", "v", "float32", ""),
                                              KernelKey("Relu", "cpu", "v", "float32", "NHWC")]
    assert kk.kernels("Relu", vendor="v", layout="NHWC") == [KernelKey("Relu", "cpu", "v", "float32", "NHWC")]
    assert [e.key.layout for e in candidates("Relu", "cpu", "float32", ["v"])] == [""]
    assert {e.key.layout for e in candidates("Relu", "cpu", "float32", ["v"], layout=None)} == {"", "NHWC"}
    kk.register_kernel("Relu", device="cpu", vendor="w", dtype="float32", layout="NCHW")(lambda x: x)
    assert kk.kernels("Relu", vendor="w")[0].layout == ""  # the plain order is the default layout
    with pytest.raises(ShapeError, match="layout"):
        kk.register_kernel("Relu", device="cpu", vendor="v", dtype="float64", layout="NHCW8")(lambda x: x)


# -- the pass --------------------------------------------------------------------------------------
def _net(rng, out_conv: bool = False):
    """conv -> relu -> depthwise conv -> add (residual) -> concat (channel axis) -> batchnorm ->
    global average pool -> flatten; the first conv's weights shared by a second conv."""
    g = kk.GraphBuilder("net")
    x = g.input("x", (2, 8, 6, 6))
    w = g.constant(_r(rng, 8, 8, 3, 3), name="w")
    y = g.op("Conv", x, w, _r(rng, 8), pads=[1, 1, 1, 1], name="conv1")
    y = g.op("Relu", y, name="relu")
    z = g.op("Conv", y, _r(rng, 8, 1, 3, 3), group=8, pads=[1, 1, 1, 1], name="dw")
    s = g.op("Add", y, z, name="add")
    s2 = g.op("Conv", s, w, pads=[1, 1, 1, 1], name="conv2")  # the same weight
    c = g.op("Concat", s, s2, axis=1, name="concat")
    bn = g.op("BatchNormalization", c, *(_r(rng, 16) + 1.5 for _ in range(4)), name="bn")
    f = g.op("Flatten", g.op("GlobalAveragePool", bn, name="gap"), name="flat")
    g.output(f)
    if out_conv:
        g.output(s2)
    return g.build()


# the layout tests look at the Add itself: keep fuse_residual from folding it into the depthwise conv
NO_RESIDUAL = [p.name for p in passes() if p.default and p.name != "fuse_residual"]


def test_a_conv_with_a_fused_residual_runs_in_nhwc_and_agrees(rng):
    """fuse_residual gives the depthwise conv a Z input: the NHWC reference Conv takes it (laid out
    like Y); variants that take no Z are left in the default layout."""
    model, feeds = _net(rng), _feeds(rng)
    laid = kk.Session(model, vendors=REF, options=NHWC)
    assert laid.passes_fired.get("fuse_residual") == 1 and laid.layouts()["dw"] == "NHWC"
    for got, want in zip(laid.run(None, feeds), kk.Session(model, vendors=REF).run(None, feeds)):
        assert_close(got, want)


def _feeds(rng):
    return {"x": _r(rng, 2, 8, 6, 6)}


def _reorders(sess) -> list:
    return [n for n in sess.graph.nodes if n.op_id == "LayoutReorder"]


def test_the_pass_keeps_a_chain_in_nhwc_and_reorders_only_at_its_ends(rng):
    model, feeds = _net(rng), _feeds(rng)
    plain = kk.Session(model, vendors=REF, passes=NO_RESIDUAL)
    laid = kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options=NHWC)
    assert "layouts" not in plain.passes_fired and not _reorders(plain)
    layouts = laid.layouts()
    for node in ("conv1", "dw", "add", "conv2", "concat", "bn", "gap"):
        assert layouts[node] == "NHWC", node
    assert layouts["flat"] == ""
    reorders = _reorders(laid)  # into NHWC at the input, back before Flatten: nothing in between
    assert [(r.attrs["src"], r.attrs["dst"]) for r in reorders] == [("NCHW", "NHWC"), ("NHWC", "NCHW")]
    assert reorders[0].inputs == ["x"]
    assert {n.op_id for n in laid.graph.nodes if reorders[1].outputs[0] in n.inputs} == {"Flatten"}
    for got, want in zip(laid.run(None, feeds), plain.run(None, feeds)):
        assert_close(got, want)


def test_weights_are_re_laid_once_at_compile_time(rng):
    model = _net(rng)
    laid = kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options=NHWC)
    g = laid.graph
    assert all(g.values[r.inputs[0]].data is None for r in _reorders(laid))  # no reorder of a constant at run time
    w1 = next(n for n in g.nodes if n.name == "conv1").inputs[1]
    w2 = next(n for n in g.nodes if n.name == "conv2").inputs[1]
    assert w1 == w2 and g.values[w1].spec.layout == "HWIO" and g.values[w1].data.shape == (3, 3, 8, 8)
    assert "w" not in g.values  # the OIHW copy is gone: weights_bytes counts the weight once
    plain = kk.Session(model, vendors=REF, passes=NO_RESIDUAL)
    assert laid.memory()["weights_bytes"] == plain.memory()["weights_bytes"]


@pytest.mark.parametrize("layout, axis, physical", [("NHWC", 1, 3), ("NHWC", 2, 1), ("NHWC", -1, 2),
                                                    ("NCHW8c", 1, 1), ("NCHW8c", 3, 3)])
def test_concat_runs_in_the_layout_on_its_physical_axis(rng, layout, axis, physical, monkeypatch):
    isolate_registries(monkeypatch)
    if layout != "NHWC":  # a reference-vendor test variant of Conv for the blocked layout
        from kernelkit.ops.conv import conv as conv_nchw

        @kk.register_kernel("Conv", device="cpu", vendor="reference", dtype="float32", layout=layout,
                            port_layouts={"W": "OIHW"})
        def conv_blocked(x, w, b=None, **attrs):
            return to_layout(conv_nchw(from_layout(x, layout), w, b, **attrs), layout)

    g = kk.GraphBuilder("cat")
    x = g.input("x", (1, 8, 4, 5))
    a = g.op("Conv", x, _r(rng, 8, 8, 1, 1), name="a")
    b = g.op("Conv", x, _r(rng, 8, 8, 3, 3), pads=[1, 1, 1, 1], name="b")
    g.output(g.op("Relu", g.op("Concat", a, b, axis=axis, name="cat"), name="out"))
    model, feeds = g.build(), {"x": _r(rng, 1, 8, 4, 5)}
    laid = kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options={"layout": layout})
    step = next(s for s in laid.plan.steps if s.name == "cat")
    assert laid.layouts()["cat"] == layout and step.attrs["axis"] == physical
    assert laid.layouts()["out"] == layout  # the Relu after it stays in the layout too
    assert_close(laid.run(None, feeds)[0], kk.Session(model, vendors=REF, passes=NO_RESIDUAL).run(None, feeds)[0])


def test_a_value_read_by_several_default_layout_nodes_is_reordered_once(rng):
    g = kk.GraphBuilder("fan")
    x = g.input("x", (1, 4, 5, 5))
    y = g.op("Conv", x, _r(rng, 4, 4, 3, 3), pads=[1, 1, 1, 1], name="conv")
    g.output(g.op("Flatten", y, name="f1"), g.op("Flatten", y, axis=2, name="f2"), y)  # y an output too
    model, feeds = g.build(), {"x": _r(rng, 1, 4, 5, 5)}
    laid = kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options=NHWC)
    back = [r for r in _reorders(laid) if r.attrs["dst"] == "NCHW"]
    assert len(back) == 1 and back[0].outputs == [model.graph.nodes[0].outputs[0]]  # writes the output's name
    assert laid.graph.outputs == model.graph.outputs
    for got, want in zip(laid.run(None, feeds), kk.Session(model, vendors=REF, passes=NO_RESIDUAL).run(None, feeds)):
        assert_close(got, want)


def test_broadcasts_and_mixed_inputs_keep_the_default_layout(rng):
    g = kk.GraphBuilder("mixed")
    x = g.input("x", (1, 4, 3, 3))
    y = g.op("Conv", x, _r(rng, 4, 4, 1, 1), name="conv")
    bias = g.op("Add", y, _r(rng, 4, 1, 1), name="bias")  # a rank-3 broadcast: element order matters
    x2 = g.input("x2", (1, 4, 3, 3))
    mixed = g.op("Mul", g.op("Relu", y, name="relu"), x2, name="mixed")  # NHWC times a plain input
    scaled = g.op("Mul", g.op("Sigmoid", y, name="sig"), np.array(2.0, np.float32), name="scaled")  # a scalar
    g.output(bias, mixed, scaled)
    model, feeds = g.build(), {"x": _r(rng, 1, 4, 3, 3), "x2": _r(rng, 1, 4, 3, 3)}
    laid = kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options=NHWC)
    lay = laid.layouts()
    assert (lay["conv"], lay["bias"], lay["relu"], lay["mixed"], lay["sig"], lay["scaled"]) == \
        ("NHWC", "", "NHWC", "", "NHWC", "NHWC")
    for got, want in zip(laid.run(None, feeds), kk.Session(model, vendors=REF, passes=NO_RESIDUAL).run(None, feeds)):
        assert_close(got, want)


def test_nothing_changes_unless_asked_or_outranked(rng, monkeypatch):
    model = _net(rng)
    default = kk.Session(model, vendors=REF, passes=NO_RESIDUAL)
    assert set(default.layouts().values()) == {""}
    assert not _reorders(kk.Session(model, vendors=REF, options=NHWC, passes=False))
    with pytest.raises(ConfigError, match="layout"):
        kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options={"layout": "NWHC"})
    isolate_registries(monkeypatch)  # a variant registered above the default kernel is chosen unasked
    from kernelkit.ops.nhwc import conv_nhwc

    kk.register_kernel("Conv", device="cpu", vendor="fast", dtype="float32", priority=5, layout="NHWC",
                       port_layouts={"W": "HWIO"})(conv_nhwc)
    sess = kk.Session(model, vendors=["fast", "reference"])
    assert sess.layouts()["conv1"] == "NHWC" and sess.placement()["conv1"] == ("cpu", "fast")
    assert sess.layouts()["bn"] == "NHWC"  # follows: its NHWC variant is its default kernel's vendor's
    assert sess.layouts()["flat"] == "" and len(_reorders(sess)) == 2


def test_a_session_without_a_reorder_kernel_keeps_the_default(rng, monkeypatch):
    isolate_registries(monkeypatch)
    from kernelkit.ops.nhwc import conv_nhwc

    kk.register_kernel("Conv", device="cpu", vendor="solo", dtype="float32", layout="NHWC",
                       port_layouts={"W": "HWIO"})(conv_nhwc)
    kk.register_kernel("Conv", device="cpu", vendor="solo", dtype="float32")(kk.registry.kernel_entry(
        KernelKey("Conv", "cpu", "reference", "float32")).impl)
    with pytest.warns(FallbackWarning):  # the other ops fall back to the reference
        sess = kk.Session(_net(rng), vendors=["solo"], options=NHWC)  # solo has no LayoutReorder kernel
    assert sess.layouts()["conv1"] == "" and not _reorders(sess)


def test_plan_and_placement_show_the_layout(rng):
    laid = kk.Session(_net(rng), vendors=REF, passes=NO_RESIDUAL, options=NHWC)
    rows = {r["name"]: r for r in laid.plan.table()}
    assert rows["conv1"]["layout"] == ("NHWC",) and rows["conv1"]["kernel"][4] == "NHWC"
    assert rows["add"]["layout"] == ("NHWC",) and rows["add"]["kernel"][4] == ""  # layout-free: default kernel
    assert "@NHWC" in str(laid.plan)
    assert set(laid.placement()) == set(laid.layouts())


def test_cli_info_shows_the_layouts(rng, tmp_path, capsys):
    path = tmp_path / "net.kkm"
    kk.save(_net(rng), path)
    assert cli.main(["info", str(path), "--vendors", "reference", "--layout", "NHWC"]) == 0
    out = capsys.readouterr().out
    assert "layouts: NHWC x" in out and "2 reorder(s)" in out
    assert cli.main(["info", str(path), "--vendors", "reference"]) == 0
    assert "layouts: all default" in capsys.readouterr().out


def test_a_skip_connection_from_before_the_chain_reuses_its_re_laid_copy(rng):
    """x (default layout, e.g. a pool with no NHWC kernel) feeds a conv chain and the residual Add:
    the Add reads the copy made for the chain instead of sending the chain back to NCHW."""
    g = kk.GraphBuilder("skip")
    x = g.op("Relu", g.input("x", (1, 8, 5, 5)), name="pre")
    y = g.op("Conv", x, _r(rng, 8, 8, 3, 3), pads=[1, 1, 1, 1], name="conv")
    g.output(g.op("Add", y, x, name="add"))
    model, feeds = g.build(), {"x": _r(rng, 1, 8, 5, 5)}
    laid = kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options=NHWC)
    assert laid.layouts()["add"] == "NHWC" and len(_reorders(laid)) == 2
    assert_close(laid.run(None, feeds)[0], kk.Session(model, vendors=REF, passes=NO_RESIDUAL).run(None, feeds)[0])


def test_laid_out_values_live_in_the_arena_with_their_physical_shapes(rng):
    model, feeds = _net(rng), _feeds(rng)
    laid = kk.Session(model, vendors=REF, passes=NO_RESIDUAL, options=NHWC)
    mem = laid.memory()
    assert mem["planned_values"] > 0 and mem["arena_bytes"] >= mem["live_peak_bytes"] > 0
    placed = laid._executor.pool_for(None).mem.placed  # the residual Add (NHWC) writes into the arena
    assert placed[laid.plan.slot_of["add"]][1] == (2, 6, 6, 8)
    first = laid.run(None, feeds)[0]
    again = laid.run(None, {"x": feeds["x"] * 2})[0]  # the arena is reused: no value leaks into the next run
    assert_close(laid.run(None, feeds)[0], first)
    assert_close(again, kk.Session(model, vendors=REF, passes=NO_RESIDUAL).run(None, {"x": feeds["x"] * 2})[0])

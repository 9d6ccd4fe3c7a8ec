"""The extension API end to end: custom ops with every attribute type, overriding a built-in
kernel, the fusion rule for overridden activations, class-kernel lifecycle, stub mode, ONNX
custom-domain nodes and the unknown-op error (issue 6; docs/extending.md)."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.errors import OpAttributeError, UnsupportedOpError
from kernelkit.registry import unregister_kernel
from kernelkit.testing import assert_close

DOMAIN = "test.extending"


# -- a custom op with every attribute type ----------------------------------------------------------
def _mix_offset(attrs) -> float:
    """What Mix adds to x, computed from every attribute (the test computes it independently)."""
    return (attrs["i"] + attrs["f"] + len(attrs["s"]) + sum(attrs["b"]) + float(attrs["t"].sum())
            + sum(attrs["ints"]) + sum(attrs["floats"]) + sum(len(s) for s in attrs["strings"]))


SEEN: list[dict] = []

kk.register_op("Mix", domain=DOMAIN, inputs=["X"], outputs=["Y"], override=True,
               infer=lambda ctx: ctx.inputs[0],
               attrs={"i": ("int", kk.REQUIRED), "f": ("float", 0.5), "s": ("string", ""), "b": ("bytes", b""),
                      "t": ("tensor", np.zeros(1, np.float32)), "ints": ([int], ()), "floats": ([float], ()),
                      "strings": ([str], ())})


@kk.register_kernel("Mix", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32", priority=-100,
                    override=True)
def mix(x, *, i, f=0.5, s="", b=b"", t=None, ints=(), floats=(), strings=()):
    attrs = dict(i=i, f=f, s=s, b=b, t=t, ints=ints, floats=floats, strings=strings)
    SEEN.append(attrs)
    return (x + np.float32(_mix_offset(attrs))).astype(np.float32)


MIX_ATTRS = dict(i=3, f=-1.25, s="héllo", b=b"\x00\xff\x80raw", t=np.array([[1.5, 2.0]], np.float32),
                 ints=[1, -2, 3], floats=[0.25, 0.5], strings=["a", "bcd"])


def mix_model():
    g = kk.GraphBuilder("mix")
    x = g.input("x", ("N", 4), "float32")
    g.output(g.op("Mix", x, domain=DOMAIN, **MIX_ATTRS))
    return g.build()


def check_attrs_arrived(seen: dict):
    assert seen["i"] == 3 and isinstance(seen["i"], int)
    assert seen["f"] == -1.25 and isinstance(seen["f"], float)
    assert seen["s"] == "héllo"
    assert seen["b"] == b"\x00\xff\x80raw" and isinstance(seen["b"], bytes)  # raw bytes, not text
    np.testing.assert_array_equal(seen["t"], MIX_ATTRS["t"])
    assert tuple(seen["ints"]) == (1, -2, 3) and tuple(seen["floats"]) == (0.25, 0.5)
    assert tuple(seen["strings"]) == ("a", "bcd")


def test_custom_op_with_every_attribute_type_runs():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    SEEN.clear()
    (y,) = kk.Session(mix_model()).run(None, {"x": x})
    check_attrs_arrived(SEEN[-1])
    offset = 3 - 1.25 + 5 + (0 + 255 + 128 + ord("r") + ord("a") + ord("w")) + 3.5 + 2 + 0.75 + 4
    assert_close(y, x + np.float32(offset))


def test_custom_op_round_trips_through_the_ir_file(tmp_path):
    path = tmp_path / "mix.kkm"
    kk.save(mix_model(), path)
    loaded = kk.load(path)
    (node,) = loaded.graph.nodes
    assert (node.op, node.domain) == ("Mix", DOMAIN)
    x = np.ones((3, 4), np.float32)
    SEEN.clear()
    (y,) = kk.Session(loaded).run(None, {"x": x})
    check_attrs_arrived(SEEN[-1])
    assert_close(y, kk.Session(mix_model()).run(None, {"x": x})[0])


def test_wrong_attribute_type_names_the_node():
    g = kk.GraphBuilder("bad")
    x = g.input("x", (1, 4), "float32")
    with pytest.raises(OpAttributeError, match=r"node 'Mix_0' \(test.extending::Mix\): attribute 'b' expects bytes"):
        g.op("Mix", x, domain=DOMAIN, i=1, b="not bytes")
    with pytest.raises(OpAttributeError, match=r"required attribute 'i'"):
        g.op("Mix", x, domain=DOMAIN)


# -- overriding a built-in kernel, and the fusion rule ---------------------------------------------
CALLS = {"acme": 0}


@pytest.fixture
def acme_relu():
    """A user's Relu (vendor "acme", priority 10) for float32 on cpu, removed after the test."""

    @kk.register_kernel("Relu", device="cpu", vendor="acme", dtype="float32", priority=10)
    def relu(x):
        CALLS["acme"] += 1
        return np.maximum(x, np.float32(0))

    CALLS["acme"] = 0
    yield relu
    unregister_kernel("Relu", device="cpu", vendor="acme", dtype="float32")


def conv_relu_model():
    rng = np.random.default_rng(0)
    g = kk.GraphBuilder("conv_relu")
    x = g.input("x", ("N", 2, 6, 6), "float32")
    y = g.op("Conv", x, g.constant(rng.standard_normal((3, 2, 3, 3)).astype(np.float32)),
             g.constant(rng.standard_normal(3).astype(np.float32)), pads=(1, 1, 1, 1), name="conv")
    g.output(g.op("Relu", y, name="relu"))
    return g.build()


def test_override_with_higher_priority_wins_and_shows_in_placement(acme_relu):
    g = kk.GraphBuilder("relu")
    g.output(g.op("Relu", g.input("x", (2, 3), "float32")))
    sess = kk.Session(g.build())
    assert sess.placement() == {"Relu_0": ("cpu", "acme")}
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    assert_close(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    assert CALLS["acme"] == 1
    assert kk.Session(g.build(), vendors=["reference"]).placement() == {"Relu_0": ("cpu", "reference")}


def test_overridden_activation_is_not_fused_and_a_note_says_so(acme_relu):
    x = np.random.default_rng(1).standard_normal((2, 2, 6, 6)).astype(np.float32)
    sess = kk.Session(conv_relu_model())
    assert "fuse_activation" not in sess.passes_fired
    assert sess.placement()["relu"] == ("cpu", "acme")
    assert any("'relu'" in n and "acme" in n and "unfused" in n for n in sess.pass_notes), sess.pass_notes
    (got,) = sess.run(None, {"x": x})
    assert CALLS["acme"] == 1
    (want,) = kk.Session(conv_relu_model(), passes=False, vendors=["reference"]).run(None, {"x": x})
    assert_close(got, want)


def test_without_override_the_activation_is_fused():
    sess = kk.Session(conv_relu_model())
    assert sess.passes_fired.get("fuse_activation") == 1
    assert "relu" not in sess.placement() and not sess.pass_notes


# -- class-kernel lifecycle -----------------------------------------------------------------------
class Lifecycle:
    log: list = []


kk.register_op("Scaled", domain=DOMAIN, inputs=["X"], outputs=["Y"], attrs={"factor": ("float", 2.0)},
               infer=lambda ctx: ctx.inputs[0], override=True)


@kk.register_kernel("Scaled", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32", priority=-100,
                    override=True)
class ScaledKernel:
    def prepare(self, input_specs, attrs):
        Lifecycle.log.append(("prepare", input_specs[0].shape, attrs["factor"], self.context.node.name,
                              self.context.device.name, self.context.options.get("tag"), self.context.threads))
        self.factor = np.float32(attrs["factor"])

    def resize(self, input_specs):
        Lifecycle.log.append(("resize", input_specs[0].shape))
        self.out = np.empty(input_specs[0].shape, np.float32)  # per-shape scratch, as a real kernel would

    def execute(self, x):
        Lifecycle.log.append(("execute", x.shape))
        np.multiply(x, self.factor, out=self.out)
        return self.out.copy()


def test_class_kernel_prepares_once_resizes_on_new_shapes_executes_per_run():
    g = kk.GraphBuilder("life")
    g.output(g.op("Scaled", g.input("x", ("N", 3), "float32"), domain=DOMAIN, factor=3.0, name="scale"))
    Lifecycle.log.clear()
    sess = kk.Session(g.build(), threads=1, options={"tag": "t1"})
    assert Lifecycle.log == [("prepare", ("N", 3), 3.0, "scale", "cpu", "t1", 1)]
    for batch in (2, 2, 5, 5, 2):
        x = np.full((batch, 3), batch, np.float32)
        assert_close(sess.run(None, {"x": x})[0], x * 3)
    assert [e[0] for e in Lifecycle.log] == ["prepare", "resize", "execute", "execute", "resize", "execute",
                                             "execute", "resize", "execute"]
    assert [e[1] for e in Lifecycle.log if e[0] == "resize"] == [(2, 3), (5, 3), (2, 3)]


# -- stub mode ----------------------------------------------------------------------------------------
def _pair_rule(ctx):
    n, c = ctx.inputs[0].shape
    return kk.TensorSpec((n, c * 2 if isinstance(c, int) else ctx.symbol()), ctx.inputs[0].dtype)


kk.register_op("NotYetWritten", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=_pair_rule, override=True,
               attrs={"gain": ("float", 1.0), "blob": ("bytes", b"")})


def test_stub_mode_runs_an_op_without_kernel_with_inferred_symbolic_shapes():
    g = kk.GraphBuilder("stub")
    y = g.op("NotYetWritten", g.input("x", ("N", 3), "float32"), domain=DOMAIN, name="todo", gain=2.0, blob=b"\x01")
    g.output(g.op("Relu", g.op("Neg", y)))
    model = g.build()
    assert model.graph.values["todo"].spec.shape == ("N", 6)
    with pytest.raises(UnsupportedOpError, match="todo"):
        kk.Session(model)
    sess = kk.Session(model, stub_ops=[f"{DOMAIN}::NotYetWritten"])
    assert sess.placement()["todo"] == ("cpu", "stub")
    for batch in (1, 4):
        (out,) = sess.run(None, {"x": np.ones((batch, 3), np.float32)})
        assert out.shape == (batch, 6) and out.dtype == np.float32
        assert not out.any()


# -- ONNX custom domain -------------------------------------------------------------------------------
def test_onnx_custom_domain_node_becomes_the_registered_op():
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("kernelkit_converters")
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper, numpy_helper

    attrs = dict(MIX_ATTRS, t=numpy_helper.from_array(MIX_ATTRS["t"]))
    node = helper.make_node("Mix", ["x"], ["y"], domain=DOMAIN, name="mix", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    model = convert(proto.SerializeToString())
    (kk_node,) = model.graph.nodes
    assert (kk_node.op, kk_node.domain) == ("Mix", DOMAIN)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    SEEN.clear()
    (y,) = kk.Session(model).run(None, {"x": x})
    check_attrs_arrived(SEEN[-1])
    assert_close(y, kk.Session(mix_model()).run(None, {"x": x})[0])
    del onnx


def test_onnx_unknown_custom_op_says_how_to_register():
    pytest.importorskip("kernelkit_converters")
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper

    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.acme", name="frob")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.acme", 1)])
    with pytest.raises(UnsupportedOpError, match=r"(?s)frob.*Frobnicate.*com\.acme.*register_op"):
        convert(proto.SerializeToString())


def test_unknown_op_error_says_how_to_register():
    g = kk.GraphBuilder("unknown")
    x = g.input("x", (1,), "float32")
    with pytest.raises(UnsupportedOpError, match=r"'com\.acme::Frobnicate' is not registered; register it with "
                                                 r"kernelkit\.register_op\('Frobnicate', domain='com\.acme'.*"
                                                 r"docs/extending\.md"):
        g.op("Frobnicate", x, domain="com.acme")

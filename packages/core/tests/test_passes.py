"""The built-in graph passes: each fires where it should and not where it must not, and every
rewritten graph computes the same numbers as the unoptimized one (Session(passes=False))."""
from __future__ import annotations

import kernelkit
import numpy as np
import pytest
from kernelkit import (
    ConfigError,
    Graph,
    GraphBuilder,
    Model,
    Node,
    RegistryError,
    Session,
    TensorSpec,
    Value,
    passes,
)
from kernelkit.ops._util import same_as_input
from kernelkit.passes import PassContext, run_passes
from kernelkit.testing import assert_close, isolate_registries

REF = {"vendors": ["reference"]}
BUILTINS = ["eliminate_identity", "fold_constants", "fold_batchnorm", "fuse_activation", "trim_dead"]


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    """Ops, kernels and passes a test registers are undone afterwards."""
    isolate_registries(monkeypatch)


def rand(*shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def optimized(model: Model, feeds: dict, **kwargs) -> Session:
    """A default session for ``model``, checked against an unoptimized one on ``feeds``."""
    sess = Session(model, **REF, **kwargs)
    plain = Session(model, passes=False, **REF, **kwargs)
    got, want = sess.run(None, feeds), plain.run(None, feeds)
    assert [o.name for o in sess.get_outputs()] == model.graph.outputs  # output names are stable
    graph = sess.graph
    named = {n for node in graph.nodes for n in node.inputs + node.outputs if n}
    assert named | set(graph.inputs) | set(graph.outputs) == set(graph.values)  # no dangling or stale values
    assert all(v.spec is not None and (v.data is None or v.spec == TensorSpec.of(v.data))
               for v in graph.values.values())
    for name, g, w in zip(model.graph.outputs, got, want):
        assert_close(g, w, err_msg=f"output {name!r}")
    return sess


def ops_of(sess: Session) -> list[str]:
    return [n.op_id for n in sess.graph.nodes]


def test_builtins_run_in_pipeline_order():
    names = [p.name for p in passes.passes()]
    assert [n for n in names if n in BUILTINS] == BUILTINS


# -- eliminate_identity ---------------------------------------------------------------------------
def test_identities_are_removed_and_output_names_kept():
    g = GraphBuilder("m")
    x = g.input("x", (2, 3))
    a = g.op("Identity", x, name="first")
    b = g.op("Relu", a, name="relu")
    c = g.op("Identity", b, name="out")  # a graph output: relu's output is renamed 'out'
    g.output(c, g.op("Neg", a, name="neg"))  # 'first' has two readers
    sess = optimized(g.build(), {"x": rand(2, 3)})
    assert ops_of(sess) == ["Relu", "Neg"]
    assert sess.graph.nodes[0].outputs == ["out"] and sess.graph.nodes[1].inputs == ["x"]
    assert sess.passes_fired["eliminate_identity"] == 2
    assert "first" not in sess.graph.values and "relu" not in sess.graph.values


def test_chained_identities_with_other_readers_stay_connected():
    g = GraphBuilder("m")
    x = g.input("x", (2, 3))
    r = g.op("Relu", x, name="r")
    y1 = g.op("Identity", r, name="y1")  # read by y2 and by neg
    y2 = g.op("Identity", y1, name="y2")  # a graph output
    g.output(y2, g.op("Neg", y1, name="neg"), g.op("Exp", g.op("Identity", y2, name="y3"), name="exp"))
    sess = optimized(g.build(), {"x": rand(2, 3)})
    assert ops_of(sess) == ["Relu", "Neg", "Exp"]
    assert [(n.inputs, n.outputs) for n in sess.graph.nodes] == [(["x"], ["y2"]), (["y2"], ["neg"]),
                                                                 (["y2"], ["exp"])]


def test_identity_is_kept_where_it_makes_a_distinct_output():
    g = GraphBuilder("m")
    x = g.input("x", (4,))
    r = g.op("Relu", x, name="r")
    g.output(g.op("Identity", x, name="copy_of_input"), r, g.op("Identity", r, name="copy_of_output"))
    sess = optimized(g.build(), {"x": rand(4)})
    assert sorted(n.name for n in sess.graph.nodes) == ["copy_of_input", "copy_of_output", "r"]
    assert "eliminate_identity" not in sess.passes_fired


def test_inference_dropout_is_removed():
    g = GraphBuilder("m")
    x = g.input("x", (3, 4))
    g.output(g.op("Relu", g.op("Dropout", x, np.array(0.5, np.float32), name="drop")))
    sess = optimized(g.build(), {"x": rand(3, 4)})
    assert ops_of(sess) == ["Relu"]


def _dropout_graph(training, mask_used: bool) -> Graph:
    values = {"x": Value("x", TensorSpec((4,), "float32"))}
    inputs = ["x", "", ""]
    if training is not None:
        data = None if training == "input" else np.array(training)
        values["t"] = Value("t", TensorSpec((), "bool"), data)
        inputs[2] = "t"
    nodes = [Node("Dropout", inputs, ["y", "mask"], name="drop"), Node("Relu", ["y"], ["z"], name="relu")]
    outputs = ["z", "mask"] if mask_used else ["z"]
    return Graph(nodes, ["x"] + (["t"] if training == "input" else []), outputs, values, name="d")


@pytest.mark.parametrize("training, mask_used, removed", [
    (None, False, True),
    (False, False, True),
    (True, False, False),  # training mode really drops
    ("input", False, False),  # training mode only known at run time
    (None, True, False),  # the mask is read
])
def test_dropout_removal_conditions(training, mask_used, removed):
    graph = _dropout_graph(training, mask_used)
    fired = run_passes(graph, ["eliminate_identity"])
    assert ("Dropout" not in [n.op for n in graph.nodes]) is removed
    assert bool(fired) is removed
    if removed:
        assert graph.nodes[0].inputs == ["x"] and "y" not in graph.values and "mask" not in graph.values


# -- fold_constants -------------------------------------------------------------------------------
def test_constant_subexpressions_are_folded():
    g = GraphBuilder("m")
    x = g.input("x", (2, 3))
    k = g.op("Exp", g.op("Neg", g.constant(rand(2, 3, seed=1))), name="k")
    g.output(g.op("Add", x, k, name="add"))
    model = g.build()
    sess = optimized(model, {"x": rand(2, 3)})
    assert ops_of(sess) == ["Add"]
    folded = sess.graph.values["k"]
    assert folded.is_constant and not folded.data.flags.writeable
    assert_close(folded.data, np.exp(-model.graph.values["const_0"].data))
    assert sess.passes_fired["fold_constants"] == 2


def test_shape_subgraph_of_a_static_input_folds_to_a_constant_reshape():
    g = GraphBuilder("m")
    x = g.input("x", (2, 3, 4, 5))
    relu = g.op("Relu", x, name="relu")
    shape = g.op("Shape", relu)  # the producer is not constant, but its spec is static
    batch = g.op("Unsqueeze", g.op("Gather", shape, np.array(0, np.int64)), np.array([0], np.int64))
    target = g.op("Concat", batch, np.array([-1], np.int64), axis=0, name="target")
    g.output(g.op("Reshape", relu, target, name="flat"))
    sess = optimized(g.build(), {"x": rand(2, 3, 4, 5)})
    assert ops_of(sess) == ["Relu", "Reshape"]
    np.testing.assert_array_equal(sess.graph.values["target"].data, np.array([2, -1], np.int64))
    assert sess.get_outputs()[0].shape == (2, 60)


def test_shape_of_a_huge_static_value_folds_without_allocating_it():
    graph = Graph([Node("Shape", ["x"], ["s"], name="shape"), Node("Size", ["x"], ["n"], name="size")],
                  ["x"], ["s", "n"], {"x": Value("x", TensorSpec((100_000, 100_000, 8), "float32"))})
    assert run_passes(graph, ["fold_constants"]) == {"fold_constants": 2}  # 320 GB if materialized
    np.testing.assert_array_equal(graph.values["s"].data, [100_000, 100_000, 8])
    assert graph.values["n"].data == 8 * 10**10 and graph.nodes == []


def test_shape_of_a_symbolic_value_is_not_folded():
    g = GraphBuilder("m")
    shape = g.op("Shape", g.input("x", ("N", 3)), name="shape")
    g.output(shape)
    sess = optimized(g.build(), {"x": rand(5, 3)})
    assert ops_of(sess) == ["Shape"]
    np.testing.assert_array_equal(sess.run(None, {"x": rand(7, 3)})[0], [7, 3])


def test_folding_respects_the_size_cap():
    def model(n):
        g = GraphBuilder("m")
        g.output(g.op("Add", g.input("x", (n, n)), g.op("Exp", g.constant(rand(n, n)), name="big")))
        return g.build()

    small = optimized(model(4), {"x": rand(4, 4)}, options={"fold_max_bytes": 64})  # 64 bytes: folded
    assert ops_of(small) == ["Add"]
    big = optimized(model(5), {"x": rand(5, 5)}, options={"fold_max_bytes": 64})  # 100 bytes: kept
    assert ops_of(big) == ["Exp", "Add"]


def test_ops_of_custom_domains_and_runtime_inputs_are_not_folded():
    kernelkit.register_op("Stamp", domain="kk.test", inputs=["X"], outputs=["Y"], infer=same_as_input)
    kernelkit.register_kernel("Stamp", domain="kk.test", device="cpu", vendor="reference", dtype="float32")(
        lambda x: x + 1)
    g = GraphBuilder("m")
    x = g.input("x", (3,))
    g.output(g.op("Stamp", g.constant(np.zeros(3, np.float32)), domain="kk.test"), g.op("Exp", x))
    sess = optimized(g.build(), {"x": rand(3)})
    assert ops_of(sess) == ["kk.test::Stamp", "Exp"]


def test_a_folded_graph_output_is_returned_fresh():
    g = GraphBuilder("m")
    g.output(g.input("x", (2,)), g.op("Exp", g.constant(np.array([0, 1], np.float32)), name="e"))
    sess = optimized(g.build(), {"x": rand(2)})
    assert ops_of(sess) == []
    first = sess.run(["e"], {"x": rand(2)})[0]
    first[:] = 0
    assert_close(sess.run(["e"], {"x": rand(2)})[0], np.exp(np.array([0, 1], np.float32)))


# -- fold_batchnorm -------------------------------------------------------------------------------
def _bn_params(c, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, c).astype(np.float32), rng.uniform(-1, 1, c).astype(np.float32),
            rng.uniform(-0.5, 0.5, c).astype(np.float32), rng.uniform(0.2, 2.0, c).astype(np.float32)]


@pytest.mark.parametrize("bias, group", [(True, 1), (False, 1), (True, 2)])
def test_conv_batchnorm_folds(bias, group):
    g = GraphBuilder("m")
    x = g.input("x", (2, 4, 7, 7))
    w, b = rand(6, 4 // group, 3, 3, seed=1), rand(6, seed=2) if bias else None
    conv = g.op("Conv", x, w, b, pads=(1, 1, 1, 1), strides=(2, 1), group=group, name="conv")
    g.output(g.op("BatchNormalization", conv, *_bn_params(6), epsilon=1e-3, name="bn"))
    sess = optimized(g.build(), {"x": rand(2, 4, 7, 7)})
    assert ops_of(sess) == ["Conv"] and sess.graph.nodes[0].outputs == ["bn"]
    assert sess.passes_fired["fold_batchnorm"] == 1
    assert sum(1 for v in sess.graph.values.values() if v.is_constant) == 2  # old W, B, BN params gone


def test_a_weight_shared_with_another_conv_is_left_alone():
    g = GraphBuilder("m")
    x = g.input("x", (1, 2, 5, 5))
    w = g.constant(rand(3, 2, 3, 3, seed=1), name="w")
    g.output(g.op("BatchNormalization", g.op("Conv", x, w, name="c1"), *_bn_params(3), name="bn"),
             g.op("Conv", x, w, name="c2"))
    model = g.build()
    before = model.graph.values["w"].data.copy()
    sess = optimized(model, {"x": rand(1, 2, 5, 5)})
    assert ops_of(sess) == ["Conv", "Conv"]
    assert sess.graph.nodes[1].inputs[1] == "w" and sess.graph.nodes[0].inputs[1] != "w"
    np.testing.assert_array_equal(model.graph.values["w"].data, before)


@pytest.mark.parametrize("trans_b, c_shape, beta", [(0, None, 1.0), (1, None, 1.0), (0, (5,), 1.0),
                                                    (1, (3, 5), 0.5), (0, (), 2.0), (1, (3, 1), 1.0)])
def test_gemm_batchnorm_folds(trans_b, c_shape, beta):
    g = GraphBuilder("m")
    a = g.input("a", (3, 4))
    b = rand(5, 4, seed=1) if trans_b else rand(4, 5, seed=1)
    c = None if c_shape is None else rand(*c_shape, seed=2)
    gemm = g.op("Gemm", a, b, c, transB=trans_b, alpha=0.75, beta=beta, name="gemm")
    g.output(g.op("BatchNormalization", gemm, *_bn_params(5), name="bn"))
    sess = optimized(g.build(), {"a": rand(3, 4)})
    assert ops_of(sess) == ["Gemm"]


def _conv_bn(x_input=True, **flags):
    """Conv -> BN with switches for the cases where folding must not happen."""
    g = GraphBuilder("m")
    x = g.input("x", (1, 2, 5, 5))
    w = g.input("w", (3, 2, 3, 3)) if flags.get("w_input") else rand(3, 2, 3, 3, seed=1)
    conv = g.op("Conv", x, w, rand(3, seed=2), activation=flags.get("activation"), name="conv")
    scale, bias, mean, var = _bn_params(3)
    if flags.get("mean_input"):
        mean = g.input("mean", (3,))
    g.output(g.op("BatchNormalization", conv, scale, bias, mean, var, name="bn"))
    if flags.get("second_reader"):
        g.output(g.op("Relu", conv, name="side"))
    if flags.get("conv_output"):
        g.output(conv)
    feeds = {"x": rand(1, 2, 5, 5)}
    feeds.update({"w": rand(3, 2, 3, 3, seed=1)} if flags.get("w_input") else {})
    feeds.update({"mean": rand(3, seed=4)} if flags.get("mean_input") else {})
    return g.build(), feeds


@pytest.mark.parametrize("flag", ["second_reader", "conv_output", "mean_input", "w_input", "activation"])
def test_batchnorm_is_not_folded(flag):
    model, feeds = _conv_bn(**{flag: "Relu" if flag == "activation" else True})
    sess = optimized(model, feeds)
    assert "BatchNormalization" in ops_of(sess)
    assert "fold_batchnorm" not in sess.passes_fired


# -- fuse_activation ------------------------------------------------------------------------------
ACTIVATIONS = [
    ("Relu", [], {}, ()),
    ("Clip", [np.float32(-0.5), np.float32(0.75)], {}, (-0.5, 0.75)),
    ("Clip", [None, np.float32(0.25)], {}, (-np.inf, 0.25)),
    ("Clip", [np.float32(0.1)], {}, (0.1, np.inf)),
    ("LeakyRelu", [], {"alpha": 0.2}, (0.2,)),
    ("Sigmoid", [], {}, ()),
    ("HardSwish", [], {}, ()),
    ("Tanh", [], {}, ()),
    ("Gelu", [], {}, ()),
    ("Gelu", [], {"approximate": "tanh"}, (1.0,)),
]


@pytest.mark.parametrize("op, extra, attrs, params", ACTIVATIONS)
def test_activation_fuses_into_matmul(op, extra, attrs, params):
    g = GraphBuilder("m")
    mm = g.op("MatMul", g.input("a", (2, 3, 4)), rand(4, 5, seed=1), name="mm")
    g.output(g.op(op, mm, *extra, name="act", **attrs))
    sess = optimized(g.build(), {"a": rand(2, 3, 4, low=-4, high=4)})
    (node,) = sess.graph.nodes
    assert node.op == "MatMul" and node.outputs == ["act"]
    assert node.attrs["activation"] == op and tuple(node.attrs["activation_params"]) == pytest.approx(params)


@pytest.mark.parametrize("producer", ["Conv", "ConvTranspose", "Gemm"])
def test_activation_fuses_into_each_producer(producer):
    g = GraphBuilder("m")
    if producer == "Gemm":
        x, feeds = g.input("x", (3, 4)), {"x": rand(3, 4)}
        y = g.op("Gemm", x, rand(5, 4, seed=1), rand(5, seed=2), transB=1)
    else:
        x, feeds = g.input("x", (1, 2, 5, 5)), {"x": rand(1, 2, 5, 5)}
        w = rand(3, 2, 3, 3, seed=1) if producer == "Conv" else rand(2, 3, 3, 3, seed=1)  # (M,C,..) / (C,M,..)
        y = g.op(producer, x, w, rand(3, seed=2), strides=(2, 2))
    g.output(g.op("LeakyRelu", y, alpha=0.3, name="act"))
    sess = optimized(g.build(), feeds)
    assert ops_of(sess) == [producer] and sess.graph.nodes[0].attrs["activation"] == "LeakyRelu"


def test_activation_is_not_fused_where_it_must_not_be():
    g = GraphBuilder("m")
    a = g.input("a", (3, 4))
    lo = g.input("lo", ())
    w = rand(4, 4, seed=1)
    m1 = g.op("MatMul", a, w, name="m1")
    g.output(g.op("Relu", m1, name="r1"), g.op("Tanh", m1, name="t1"))  # two readers
    m2 = g.op("MatMul", a, w, name="m2")
    g.output(m2, g.op("Sigmoid", m2, name="s2"))  # producer output is a graph output
    m3 = g.op("MatMul", a, w, name="m3")
    g.output(g.op("Clip", m3, lo, name="c3"))  # min only known at run time
    m4 = g.op("MatMul", a, w, name="m4")
    g.output(g.op("Tanh", g.op("Relu", m4, name="r4"), name="t4"))  # only the first one fuses
    sess = optimized(g.build(), {"a": rand(3, 4), "lo": np.float32(0.1)})
    assert sorted(n.name for n in sess.graph.nodes if n.op != "MatMul") == ["c3", "r1", "s2", "t1", "t4"]
    assert sess.passes_fired["fuse_activation"] == 1
    fused = {n.name: n.attrs.get("activation", "") for n in sess.graph.nodes if n.op == "MatMul"}
    assert fused == {"m1": "", "m2": "", "m3": "", "m4": "Relu"}


@pytest.mark.parametrize("view, args", [("Reshape", (np.array([6, 5], np.int64),)), ("Flatten", ()),
                                        ("Unsqueeze", (np.array([0], np.int64),))])
def test_activation_fuses_across_a_view(view, args):
    """Gemm -> Reshape -> Relu: the activation moves into the Gemm, the reshape stays."""
    g = GraphBuilder("m")
    y = g.op("Gemm", g.input("x", (6, 4)), rand(4, 5, seed=1), rand(5, seed=2), name="gemm")
    g.output(g.op("Tanh", g.op(view, y, *args, name="view"), name="act"))
    sess = optimized(g.build(), {"x": rand(6, 4, low=-3, high=3)})
    assert ops_of(sess) == ["Gemm", view] and sess.graph.nodes[0].attrs["activation"] == "Tanh"
    assert sess.graph.nodes[1].outputs == ["act"]


def test_activation_does_not_fuse_across_a_shared_view():
    g = GraphBuilder("m")
    y = g.op("Gemm", g.input("x", (6, 4)), rand(4, 5, seed=1), name="gemm")
    v = g.op("Reshape", y, np.array([30], np.int64), name="view")
    g.output(g.op("Relu", v, name="act"), g.op("Neg", y, name="other"))  # the Gemm output has two readers
    sess = optimized(g.build(), {"x": rand(6, 4)})
    assert "fuse_activation" not in sess.passes_fired and "act" in {n.name for n in sess.graph.nodes}


@pytest.mark.parametrize("priority, fused", [(10, False), (-200, True)])
def test_a_user_override_of_the_activation_is_not_swallowed(priority, fused):
    calls = []

    @kernelkit.register_kernel("Relu", device="cpu", vendor="acme", dtype="float32", priority=priority)
    def acme_relu(x):
        calls.append(x.shape)
        return np.maximum(x, 0)

    g = GraphBuilder("m")
    g.output(g.op("Relu", g.op("MatMul", g.input("a", (2, 3)), rand(3, 3, seed=1)), name="act"))
    model, feeds = g.build(), {"a": rand(2, 3)}
    sess = Session(model)  # no vendor list: priorities decide, as for the user
    plain = Session(model, passes=False)
    assert_close(sess.run(None, feeds)[0], plain.run(None, feeds)[0])
    assert ("Relu" not in ops_of(sess)) is fused
    if fused:
        assert sess.pass_notes == []
    else:
        assert sess.placement()["act"] == ("cpu", "acme") and calls
        (note,) = sess.pass_notes
        assert "'act'" in note and "acme" in note and "unfused" in note


def test_an_override_on_another_device_does_not_block_fusion():
    kernelkit.register_kernel("Relu", device="elsewhere", vendor="acme", dtype="float32", priority=10)(np.abs)
    graph = Graph([Node("MatMul", ["a", "w"], ["m"], name="mm"), Node("Relu", ["m"], ["y"], name="act")],
                  ["a"], ["y"], {"a": Value("a", TensorSpec((2, 3), "float32")),
                                 "w": Value("w", TensorSpec((3, 3), "float32"), rand(3, 3)),
                                 "m": Value("m", TensorSpec((2, 3), "float32")),
                                 "y": Value("y", TensorSpec((2, 3), "float32"))})
    ctx = PassContext(device="cpu")
    assert run_passes(graph, ["fuse_activation"], ctx) == {"fuse_activation": 1}
    assert ctx.notes == []


# -- trim_dead ------------------------------------------------------------------------------------
def test_dead_nodes_and_unused_constants_are_trimmed():
    g = GraphBuilder("m")
    x = g.input("x", (4,))
    unused = g.input("unused", (4,))
    g.op("Exp", g.op("Add", x, g.constant(rand(4), name="dead_const")), name="dead")  # reaches nothing
    g.op("Neg", unused, name="dead2")
    g.output(g.op("Mul", x, g.constant(rand(4, seed=1), name="live_const"), name="y"))
    model = g.build()
    sess = optimized(model, {"x": rand(4), "unused": rand(4)})
    assert ops_of(sess) == ["Mul"]
    assert set(sess.graph.values) == {"x", "unused", "live_const", "y"}  # graph inputs stay
    assert sess.passes_fired["trim_dead"] >= 4


def test_trim_keeps_a_node_whose_other_output_is_read():
    g = GraphBuilder("m")
    parts = g.op("Split", g.input("x", (6,)), np.array([2, 4], np.int64), outputs=2, name="split")
    g.output(g.op("Relu", parts[1]))
    sess = optimized(g.build(), {"x": rand(6)})
    assert ops_of(sess) == ["Split", "Relu"]


# -- the pass registry ----------------------------------------------------------------------------
def _recorder(seen, name):
    def run(graph, ctx):
        seen.append((name, sorted(n.op for n in graph.nodes)))
        return 0

    return run


def test_custom_passes_run_before_and_after_builtins():
    seen = []
    kernelkit.register_pass("before_fold", _recorder(seen, "before"), before="fold_constants")
    kernelkit.register_pass("after_fold", _recorder(seen, "after"), after="fold_constants")
    names = [p.name for p in passes.passes()]
    assert names.index("eliminate_identity") < names.index("before_fold") < names.index("fold_constants")
    assert names.index("fold_constants") < names.index("after_fold") < names.index("fold_batchnorm")
    g = GraphBuilder("m")
    g.output(g.op("Add", g.input("x", (2,)), g.op("Exp", g.constant(rand(2)))))
    sess = Session(g.build())
    assert seen[:2] == [("before", ["Add", "Exp"]), ("after", ["Add"])]
    assert ops_of(sess) == ["Add"]


def test_a_custom_pass_rewrite_counts_and_selection():
    def drop_neg_neg(graph, ctx):  # Neg(Neg(x)) -> x, as a user might write it
        count = 0
        producers, readers = graph.producers(), graph.consumers()
        for node in list(graph.nodes):
            inner = producers.get(node.inputs[0])
            if node.op == "Neg" and inner is not None and inner.op == "Neg" and len(readers[inner.outputs[0]]) == 1:
                graph.nodes.remove(inner)
                node.op = "Identity"
                node.inputs = [inner.inputs[0]]
                count += 1
        return count

    kernelkit.register_pass("neg_neg", drop_neg_neg, after="eliminate_identity", default=False)
    g = GraphBuilder("m")
    x = g.input("x", (3,))
    g.output(g.op("Exp", g.op("Neg", g.op("Neg", x))))
    model = g.build()
    assert "Neg" in ops_of(Session(model))  # not in the default pipeline
    sess = Session(model, passes=["neg_neg", "eliminate_identity"])
    assert ops_of(sess) == ["Exp"] and sess.passes_fired == {"neg_neg": 1, "eliminate_identity": 1}
    feeds = {"x": rand(3)}
    assert_close(sess.run(None, feeds)[0], np.exp(feeds["x"]))


def test_pass_registry_errors():
    with pytest.raises(ConfigError, match=r"unknown pass\(es\) \['fold_everything'\].*fold_constants"):
        Session(_tiny(), passes=["fold_everything"])
    with pytest.raises(RegistryError, match="'nowhere'"):
        kernelkit.register_pass("mine", lambda g, c: 0, after="nowhere")
    with pytest.raises(RegistryError, match="'trim_dead' is already registered"):
        kernelkit.register_pass("trim_dead", lambda g, c: 0)


def _tiny() -> Model:
    g = GraphBuilder("tiny")
    g.output(g.op("Relu", g.input("x", (2,))))
    return g.build()


def test_passes_false_leaves_the_graph_alone():
    g = GraphBuilder("m")
    g.output(g.op("Identity", g.op("Exp", g.constant(rand(2)))))
    sess = Session(g.build(), passes=False)
    assert ops_of(sess) == ["Exp", "Identity"] and sess.passes_fired == {}


# -- all together ---------------------------------------------------------------------------------
def test_a_small_cnn_is_folded_and_fused_with_the_same_numbers():
    g = GraphBuilder("cnn")
    x = g.input("x", (2, 3, 8, 8))
    y = g.op("Conv", x, rand(8, 3, 3, 3, seed=1), pads=(1, 1, 1, 1))
    y = g.op("Relu", g.op("BatchNormalization", y, *_bn_params(8, seed=2)))
    y = g.op("Conv", g.op("Identity", y), rand(4, 8, 3, 3, seed=3), rand(4, seed=4), strides=(2, 2))
    y = g.op("Clip", g.op("BatchNormalization", y, *_bn_params(4, seed=5)), np.float32(0), np.float32(6))
    flat = g.op("Reshape", y, g.op("Concat", g.op("Unsqueeze", g.op("Gather", g.op("Shape", y),
                                                                   np.array(0, np.int64)), np.array([0], np.int64)),
                                   np.array([-1], np.int64), axis=0))
    logits = g.op("Gemm", flat, rand(5, 36, seed=6), rand(5, seed=7), transB=1)
    g.output(g.op("Sigmoid", g.op("BatchNormalization", logits, *_bn_params(5, seed=8)), name="prob"))
    sess = optimized(g.build(), {"x": rand(2, 3, 8, 8)})
    assert ops_of(sess) == ["Conv", "Conv", "Reshape", "Gemm"]
    assert [n.attrs.get("activation") for n in sess.graph.nodes] == ["Relu", "Clip", None, "Sigmoid"]
    assert set(sess.passes_fired) == set(BUILTINS)

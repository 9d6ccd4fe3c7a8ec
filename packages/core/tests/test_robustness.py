"""Robustness of the Python surface: bad feeds, builder and registry misuse, attribute fuzzing of
every registered op, and concurrent runs. Bad input must give a typed KernelkitError naming what
is wrong, never a crash, a hang, a silent wrong answer or a changed caller array.

The file side (.kkm, deployment YAML, CLI) is in test_robustness_io.py.
"""
from __future__ import annotations

import os
import threading
import traceback
import warnings
from pathlib import Path

import kernelkit as kk
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit import (
    ConfigError,
    GraphBuilder,
    InputError,
    KernelExecutionError,
    KernelkitError,
    ModelFormatError,
    OpAttributeError,
    RegistryError,
    Session,
    ShapeError,
    UnsupportedOpError,
)
from kernelkit.ir import Graph, Model, Node, TensorSpec, Value
from kernelkit.layout import physical_shape
from kernelkit.ops._util import same_as_input
from kernelkit.registry import get_schema
from kernelkit.testing import assert_close, run_single_op, sample_cases, single_op_model

REF = {"vendors": ["reference"]}  # reference kernels: exact NumPy semantics, no JIT time
KERNELKIT_DIR = str(Path(kk.__file__).parent)
DOMAIN = "test.robustness"


def _relu_model(shape=("N", 3)):
    g = GraphBuilder("m")
    g.output(g.op("Relu", g.input("x", shape, "float32"), name="y"))
    return g.build()


@pytest.fixture(scope="module")
def relu():
    return Session(_relu_model(), **REF)


# -- Session.run: feeds ---------------------------------------------------------------------------
@pytest.mark.parametrize("feeds", [[np.zeros((1, 3), np.float32)], (), None, "x", np.zeros((1, 3), np.float32)])
def test_feeds_that_are_not_a_dict(relu, feeds):
    with pytest.raises(InputError, match="dict"):
        relu.run(None, feeds)


class _BrokenArray:
    def __array__(self, dtype=None, copy=None):
        raise ZeroDivisionError("broken __array__")


def _recursive_list():
    items: list = []
    items.append(items)
    return items


@pytest.mark.parametrize("value, fragment", [
    ([[1.0, 2.0, 3.0]], "dtype float32, got float64"),  # a list of Python floats is float64
    (None, "got object"),
    ("abc", "expected dtype float32"),
    (1.5, "expected dtype float32"),
    (np.float32(1.5), "expected rank 2"),
    (np.array([[object()] * 3], dtype=object), "got object"),
    ([[1.0, 2.0], [3.0]], "cannot be read as an array"),  # ragged
    (_recursive_list(), "cannot be read as an array"),
    (_BrokenArray(), "cannot be read as an array"),
    (np.zeros((1, 3), np.float64), "dtype float32, got float64"),
    (np.zeros((1, 3), np.float16), "dtype float32, got float16"),
    (np.zeros((1, 3), "datetime64[s]"), "got datetime64"),
    (np.zeros((1, 3), dtype=[("a", "f4")]), "got void"),
    (np.zeros((3,), np.float32), "expected rank 2"),
    (np.zeros((1, 1, 3), np.float32), "expected rank 2"),
    (np.zeros((1, 4), np.float32), r"expected shape \('N', 3\)"),
    (np.zeros((1, 0), np.float32), r"expected shape \('N', 3\)"),
])
def test_bad_feed_values_name_the_input(relu, value, fragment):
    with pytest.raises(InputError, match=f"input 'x'.*{fragment}"):
        relu.run(None, {"x": value})


def test_unknown_and_missing_names_of_any_type(relu):
    x = np.zeros((1, 3), np.float32)
    with pytest.raises(InputError, match=r"unknown: \['z', \(2,\), 1\] missing: \['x'\]"):
        relu.run(None, {1: x, (2,): x, "z": x})  # mixed key types are listed, not compared
    with pytest.raises(InputError, match=r"unknown: \[None\]"):
        relu.run(None, {"x": x, None: x})


@pytest.mark.parametrize("names, fragment", [
    (5, "got int"), (2.5, "got float"), (object(), "got object"),
    ("y", "not a string"), (b"y", "not a string"),
    ([1], r"unknown output\(s\) \[1\]"), ([None], r"\[None\]"), (["y", "nope"], r"\['nope'\]"),
    ([["y"]], r"\[\['y'\]\]"),
])
def test_output_names_of_wrong_type_or_unknown(relu, names, fragment):
    with pytest.raises(InputError, match=fragment):
        relu.run(names, {"x": np.zeros((1, 3), np.float32)})


def test_output_names_may_be_any_iterable(relu):
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    for names in (("y",), iter(["y"]), {"y"}, ["y", "y"]):
        outs = relu.run(names, {"x": x})
        for out in outs:
            assert_close(out, np.maximum(x, 0))
        assert not any(np.shares_memory(a, b) for i, a in enumerate(outs) for b in outs[i + 1:])


def test_zero_size_dims_run(relu):
    (y,) = relu.run(None, {"x": np.zeros((0, 3), np.float32)})
    assert y.shape == (0, 3) and y.dtype == np.float32 and y.flags.writeable


def test_huge_dims_are_a_typed_error_not_a_crash(relu):
    huge = np.broadcast_to(np.float32(1), (1 << 40, 3))  # 12 TiB as a zero-stride view
    with pytest.raises(KernelExecutionError, match=r"node 'y' \(Relu\).*MemoryError"):
        relu.run(None, {"x": huge})


def test_run_async_reports_bad_feeds_at_once_and_kernel_failures_through_the_future(relu):
    with pytest.raises(InputError, match="input 'x'"):
        relu.run_async(None, {"x": [[1.0, 2.0], [3.0]]})
    future = relu.run_async(None, {"x": np.broadcast_to(np.float32(1), (1 << 40, 3))})
    with pytest.raises(KernelExecutionError, match="node 'y'"):
        future.result(timeout=60)
    (y,) = relu.run_async(None, {"x": np.array([[-1.0, 0.0, 2.0]], np.float32)}).result(timeout=60)
    np.testing.assert_array_equal(y, np.array([[0.0, 0.0, 2.0]], np.float32))


def test_nan_and_inf_values_run_like_numpy():
    g = GraphBuilder("m")
    x = g.input("x", ("N", 4), "float32")
    g.output(g.op("Relu", x, name="relu"), g.op("Add", x, x, name="add"), g.op("Softmax", x, name="softmax"),
             g.op("ReduceMax", x, np.array([1], np.int64), name="max"))
    x = np.array([[np.nan, 1.0, -np.inf, np.inf], [0.0, -2.0, 3.0, 1.0]], np.float32)
    relu, add, softmax, rmax = Session(g.build(), **REF).run(None, {"x": x})
    np.testing.assert_array_equal(relu, np.array([[np.nan, 1, 0, np.inf], [0, 0, 3, 1]], np.float32))
    np.testing.assert_array_equal(add, x + x)
    assert np.isnan(softmax[0]).all()  # NaN in, NaN out, never an error
    e = np.exp(x[1].astype(np.float64) - 3.0)
    assert_close(softmax[1], (e / e.sum()).astype(np.float32))
    np.testing.assert_array_equal(rmax, np.array([[np.nan], [3.0]], np.float32))


def test_big_endian_feed_gives_native_correct_output(relu):
    x = np.array([[-1.5, 0.0, 2.25]], dtype=">f4")
    (y,) = relu.run(None, {"x": x})
    assert y.dtype == np.dtype(np.float32) and y.dtype.isnative
    np.testing.assert_array_equal(y, np.array([[0.0, 0.0, 2.25]], np.float32))


def _layouts():
    base = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    ro = base.copy()
    ro.flags.writeable = False
    big = np.random.default_rng(4).standard_normal((8, 12)).astype(np.float32)
    return {
        "writeable": base.copy(),
        "read_only": ro,
        "fortran": np.asfortranarray(base),
        "non_contiguous": big[::2, ::2],
        "view_of_bigger": big[2:6, 3:9],
        "big_endian": base.astype(">f4"),
        "negative_strides": big[::-2, ::-2],
    }


@pytest.mark.parametrize("layout", list(_layouts()))
@pytest.mark.parametrize("vendors", [["reference"], None])  # None: the fastest kernels installed
def test_caller_arrays_are_unchanged_and_outputs_are_fresh(layout, vendors):
    g = GraphBuilder("m")
    x = g.input("x", ("N", 6), "float32")
    g.output(g.op("Identity", x, name="ident"),
             g.op("Reshape", x, np.array([-1], np.int64), name="flat"),  # a view in NumPy
             g.op("Transpose", x, name="t"), g.op("Relu", x, name="relu"))
    x = _layouts()[layout]
    root = x.base if x.base is not None else x
    before, root_before, flags = x.tobytes(), root.tobytes(), (x.flags.writeable, x.flags.c_contiguous)
    for passes in (None, False):
        outs = Session(g.build(), passes=passes, vendors=vendors).run(None, {"x": x})
        assert x.tobytes() == before and root.tobytes() == root_before
        assert (x.flags.writeable, x.flags.c_contiguous) == flags
        expected = [x, x.reshape(-1), x.T, np.maximum(x, 0)]
        for out, want in zip(outs, expected):
            np.testing.assert_array_equal(out, want)
            assert out.flags.writeable and out.dtype.isnative
            assert not np.shares_memory(out, root)
        for i, out in enumerate(outs):
            out[...] = 7  # scribbling on outputs reaches neither the feed nor other outputs
            assert x.tobytes() == before
            assert not any(np.shares_memory(out, o) for o in outs[i + 1:])


@pytest.mark.parametrize("settings_, fragment", [
    ({"vendors": "numba"}, "vendors must be a list"), ({"vendors": 5}, "vendors must be a list"),
    ({"vendors": [5]}, "vendors must be a list"), ({"threads": "2"}, "threads must be an int"),
    ({"threads": 0}, "threads must be an int >= 1"), ({"threads": True}, "threads must be an int"),
    ({"passes": "fold_constants"}, "passes must be"), ({"passes": 5}, "passes must be"),
    ({"options": [("threads", 1)]}, "options must be a dict"), ({"stub_ops": "Relu"}, "stub_ops must be"),
    ({"options": {"fold_max_bytes": "16M"}}, "fold_max_bytes"),
])
def test_session_settings_of_the_wrong_type_are_config_errors(settings_, fragment):
    g = GraphBuilder("m")
    x = g.input("x", ("N", 3), "float32")
    g.output(g.op("Add", x, g.op("Neg", np.ones(3, np.float32)), name="y"))  # Neg folds to a constant
    with pytest.raises(ConfigError, match=fragment):
        Session(g.build(), **settings_)


def _graph(nodes, inputs=("x",), outputs=("y",)):
    values = {"x": Value("x", TensorSpec((3,), "float32")),
              "k": Value("k", TensorSpec((3,), "float32"), np.ones(3, np.float32))}
    return Model(Graph(nodes, inputs, outputs, values, "g"))


@pytest.mark.parametrize("model, fragment", [
    (_graph([Node("Neg", ["x"], ["x"], name="n")]), "node 'n' writes 'x', which is already a graph input"),
    (_graph([Node("Neg", ["x"], ["k"], name="n"), Node("Add", ["x", "k"], ["y"], name="a")]), "writes 'k'"),
    (_graph([Node("Neg", ["x"], ["y"], name="n"), Node("Relu", ["x"], ["y"], name="r")]), "node 'r' writes 'y'"),
    (_graph([Node("Relu", ["x"], ["z"], name="n")]), r"outputs \['y'\] are never produced"),
    (_graph([Node("Relu", ["x"], ["y"], name="n")], inputs=("x", "x")), "lists an input twice"),
    (_graph([Node("Relu", ["ghost"], ["y"], name="n")]), "dangling inputs at node 'n'"),
])
def test_hand_built_graphs_with_ambiguous_values_are_rejected(model, fragment):
    with pytest.raises(ModelFormatError, match=fragment):
        Session(model, **REF)


# -- GraphBuilder / register_op / register_kernel misuse -------------------------------------------
def _builder():
    g = GraphBuilder("m")
    return g, g.input("x", (2, 3), "float32")


@pytest.mark.parametrize("build, error, fragment", [
    (lambda g, x: g.op("NoSuchOp", x), UnsupportedOpError, "'NoSuchOp' is not registered"),
    (lambda g, x: g.op("Relu", x, domain="no.such"), UnsupportedOpError, "'no.such::Relu'"),
    (lambda g, x: g.op("Relu", x, x), ShapeError, "got 2 inputs, op takes 1..1"),
    (lambda g, x: g.op("Relu"), ShapeError, "got 0 inputs"),
    (lambda g, x: g.op("Add", x), ShapeError, "got 1 inputs, op takes 2..2"),
    (lambda g, x: g.op("Add", None, x), ShapeError, "required input 'A' is missing"),
    (lambda g, x: g.op("Relu", "nope"), ModelFormatError, "no value named 'nope'"),
    (lambda g, x: g.op("Add", x, [[1.0, 2.0], [3.0]]), ModelFormatError, "cannot be read as an array"),
    (lambda g, x: g.op("Relu", object()), ShapeError, "dtype 'object'"),
    (lambda g, x: g.op("Relu", x, outputs=3, name="r"), ShapeError, "'r'.*rule gave 1 outputs, node has 3"),
    (lambda g, x: g.op("Relu", x, outputs=0, name="r"), ShapeError, "'r'.*node has no outputs"),
    (lambda g, x: g.op("LeakyRelu", x, alpha="big"), OpAttributeError, "'alpha' expects float"),
    (lambda g, x: g.op("LeakyRelu", x, alpha=[1.0]), OpAttributeError, "'alpha' expects float"),
    (lambda g, x: g.op("Gelu", x, approximate=b"\xff\xfe"), OpAttributeError, "'approximate' expects string"),
    (lambda g, x: g.op("Relu", x, colour=1), OpAttributeError, r"unknown attribute\(s\) \['colour'\]"),
    (lambda g, x: g.op("Concat", x), OpAttributeError, "required attribute 'axis'"),
    (lambda g, x: g.input("x", (1,)), ModelFormatError, "'x' is used twice"),
    (lambda g, x: g.input("y", (1,), "float128"), ShapeError, "float128"),
    (lambda g, x: g.input("y", 5), ShapeError, "not a sequence of dims"),
    (lambda g, x: g.input("y", (None, 3)), ShapeError, "dim None"),
    (lambda g, x: g.input("y", (-1, 3)), ShapeError, "dim -1"),
    (lambda g, x: g.input("y", (2.5, 3)), ShapeError, "dim 2.5"),
    (lambda g, x: g.input("y", (True, 3)), ShapeError, "dim True"),
    (lambda g, x: g.input("y", ("", 3)), ShapeError, "dim ''"),
    (lambda g, x: g.constant([[1], [1, 2]], name="k"), ModelFormatError, "'k' cannot be read"),
    (lambda g, x: g.constant("text"), ShapeError, "dtype"),
    (lambda g, x: g.output("nope"), ModelFormatError, "'nope'"),
    (lambda g, x: GraphBuilder("empty").build(), ModelFormatError, "has no outputs"),
])
def test_builder_misuse_is_a_typed_error(build, error, fragment):
    g, x = _builder()
    with pytest.raises(error, match=fragment):
        build(g, x)


def _op(**overrides):
    args = dict(domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input)
    args.update(overrides)
    return lambda: kk.register_op(args.pop("name", "Bad"), **args)


def _kernel(impl=lambda x: x, **overrides):
    args = dict(op="Relu", device="cpu", vendor="robustness", dtype="float32")
    args.update(overrides)
    return lambda: kk.register_kernel(args.pop("op"), **args)(impl)


@pytest.mark.parametrize("register, fragment", [
    (_op(name=""), "name and domain must be strings"),
    (_op(name=5), "name and domain must be strings"),
    (_op(domain=None), "name and domain must be strings"),
    (_op(infer=None), "infer must be a function"),
    (_op(inputs=None), "ports must be a list"),
    (_op(inputs="X"), "ports must be a list"),
    (_op(outputs=[1]), "ports must be a list"),
    (_op(inputs=["?"]), "ports must be a list"),
    (_op(attrs={"a": "int"}), r"attribute 'a' must map a name to \(type, default\)"),
    (_op(attrs={"a": ("int", 1, 2)}), r"\(type, default\)"),
    (_op(attrs={"a": ("complex", 1)}), "unknown attribute type 'complex'"),
    (_op(attrs={"a": ("int", "x")}), "'a' expects int.*the default"),
    (_op(attrs={"a": ("floats", [1.0, "x"])}), "'a' expects float.*the default"),
    (_op(name="Relu", domain=""), "already registered"),
    (_kernel(dtype=None), "dtype must be"),
    (_kernel(dtype=()), "dtype must be"),
    (_kernel(dtype=[1]), "dtype must be"),
    (_kernel(device=5), "must be non-empty strings"),
    (_kernel(vendor=""), "must be non-empty strings"),
    (_kernel(impl=5), "must be a function or a class"),
    (_kernel(impl=type("NoExecute", (), {"prepare": lambda self, specs, attrs: None})), r"lacks \['execute'\]"),
    (_kernel(vendor="reference"), "already registered"),
])
def test_registry_misuse_is_a_registry_error(register, fragment):
    with pytest.raises(RegistryError, match=fragment):
        register()
    assert ("Bad" not in "".join(kk.ops())) and not kk.kernels(vendor="robustness")


def test_register_kernel_with_an_unknown_dtype_is_typed():
    with pytest.raises(KernelkitError, match="float128"):
        kk.register_kernel("Relu", device="cpu", vendor="robustness", dtype="float128")(lambda x: x)


# -- fixed bugs: each one as found by the fuzzer, with its correct answer ----------------------------
def _ort_pad(x, pads, mode):
    """onnxruntime's Pad (the oracle for negative pads, which onnx's ReferenceEvaluator rejects)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)
    graph = helper.make_graph([node], "pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                              helper.make_tensor_value_info("p", TensorProto.INT64, [len(pads)])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "p": np.array(pads, np.int64)})[0]


@pytest.mark.parametrize("pads", [[5, -4], [1, -3], [0, -3], [-1, 2], [-2, 4]])
@pytest.mark.parametrize("constant", [False, True])
def test_pad_that_grows_and_crops_one_axis_matches_onnxruntime(pads, constant):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    model = single_op_model("Pad", [x, np.array(pads, np.int64)], constants=(1,) if constant else ())
    sess = Session(model, **REF)
    (y,) = sess.run(None, {"in0": x} if constant else {"in0": x, "in1": np.array(pads, np.int64)})
    np.testing.assert_array_equal(y, _ort_pad(x, pads, "constant"))
    spec = sess.get_outputs()[0].shape
    assert isinstance(spec[0], str) or spec == y.shape  # the shape rule and the kernel agree


def test_edge_pad_that_crops_more_than_it_has_is_an_error():
    with pytest.raises(KernelExecutionError, match="cannot crop"):
        run_single_op("Pad", [np.ones(3, np.float32), np.array([2, -4], np.int64)], {"mode": "edge"}, **REF)


@pytest.mark.parametrize("op, inputs, attrs, expected", [
    ("Transpose", [np.array(5, np.int32)], {}, np.array(5, np.int32)),  # was returned as shape (1,)
    ("Softmax", [np.zeros((2, 2, 0), np.float32)], {}, np.zeros((2, 2, 0), np.float32)),
    ("LogSoftmax", [np.zeros((2, 0, 3), np.float32)], {"axis": 1}, np.zeros((2, 0, 3), np.float32)),
    ("CumSum", [np.zeros((3, 0), np.float32), np.array(-1)], {"exclusive": 1, "reverse": 1},
     np.zeros((3, 0), np.float32)),
    ("CumSum", [np.arange(4, dtype=np.float32), np.array(0)], {"exclusive": 1}, np.array([0, 0, 1, 3], np.float32)),
    ("LRN", [np.zeros((2, 0, 3, 3), np.float32)], {"size": 3}, np.zeros((2, 0, 3, 3), np.float32)),
    ("GlobalMaxPool", [np.zeros((0, 3, 0, 2), np.float32)], {}, np.zeros((0, 3, 1, 1), np.float32)),
    ("Resize", [np.zeros((2, 0, 4, 3), np.float32), None, None, np.array([2, 0, 8, 6], np.int64)], {},
     np.zeros((2, 0, 8, 6), np.float32)),
])
def test_degenerate_inputs_give_the_right_answer(op, inputs, attrs, expected):
    with np.errstate(divide="ignore"):  # LogSoftmax takes log(0) over an empty axis: no element to see it
        (y,) = run_single_op(op, inputs, attrs, **REF)
    assert y.shape == expected.shape and y.dtype == expected.dtype
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("op, inputs, attrs, constants, error, fragment", [
    ("BatchNormalization", [np.ones((1, 3, 2), np.float32), np.ones((), np.float32)] + [np.ones(3, np.float32)] * 3,
     {}, (), ShapeError, r"scale float32\[\] must have shape \(3,\)"),
    ("Concat", [np.array(4, np.int16)], {"axis": 0}, (), ShapeError, "rank >= 1"),
    ("Split", [np.array(4, np.int8), np.array([0, 4])], {}, (), ShapeError, "rank >= 1"),
    ("TopK", [np.array(3, np.int32), np.array([1])], {"axis": 0}, (), ShapeError, "axis 0 is out of range for rank 0"),
    ("Softmax", [np.array(3, np.float32)], {}, (), ShapeError, "out of range for rank 0"),
    ("CumSum", [np.ones((3, 5), np.float32), np.array([0, 1])], {}, (1,), ShapeError, "axis must hold one value"),
    ("Reshape", [np.ones(4, np.float32), np.array(4)], {}, (1,), ShapeError, "1-D integer tensor"),
    ("Reshape", [np.ones(4, np.float32), np.array(4)], {}, (), ShapeError, "1-D integer tensor, got int64"),
    ("Tile", [np.ones(4, np.float32), np.array(2)], {}, (), ShapeError, "1-D integer tensor"),
    ("Slice", [np.ones((4, 5), np.float32), np.array([1]), np.array(3)], {}, (), ShapeError, "1-D integer tensor"),
    ("Slice", [np.ones((4, 5), np.float32), np.array([1]), np.array([3]), np.array([0]), np.array([1.0])], {}, (),
     ShapeError, "input 4 must be a 1-D integer tensor"),
    ("ConvTranspose", [np.ones((1, 4, 0, 3), np.float32), np.ones((4, 1, 3, 3), np.float32)], {}, (), ShapeError,
     "empty spatial dim"),
    ("Expand", [np.ones((1, 4, 1), np.float32), np.array([6, 3, -3, -3])], {}, (), KernelExecutionError,
     r"'Expand_0'.*negative dim"),
    ("Expand", [np.ones((2, 3), np.float32), np.array([4, 3])], {}, (), KernelExecutionError,
     r"\(2, 3\) does not broadcast with shape \[4, 3\]"),
    ("ConstantOfShape", [np.array([2, -1])], {}, (), KernelExecutionError, "negative dim"),
    ("Resize", [np.zeros((2, 0, 4, 3), np.float32), None, None, np.array([2, 1, 8, 6], np.int64)], {}, (),
     KernelExecutionError, "grow an empty dim"),
    ("GlobalMaxPool", [np.zeros((2, 3, 0, 2), np.float32)], {}, (), KernelExecutionError, "empty spatial extent"),
])
def test_bad_inputs_found_by_fuzzing_are_typed_errors(op, inputs, attrs, constants, error, fragment):
    with pytest.raises(error, match=fragment) as info:
        run_single_op(op, inputs, attrs, constants=constants, **REF)
    _assert_deliberate(info.value)


# -- attribute and input fuzzing of every registered op ----------------------------------------------
FUZZ_EXAMPLES = 20 * int(os.environ.get("KK_FUZZ_SCALE", "1"))  # e.g. KK_FUZZ_SCALE=20 for a deeper search
CORE_OPS = [op for op in kk.ops() if "::" not in op and get_schema(op).samples is not None]
STRINGS = ["", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "tanh", "none", "linear", "cubic", "nearest",
           "DCR", "CRD", "edge", "reflect", "wrap", "constant", "asymmetric", "align_corners", "not_larger",
           "floor", "round_prefer_ceil", "relu", "leaky_relu", "clip", "\x00"]
ATTR_VALUES = st.one_of(
    st.integers(-3, 6),
    st.sampled_from([2**31, -2**31, 2**63 - 1, -2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(STRINGS), st.text(max_size=4), st.binary(max_size=3),
    st.lists(st.integers(-3, 6), max_size=6),
    st.lists(st.floats(-4, 4), max_size=4),
    st.lists(st.sampled_from(STRINGS), max_size=3),
    st.booleans(), st.none(), st.just({}), st.just([2**40, -2**40]),
    st.builds(np.zeros, st.sampled_from([(), (1,), (2,), (1, 2)]),
              st.sampled_from(["float32", "float64", "int64", "bool"])),
)
DEADLY = (TypeError, AttributeError, KeyError, RecursionError, AssertionError, NameError, UnboundLocalError)


def _assert_deliberate(exc: KernelkitError) -> None:
    """A KernelkitError is fine when it was raised on purpose: directly, or wrapping an error that
    kernelkit's own code raised (a kernel's ValueError on run-time data). A shape rule that crashed,
    or a kernel failing inside NumPy, means a check is missing."""
    cause = exc.__cause__
    if cause is None or isinstance(cause, (KernelkitError, MemoryError)):
        return
    where = traceback.extract_tb(cause.__traceback__)[-1] if cause.__traceback__ else None
    detail = f"{type(exc).__name__}: {exc}\n  caused by {type(cause).__name__} at {where}"
    assert not isinstance(exc, ShapeError), f"a shape rule crashed: {detail}"
    assert not isinstance(cause, DEADLY), f"a kernel crashed: {detail}"
    assert where is not None and where.filename.startswith(KERNELKIT_DIR), f"unchecked input reached NumPy: {detail}"


def _mutated_input(data, x):
    x = np.asarray(x)
    choice = data.draw(st.sampled_from(["keep", "keep", "ints", "scalar", "shape", "dtype", "empty"]))
    if choice == "ints" and x.dtype.kind == "i":
        return np.array(data.draw(st.lists(st.integers(-4, 6), max_size=5)), dtype=x.dtype)
    if choice == "scalar" and x.dtype.kind == "i":
        return np.array(data.draw(st.integers(-3, 5)), dtype=x.dtype)
    if choice == "shape":
        shape = tuple(data.draw(st.lists(st.integers(0, 3), max_size=4)))
        return np.random.default_rng(len(shape)).uniform(-3, 3, shape).astype(x.dtype)
    if choice == "dtype":
        return x.astype(data.draw(st.sampled_from(["float32", "float64", "int64", "int32", "bool"])))
    if choice == "empty" and x.ndim:
        return x[..., :0]
    return x


def _fuzz_case(data, op):
    schema = get_schema(op)
    dtypes = sorted({k.dtype for k in kk.kernels(op, vendor="reference")} - {"*"}) or ["float32"]
    cases = sample_cases(op, data.draw(st.sampled_from(dtypes)))
    inputs, attrs, options = data.draw(st.sampled_from(cases))
    for name in list(schema.attrs) + ["not_an_attribute"]:
        if data.draw(st.integers(0, 9)) < (3 if name in schema.attrs else 1):
            attrs[name] = data.draw(ATTR_VALUES)
    inputs = [x if x is None or data.draw(st.booleans()) else _mutated_input(data, x) for x in inputs]
    if inputs and data.draw(st.integers(0, 19)) == 0:
        inputs = inputs[:-1] if data.draw(st.booleans()) else inputs + inputs[:1]
    constants = tuple(options.get("constants", ()))
    if data.draw(st.booleans()):  # integer inputs as constants: the shape rule sees their values
        constants = tuple(i for i, x in enumerate(inputs) if x is not None and np.asarray(x).dtype.kind in "iu")
    n_outputs = options.get("n_outputs")
    if data.draw(st.integers(0, 19)) == 0:
        n_outputs = data.draw(st.integers(0, 4))
    return inputs, attrs, constants, n_outputs


def _run_fuzz_case(op, inputs, attrs, constants, n_outputs):
    """Build and run one case: only KernelkitErrors raised on purpose, or outputs fitting their specs."""
    try:
        model = single_op_model(op, inputs, attrs, n_outputs, constants)
        sess = Session(model, **REF)
        outs = sess.run(None, {f"in{i}": np.asarray(x) for i, x in enumerate(inputs)
                               if x is not None and i not in constants})
    except KernelkitError as exc:
        _assert_deliberate(exc)
        return
    for out, info in zip(outs, sess.get_outputs()):
        shape = physical_shape(info.shape, sess.graph.values[info.name].spec.layout)  # LayoutReorder's array
        fits = out.dtype.name == info.type and out.ndim == len(shape) and all(
            isinstance(d, str) or d == n for d, n in zip(shape, out.shape))
        assert fits, f"inferred {info.type}{list(info.shape)}, kernel gave {out.dtype}{list(out.shape)}"


@pytest.mark.parametrize("op", CORE_OPS)
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzzed_attributes_and_inputs_give_typed_errors_or_fitting_outputs(op, data):
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # NaN/overflow warnings are expected here
        warnings.simplefilter("ignore")
        _run_fuzz_case(op, *_fuzz_case(data, op))


# -- concurrency ------------------------------------------------------------------------------------
def _mlp():
    rng = np.random.default_rng(5)
    w1, b1 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)
    g = GraphBuilder("mlp")
    x = g.input("x", ("N", 8), "float32")
    h = g.op("Relu", g.op("Add", g.op("MatMul", x, w1), b1))
    y = g.op("Softmax", g.op("MatMul", h, w2), name="probs")
    g.output(y, g.op("Reshape", y, np.array([-1], np.int64), name="flat"))

    def reference(x):
        h = np.maximum(x.astype(np.float64) @ w1 + b1, 0)
        z = h @ w2
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return g.build(), reference


@pytest.mark.parametrize("vendors", [None, ["reference"]])
def test_eight_threads_with_different_batch_sizes_get_their_own_results(vendors):
    model, reference = _mlp()
    sess = Session(model, vendors=vendors)
    sess.run(None, {"x": np.zeros((1, 8), np.float32)})  # compile any JIT kernel outside the race
    start = threading.Barrier(8)
    failures: list[str] = []

    def worker(t: int):
        rng = np.random.default_rng(100 + t)
        start.wait()
        for i in range(12):
            x = rng.standard_normal((1 + (t * 3 + i) % 9, 8)).astype(np.float32)
            if i % 3 == 2:
                probs, flat = sess.run_async(None, {"x": x}).result()
            else:
                probs, flat = sess.run(None, {"x": x})
            want = reference(x).astype(np.float32)
            try:
                assert_close(probs, want, err_msg=f"thread {t} run {i} batch {len(x)}")
                np.testing.assert_array_equal(flat, probs.reshape(-1))
            except AssertionError as exc:
                failures.append(str(exc))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a run hung"
    assert not failures, failures[0]

"""Real architectures (small versions, built without torch by benchmarks/models/zoo.py) convert,
run on kernelkit's reference kernels and agree with onnxruntime."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("kernelkit_converters")
ort = pytest.importorskip("onnxruntime")

import kernelkit  # noqa: E402
from kernelkit.testing import MODEL_COSINE, assert_close, cosine  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_zoo", Path(__file__).parents[1] / "benchmarks/models/zoo.py")
zoo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo)


@pytest.fixture(scope="module", params=sorted(zoo.SMALL))
def case(request):
    proto = zoo.SMALL[request.param]()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    oracle = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return request.param, proto, convert(proto.SerializeToString()), oracle


@pytest.mark.parametrize("passes", [None, False], ids=["passes", "no_passes"])
def test_model_agrees_with_onnxruntime(case, passes):
    name, proto, model, oracle = case
    session = kernelkit.Session(model, vendors=["reference"], fallback=False, passes=passes)
    assert set(session.placement().values()) == {("cpu", "reference")}
    for batch in (1, 3):  # the batch dim is symbolic: one session, two shapes
        x = np.random.default_rng(batch).standard_normal(zoo.input_shape(proto, batch)).astype(np.float32)
        (want,) = oracle.run(None, {"x": x})
        (got,) = session.run(None, {"x": x})
        assert cosine(got, want) >= MODEL_COSINE, name
        assert_close(got, want, err_msg=name)


def test_batch_dim_stays_symbolic(case):
    """The input keeps its symbol; once the session's passes fold the exporter's shape chains, the
    output is known to share it."""
    name, proto, model, _ = case
    assert model.graph.values["x"].spec.shape[0] == "N"
    assert kernelkit.Session(model).graph.values["y"].spec.shape[0] == "N", name


def test_passes_shrink_the_graph(case):
    """Exporter patterns are folded: BatchNorm into Conv, shape chains into constants."""
    name, proto, model, _ = case
    session = kernelkit.Session(model)
    assert len(session.graph.nodes) < len(model.graph.nodes), name
    shape_ops = [n for n in session.graph.nodes if n.op in ("Shape", "Gather", "Concat", "Unsqueeze")]
    assert not shape_ops, f"{name}: shape chain left: {shape_ops[:3]}"
    if name != "transformer" and name != "mlp":
        assert not [n for n in session.graph.nodes if n.op == "BatchNormalization"], name


def test_model_saves_and_loads(case, tmp_path):
    name, proto, model, oracle = case
    kernelkit.save(model, tmp_path / f"{name}.kkm")
    x = np.random.default_rng(0).standard_normal(zoo.input_shape(proto, 2)).astype(np.float32)
    (got,) = kernelkit.Session(kernelkit.load(tmp_path / f"{name}.kkm")).run(None, {"x": x})
    assert_close(got, oracle.run(None, {"x": x})[0], err_msg=name)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW8c"])
def test_model_in_a_layout_agrees_with_onnxruntime(case, layout):
    """The layout pass on a real graph (symbolic batch): numba's layout variants where the channels
    fit, reorders at the boundaries, the same answers as onnxruntime and as the default layout."""
    name, proto, model, oracle = case
    vendors = ["numba", "reference"]
    plain = kernelkit.Session(model, vendors=vendors, threads=1)
    laid = kernelkit.Session(model, vendors=vendors, threads=1, options={"layout": layout})
    convs = [s for s in laid.plan.kernel_steps() if s.op == "Conv"]
    if name in ("resnet18", "resnet50", "mobilenet_v2"):
        assert sum(1 for s in convs if s.key.layout == layout) >= len(convs) // 2, name
        reorders = [n for n in laid.graph.nodes if n.op == "LayoutReorder"]
        assert len(reorders) == 2, (name, reorders)  # into the layout once, out once: no ping-pong
    else:
        assert not convs and set(laid.layouts().values()) == {""}, name
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal(zoo.input_shape(proto, batch)).astype(np.float32)
        (want,) = oracle.run(None, {"x": x})
        (got,) = laid.run(None, {"x": x})
        assert_close(got, want, err_msg=f"{name} {layout}")
        assert_close(got, plain.run(None, {"x": x})[0], err_msg=f"{name} {layout}")


@pytest.fixture(scope="module", params=sorted(zoo.EXTRA_SMALL))
def extra(request):
    """Issue 11's five architectures from real exports (EfficientNet-B0, RegNetY, GPT-2, BERT, a
    YOLO-style detection head): SiLU and squeeze-excitation, grouped convs, int64 token ids through
    Range/Gather/Slice, a boolean causal mask through Where, a padding mask through Equal/Not/Cast,
    Resize and a box decode."""
    proto = zoo.EXTRA_SMALL[request.param]()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    oracle = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return request.param, proto, convert(proto.SerializeToString()), oracle


@pytest.mark.parametrize("vendor", ["reference", "numba"])
def test_extra_model_agrees_with_onnxruntime(extra, vendor):
    if vendor == "numba":
        pytest.importorskip("kernelkit_numba")
    name, proto, model, oracle = extra
    session = kernelkit.Session(model, vendors=[vendor, "reference"], threads=1)
    if vendor == "numba":  # the compute runs on numba; only shape arithmetic and views may stay
        left = {s.op for s in session.plan.kernel_steps() if s.placement[1] == "reference"} - {
            "Shape", "Reshape", "Squeeze", "Unsqueeze", "Range", "Slice", "Concat", "ConstantOfShape", "Equal", "Not"}
        assert not left, (name, left)
    for batch in (1, 3):
        feed = zoo.feed(proto, batch, seed=batch)
        (want,) = oracle.run(None, feed)
        (got,) = session.run(None, feed)
        assert cosine(got, want) >= MODEL_COSINE, name
        assert_close(got, want, err_msg=f"{name} {vendor} batch {batch}")

"""Issue 14's acceptance: models exported from PyTorch with the ops exporters emit (TorchScript
exporter, ``dynamo=False``; and the dynamo exporter where onnxscript is installed) convert, and
agree with onnxruntime (cosine >= MODEL_COSINE) on the reference, on numba (its kernels for the
hot ops, the reference for the rest) and on OpenCL (its kernels, others falling back to the CPU).

Models are tiny with random weights; they exercise Mod (nn.TransformerEncoder), LSTM and GRU
(bidirectional, two layers), TopK + NonMaxSuppression, and GatherND with an attention mask. They are
committed under tests/data/exported/ (model files are data), written by its make.py from the torch
modules defined there, so these tests need neither torch nor onnxscript."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("kernelkit_converters")

import kernelkit  # noqa: E402
from kernelkit.testing import MODEL_COSINE, cosine  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_converters.onnx.conformance import installed_vendors  # noqa: E402

VENDORS = installed_vendors()


HOT_OPS = {"encoder": {"MatMul"}, "lstm": {"LSTM"}, "gru": {"GRU"}, "detection": {"TopK"},
           "bert_dynamo": {"GatherND"}}
# on numba, fuse_attention turns the encoder's per-head MatMuls into one Attention node
NUMBA_HOT_OPS = {**HOT_OPS, "encoder": {"Attention"}}


DATA = Path(__file__).resolve().parent / "data" / "exported"


@pytest.fixture(scope="module", params=list(HOT_OPS))
def exported(request):
    proto = (DATA / f"{request.param}.onnx").read_bytes()
    with np.load(DATA / f"{request.param}.npz") as z:
        inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
    oracle = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    feeds = dict(zip([i.name for i in oracle.get_inputs()], inputs))
    return request.param, convert(proto), feeds, oracle.run(None, feeds)


def _agree(name, got, want):
    for g, w in zip(got, want):
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            assert cosine(g, w) >= MODEL_COSINE, name


def test_converts_with_the_ops_exporters_emit(exported):
    name, model, _, _ = exported
    ops = {n.op for n in model.graph.nodes}
    assert "Mod" not in ops  # constant inputs: folded at conversion
    assert HOT_OPS[name] <= ops | {"MatMul"}, (name, ops)


def test_reference_agrees_with_onnxruntime(exported):
    name, model, feeds, want = exported
    session = kernelkit.Session(model, vendors=["reference"], fallback=False)
    _agree(name, session.run(None, feeds), want)


@pytest.mark.skipif("numba" not in VENDORS, reason="kernelkit_numba is not installed")
def test_numba_agrees_with_onnxruntime(exported):
    name, model, feeds, want = exported
    session = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
    on_numba = {n.op for n in session.graph.nodes if session.placement()[n.name][1] == "numba"}
    assert NUMBA_HOT_OPS[name] <= on_numba, (name, on_numba)
    _agree(name, session.run(None, feeds), want)


@pytest.mark.skipif("opencl" not in VENDORS, reason="no OpenCL device")
def test_opencl_agrees_with_onnxruntime(exported):
    name, model, feeds, want = exported
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = kernelkit.Session(model, device="gpu", vendors=["opencl"], fallback=True)
    _agree(name, session.run(None, feeds), want)

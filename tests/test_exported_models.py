"""Issue 14's acceptance: models exported from PyTorch with the ops exporters emit (TorchScript
exporter, ``dynamo=False``; and the dynamo exporter where onnxscript is installed) convert, and
agree with onnxruntime (cosine >= MODEL_COSINE) on the reference, on numba (its kernels for the
hot ops, the reference for the rest) and on OpenCL (its kernels, others falling back to the CPU).

Models are tiny with random weights; they exercise Mod (nn.TransformerEncoder), LSTM and GRU
(bidirectional, two layers), TopK + NonMaxSuppression, and GatherND with an attention mask."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("kernelkit_converters")

import kernelkit  # noqa: E402
from kernelkit.testing import MODEL_COSINE, cosine  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_converters.onnx.conformance import installed_vendors  # noqa: E402

VENDORS = installed_vendors()


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


class Classifier(torch.nn.Module):
    """Embedding -> 2-layer bidirectional LSTM/GRU -> Linear on the last step."""

    def __init__(self, cell):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.rnn = cell(16, 24, batch_first=True, bidirectional=True, num_layers=2)
        self.fc = torch.nn.Linear(48, 5)

    def forward(self, tokens):
        out, _ = self.rnn(self.emb(tokens))
        return self.fc(out[:, -1])


class _NMS(torch.autograd.Function):
    """NonMaxSuppression as the exporter writes it (torchvision's nms exports the same node)."""

    @staticmethod
    def forward(ctx, boxes, scores, limit, iou, score_threshold):
        return torch.zeros((0, 3), dtype=torch.int64)  # only the export's graph is used

    @staticmethod
    def symbolic(g, boxes, scores, limit, iou, score_threshold):
        return g.op("NonMaxSuppression", boxes, scores, limit, iou, score_threshold)


class DetectionHead(torch.nn.Module):
    """Conv features -> per-anchor boxes and scores -> TopK(20) -> NonMaxSuppression."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.box = torch.nn.Conv2d(8, 4, 1)
        self.score = torch.nn.Conv2d(8, 1, 1)

    def forward(self, x):
        f = torch.relu(self.conv(x))
        xy = torch.sigmoid(self.box(f)).flatten(2).transpose(1, 2) * 16  # (1, A, 4)
        boxes = torch.cat([xy[..., :2], xy[..., :2] + 1 + xy[..., 2:] / 4], dim=-1)
        scores = torch.sigmoid(self.score(f)).flatten(1)  # (1, A)
        top, idx = torch.topk(scores[0], 20)
        picked = boxes[0, idx]
        keep = _NMS.apply(picked[None], top[None, None], torch.tensor([6]), torch.tensor([0.3]),
                          torch.tensor([0.1]))
        return picked, top, keep


class Bert(torch.nn.Module):
    """A BERT-like encoder with a padding mask; pools the last unmasked token (GatherND)."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(64, 32), torch.nn.Embedding(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.layers = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(
            32, 4, 64, dropout=0.0, batch_first=True, activation="gelu") for _ in range(2)])
        self.head = torch.nn.Linear(32, 3)

    def forward(self, ids, mask):
        h = self.norm(self.tok(ids) + self.pos(torch.arange(ids.shape[1]))[None])
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=mask == 0)
        return self.head(h[torch.arange(ids.shape[0]), mask.sum(1) - 1])


def _torchscript(module, args) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, f, dynamo=False, opset_version=17)
    return f.getvalue()


def _dynamo(module, args) -> bytes:
    pytest.importorskip("onnxscript")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(module.eval(), args, dynamo=True, verbose=False).model_proto.SerializeToString()


def _feeds():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50, (3, 9)).astype(np.int64)
    mask = np.ones((2, 16), np.int64)
    mask[1, 10:] = 0
    return {
        "encoder": (Encoder, _torchscript, [rng.standard_normal((2, 7, 32)).astype(np.float32)]),
        "lstm": (lambda: Classifier(torch.nn.LSTM), _torchscript, [tokens]),
        "gru": (lambda: Classifier(torch.nn.GRU), _torchscript, [tokens]),
        "detection": (DetectionHead, _torchscript, [rng.standard_normal((1, 3, 8, 8)).astype(np.float32)]),
        "bert_dynamo": (Bert, _dynamo, [rng.integers(0, 64, (2, 16)).astype(np.int64), mask]),
    }


HOT_OPS = {"encoder": {"MatMul"}, "lstm": {"LSTM"}, "gru": {"GRU"}, "detection": {"TopK"},
           "bert_dynamo": {"GatherND"}}


@pytest.fixture(scope="module", params=list(_feeds()))
def exported(request):
    torch.manual_seed(0)
    build, export, inputs = _feeds()[request.param]
    proto = export(build(), tuple(torch.from_numpy(x) for x in inputs))
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
    assert HOT_OPS[name] <= on_numba, (name, on_numba)
    _agree(name, session.run(None, feeds), want)


@pytest.mark.skipif("opencl" not in VENDORS, reason="no OpenCL device")
def test_opencl_agrees_with_onnxruntime(exported):
    name, model, feeds, want = exported
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = kernelkit.Session(model, device="gpu", vendors=["opencl"], fallback=True)
    _agree(name, session.run(None, feeds), want)

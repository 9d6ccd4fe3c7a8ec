"""Writes the exported models of tests/test_exported_models.py: ``<name>.onnx`` (random weights,
seed 0) and ``<name>.npz`` (its inputs) beside this file. Needs torch and, for the dynamo export,
onnxscript; the tests themselves need neither (the files are committed, as model files are data).

    python tests/data/exported/make.py
"""
from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


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




def main() -> None:
    for name, (build, export, inputs) in _feeds().items():
        torch.manual_seed(0)
        proto = export(build(), tuple(torch.from_numpy(x) for x in inputs))
        (HERE / f"{name}.onnx").write_bytes(proto)
        np.savez(HERE / f"{name}.npz", *inputs)
        print(f"{name}: {len(proto):,} bytes")


if __name__ == "__main__":
    main()

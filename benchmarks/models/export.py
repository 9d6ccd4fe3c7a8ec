"""Export real architectures from PyTorch to ONNX, random weights (torch is an optional dev tool).

    pip install torch==2.13.0        # the CPU build
    python benchmarks/models/export.py [--out DIR] [--models resnet18,resnet50,...] [--check]

The modules are written out here (torchvision is not used): ResNet-18/-50, MobileNetV2, a transformer
encoder (nn.TransformerEncoderLayer: multi-head attention, LayerNorm, GELU) and an MLP. Each is
exported with ``torch.onnx.export(..., dynamo=False)`` at opset 17 with a dynamic batch dim "N".
``--check`` converts each file with kernelkit, runs it on the reference kernels and prints the
agreement with onnxruntime. Default DIR: $KERNELKIT_MODELS or the user cache dir (kernelkit/models).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from torch import nn


def models_dir() -> Path:
    if os.environ.get("KERNELKIT_MODELS"):
        return Path(os.environ["KERNELKIT_MODELS"])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kernelkit")) / "models"


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.down = None
        if stride != 1 or cin != planes:
            self.down = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        cout = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, block, layers, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for i, count in enumerate(layers):
            planes = 64 * 2**i
            for j in range(count):
                stages.append(block(cin, planes, 2 if i > 0 and j == 0 else 1))
                cin = planes * block.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.stages(self.stem(x)), 1)
        return self.fc(x.view(x.size(0), -1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers, cin = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()], 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class SelfAttention(nn.Module):
    """Multi-head self-attention written out (nn.MultiheadAttention's eval fast path has no ONNX export)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.q, self.k, self.v, self.out = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x):
        n, t, d = x.shape

        def split(y):
            return y.view(n, t, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.softmax(q @ k.transpose(-2, -1) / self.head_dim**0.5, dim=-1)
        return self.out((scores @ v).transpose(1, 2).reshape(n, t, d))


class EncoderLayer(nn.Module):
    """Post-norm layer as nn.TransformerEncoderLayer(activation="gelu") computes it."""

    def __init__(self, d_model: int, heads: int, ff: int):
        super().__init__()
        self.attn = SelfAttention(d_model, heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, ff), nn.GELU(), nn.Linear(ff, d_model))

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ff(x))


class Encoder(nn.Module):
    def __init__(self, layers: int = 4, d_model: int = 256, heads: int = 4, ff: int = 1024):
        super().__init__()
        self.layers = nn.Sequential(*(EncoderLayer(d_model, heads, ff) for _ in range(layers)))

    def forward(self, x):
        return self.layers(x)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10),
                         nn.Softmax(dim=-1))


ARCHS = {  # name -> (module factory, example input shape for batch 1)
    "resnet18": (lambda: ResNet(BasicBlock, [2, 2, 2, 2]), (1, 3, 224, 224)),
    "resnet50": (lambda: ResNet(Bottleneck, [3, 4, 6, 3]), (1, 3, 224, 224)),
    "mobilenet_v2": (MobileNetV2, (1, 3, 224, 224)),
    "transformer": (Encoder, (1, 128, 256)),
    "mlp": (mlp, (1, 784)),
}


def _randomize_norms(module: nn.Module, gen: torch.Generator) -> None:
    """Random running statistics, so BatchNorm folding is exercised on non-trivial numbers."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1, generator=gen)
            m.running_var.uniform_(0.8, 1.2, generator=gen)
            m.weight.data.uniform_(0.8, 1.2, generator=gen)
            m.bias.data.uniform_(-0.1, 0.1, generator=gen)


def export(name: str, out: Path) -> Path:
    factory, shape = ARCHS[name]
    torch.manual_seed(0)
    module = factory().eval()
    _randomize_norms(module, torch.Generator().manual_seed(0))
    path = out / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(module, (torch.randn(*shape),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return path


def check(path: Path) -> str:
    import kernelkit
    import numpy as np
    import onnxruntime as ort
    from kernelkit.testing import cosine
    from kernelkit_converters.onnx import convert

    session = kernelkit.Session(convert(path), vendors=["reference"], fallback=False)
    oracle = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shape = [2 if isinstance(d, str) else d for d in session.get_inputs()[0].shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got, want = session.run(None, {"x": x})[0], oracle.run(None, {"x": x})[0]
    err, scale = np.abs(got - want).max(), np.abs(want).max()
    return f"cosine {cosine(got, want):.9f}  max abs err {err:.3g}  max |y| {scale:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--models", default=",".join(ARCHS))
    parser.add_argument("--check", action="store_true", help="compare kernelkit with onnxruntime on each")
    args = parser.parse_args()
    out = args.out or models_dir()
    out.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        path = export(name, out)
        print(f"{name}: {path} ({path.stat().st_size / 1e6:.1f} MB)" + (f"  {check(path)}" if args.check else ""))


if __name__ == "__main__":
    main()

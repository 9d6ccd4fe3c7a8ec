"""Train the bundled example: a small CNN on scikit-learn's 8x8 digits, saved as kernelkit IR.

    pip install torch==2.13.0        # CPU build; only this script needs torch
    python examples/digits/train.py  # writes packages/core/src/kernelkit/examples_data/digits/

Network (built with kernelkit.GraphBuilder from the trained weights):
    x[N,1,8,8] -> Conv 3x3 (8) + Relu -> Conv 3x3 (16) + Relu -> MaxPool 2x2 -> Flatten
               -> Gemm (10) -> Softmax -> probs[N,10]

Outputs: digits.kkm (the model), test.npz (held-out images ``x``, their ``label`` and torch's
``probs`` for them, the external reference the deployment file validates against) and digits.yml.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import kernelkit as kk
import numpy as np
from kernelkit.testing import assert_close

log = logging.getLogger("kernelkit.examples.digits")
OUT = Path(__file__).resolve().parents[2] / "packages/core/src/kernelkit/examples_data/digits"

DEPLOYMENT = """\
# kernelkit deployment file for the bundled digits example (see docs/deployment.md)
name: digits
model: digits.kkm
device: cpu
fallback: true
inputs:
  - name: x
    shape: [N, 1, 8, 8]
    dtype: float32
validation:
  data: test.npz          # x: held-out images, probs: torch's outputs for them
"""


def load_data(seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # [N, 1, 8, 8] in [0, 1]
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, stratify=y, random_state=seed)


def train(x_train, y_train, epochs: int, seed: int):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 10),
    )
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-4)
    xs, ys = torch.from_numpy(x_train), torch.from_numpy(y_train)
    gen = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        net.train()
        for idx in torch.randperm(len(xs), generator=gen).split(64):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
        log.info("epoch %d loss %.4f", epoch, loss.item())
    net.eval()
    return net


def build(net) -> kk.Model:
    """The trained network as a kernelkit graph with a symbolic batch dimension."""
    p = {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}
    g = kk.GraphBuilder("digits_cnn")
    x = g.input("x", ("N", 1, 8, 8), "float32")
    h = g.op("Relu", g.op("Conv", x, g.constant(p["0.weight"], "conv1.w"), g.constant(p["0.bias"], "conv1.b"),
                          pads=(1, 1, 1, 1), name="conv1"))
    h = g.op("Relu", g.op("Conv", h, g.constant(p["2.weight"], "conv2.w"), g.constant(p["2.bias"], "conv2.b"),
                          pads=(1, 1, 1, 1), name="conv2"))
    h = g.op("Flatten", g.op("MaxPool", h, kernel_shape=(2, 2), strides=(2, 2), name="pool"), axis=1)
    logits = g.op("Gemm", h, g.constant(p["6.weight"], "fc.w"), g.constant(p["6.bias"], "fc.b"), transB=1, name="fc")
    g.output(g.op("Softmax", logits, axis=1, name="probs"))
    model = g.build()
    model.metadata.update({"dataset": "sklearn.datasets.load_digits", "task": "classification",
                           "input": "8x8 grey image scaled to [0, 1]", "labels": "0-9"})
    return model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import torch

    x_train, x_test, y_train, y_test = load_data(args.seed)
    net = train(x_train, y_train, args.epochs, args.seed)
    with torch.no_grad():
        expected = torch.softmax(net(torch.from_numpy(x_test)), dim=1).numpy()
    model = build(net)
    [probs] = kk.Session(model).run(None, {"x": x_test})
    assert_close(probs, expected, err_msg="kernelkit vs torch")
    accuracy = float(np.mean(probs.argmax(1) == y_test))
    log.info("held-out accuracy %.2f%% on %d images", 100 * accuracy, len(y_test))
    if accuracy < 0.95:
        raise SystemExit(f"accuracy {accuracy:.3f} is below 0.95; not writing the example")

    args.out.mkdir(parents=True, exist_ok=True)
    kk.save(model, args.out / "digits.kkm")
    np.savez_compressed(args.out / "test.npz", x=x_test, label=y_test, probs=expected.astype(np.float32))
    (args.out / "digits.yml").write_text(DEPLOYMENT)
    for f in sorted(args.out.iterdir()):
        log.info("wrote %s (%d bytes)", f, f.stat().st_size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

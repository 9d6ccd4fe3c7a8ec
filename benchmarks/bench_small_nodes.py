"""One-node sessions, numba against the reference (issue 11, session 7): the node classes that ran
slower on numba in ops_vs_reference.py. Both sessions at one thread (the reference's BLAS too), each
node's best profiled time over ``reps`` runs, the two sessions run in turn::

    python benchmarks/bench_small_nodes.py [reps=200] [filter]

Cases: batch-1 Gemm heads (M = 1), 1x1 convolutions of 1x1 maps (squeeze-and-excitation) and of
14x14 / 7x7 maps (EfficientNet-B0), RegNetY-400MF's grouped 3x3 layers (stride 1 and 2) and its 1x1/2
shortcuts (RegNetY's, ResNet-18's and ResNet-50's: session 10) and the detection head's x2 Resize
(session 9), Sigmoid at EfficientNet's sizes, GPT-2's masked Where.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from _timing import best_node_ms_interleaved  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT


def _model(nodes, inputs, output, consts):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(output[0], F, output[1])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def gemm(k, n, trans_b=1):
    w = RNG.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    model = _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=trans_b)], [("x", F, [1, k])],
                   ("y", [1, n]), {"w": w, "b": RNG.standard_normal(n).astype(np.float32)})
    return model, {"x": RNG.standard_normal((1, k)).astype(np.float32)}


def conv1x1(c, h, m, act=""):
    w = (RNG.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["t"], ["y"]))
    model = _model(nodes, [("x", F, [1, c, h, h])], ("y", [1, m, h, h]),
                   {"w": w, "b": RNG.standard_normal(m).astype(np.float32)})
    return model, {"x": RNG.standard_normal((1, c, h, h)).astype(np.float32)}


def conv(c, h, m, k=3, stride=1, group=1, act=""):
    """A k x k convolution (pads k // 2) of a c x h x h input, optionally grouped / strided, + act."""
    w = (RNG.standard_normal((m, c // group, k, k)) / np.sqrt(c // group * k * k)).astype(np.float32)
    o = (h + 2 * (k // 2) - k) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t" if act else "y"], group=group, kernel_shape=[k, k],
                              pads=[k // 2] * 4, strides=[stride, stride])]
    if act:
        nodes.append(helper.make_node(act, ["t"], ["y"]))
    model = _model(nodes, [("x", F, [1, c, h, h])], ("y", [1, m, o, o]),
                   {"w": w, "b": RNG.standard_normal(m).astype(np.float32)})
    return model, {"x": RNG.standard_normal((1, c, h, h)).astype(np.float32)}


def resize2x(c, h):
    """Nearest x2 upsampling of a c x h x h map (the detection head's FPN Resize), then a Relu: the
    Resize's output in the session's arena (``out=``) as inside the model, not a fresh graph output."""
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["t"], mode="nearest"), helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, [("x", F, [1, c, h, h])],
                   ("y", [1, c, 2 * h, 2 * h]), {"s": np.array([1, 1, 2, 2], np.float32)})
    return model, {"x": RNG.standard_normal((1, c, h, h)).astype(np.float32)}


def sigmoid(c, h):
    model = _model([helper.make_node("Sigmoid", ["x"], ["y"])], [("x", F, [1, c, h, h])], ("y", [1, c, h, h]), {})
    return model, {"x": (RNG.standard_normal((1, c, h, h)) * 4).astype(np.float32)}


def where(n):
    mask = np.tril(np.ones((n, n), bool))[None, None]
    model = _model([helper.make_node("Where", ["m", "x", "f"], ["y"])], [("x", F, [1, 12, n, n])],
                   ("y", [1, 12, n, n]), {"m": mask, "f": np.array(-3.4e38, np.float32)})
    return model, {"x": RNG.standard_normal((1, 12, n, n)).astype(np.float32)}


CASES = {
    "gemm 512x1000 (ResNet-18 head)": lambda: gemm(512, 1000),
    "gemm 1280x1000 (EfficientNet head)": lambda: gemm(1280, 1000),
    "gemm 784x1024 (MLP b1)": lambda: gemm(784, 1024, 0),
    "gemm 1024x10 (MLP b1 head)": lambda: gemm(1024, 10, 0),
    "conv 440->110@1 Relu (RegNetY SE)": lambda: conv1x1(440, 1, 110, "Relu"),
    "conv 110->440@1 Sigmoid (RegNetY SE)": lambda: conv1x1(110, 1, 440, "Sigmoid"),
    "conv 48->1152@1 (EfficientNet SE)": lambda: conv1x1(48, 1, 1152),
    "conv 1152->48@1 (EfficientNet SE)": lambda: conv1x1(1152, 1, 48),
    "conv 80->480@14": lambda: conv1x1(80, 14, 480),
    "conv 672->112@14": lambda: conv1x1(672, 14, 112),
    "conv 1152->320@7": lambda: conv1x1(1152, 7, 320),
    "conv 320->1280@7": lambda: conv1x1(320, 7, 1280),
    "conv g6 48@112 3x3/2 Relu (RegNetY stage 1)": lambda: conv(48, 112, 48, 3, 2, 6, "Relu"),
    "conv g6 48@56 3x3 Relu (RegNetY stage 1)": lambda: conv(48, 56, 48, 3, 1, 6, "Relu"),
    "conv g13 104@56 3x3/2 Relu (RegNetY stage 2)": lambda: conv(104, 56, 104, 3, 2, 13, "Relu"),
    "conv g13 104@28 3x3 Relu (RegNetY stage 2)": lambda: conv(104, 28, 104, 3, 1, 13, "Relu"),
    "conv g26 208@28 3x3/2 Relu (RegNetY stage 3)": lambda: conv(208, 28, 208, 3, 2, 26, "Relu"),
    "conv g26 208@14 3x3 Relu (RegNetY stage 3)": lambda: conv(208, 14, 208, 3, 1, 26, "Relu"),
    "conv g55 440@14 3x3/2 Relu (RegNetY stage 4)": lambda: conv(440, 14, 440, 3, 2, 55, "Relu"),
    "conv g55 440@7 3x3 Relu (RegNetY stage 4)": lambda: conv(440, 7, 440, 3, 1, 55, "Relu"),
    "conv 32->48@112 1x1/2 (RegNetY shortcut)": lambda: conv(32, 112, 48, 1, 2),
    "conv 48->104@56 1x1/2 (RegNetY shortcut)": lambda: conv(48, 56, 104, 1, 2),
    "conv 104->208@28 1x1/2 (RegNetY shortcut)": lambda: conv(104, 28, 208, 1, 2),
    "conv 208->440@14 1x1/2 (RegNetY shortcut)": lambda: conv(208, 14, 440, 1, 2),
    "conv 64->128@56 1x1/2 (ResNet-18 shortcut)": lambda: conv(64, 56, 128, 1, 2),
    "conv 128->256@28 1x1/2 (ResNet-18 shortcut)": lambda: conv(128, 28, 256, 1, 2),
    "conv 256->512@14 1x1/2 (ResNet-18 shortcut)": lambda: conv(256, 14, 512, 1, 2),
    "conv 512->1024@28 1x1/2 (ResNet-50 shortcut)": lambda: conv(512, 28, 1024, 1, 2),
    "resize x2 512@10 (detection head)": lambda: resize2x(512, 10),
    "resize x2 256@20 (detection head)": lambda: resize2x(256, 20),
    "sigmoid 32@112": lambda: sigmoid(32, 112),
    "sigmoid 144@56": lambda: sigmoid(144, 56),
    "sigmoid 672@14": lambda: sigmoid(672, 14),
    "where 1x12x64x64 (GPT-2 mask)": lambda: where(64),
    "where 1x12x128x128": lambda: where(128),
}


def main(argv: list[str]) -> int:
    reps = int(argv[0]) if argv else 200
    pick = argv[1] if len(argv) > 1 else ""
    print("| case | reference us | numba us | reference / numba |")
    print("|---|---:|---:|---:|")
    for name, make in CASES.items():
        if pick not in name:
            continue
        model, feed = make()
        sessions = [kernelkit.Session(model, vendors=[v, "reference"], threads=1, profile=True)
                    for v in ("reference", "numba")]
        ref, nb = best_node_ms_interleaved(sessions, feed, reps)
        r, n = sum(ref.values()) * 1e3, sum(nb.values()) * 1e3
        print(f"| {name} | {r:.1f} | {n:.1f} | {r / n:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

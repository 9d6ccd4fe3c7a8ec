"""Real architectures as ONNX graphs, built with onnx.helper (no torch), random weights.

The graphs follow what ``torch.onnx.export(..., dynamo=False)`` writes for the same modules:
Conv + BatchNormalization, Shape->Gather->Unsqueeze->Concat->Reshape for ``x.view(x.size(0), -1)``,
MatMul + Add for Linear, LayerNormalization, erf-based GELU, and attention as MatMul/Reshape/
Transpose/Softmax. Small versions (narrow, small images) are what the tests use; the defaults are
the published sizes used by the benchmarks.

    from zoo import MODELS
    proto = MODELS["resnet18"]()            # onnx.ModelProto, input "x" of shape ("N", 3, 224, 224)
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Writer:
    """Appends nodes and initializers with fresh names; weights come from one seeded generator."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, array, base: str = "c") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op: str, *inputs: str, outputs: int = 1, **attrs):
        outs = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.name(op), **attrs))
        return outs[0] if outputs == 1 else outs

    # -- layers ---------------------------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bias: bool = False) -> str:
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * math.sqrt(2.0 / fan_in)
        inputs = [x, self.const(w, "conv_w")]
        if bias:
            inputs.append(self.const(self.rng.uniform(-0.1, 0.1, cout).astype(np.float32), "conv_b"))
        return self.op("Conv", *inputs, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4,
                       group=group, dilations=[1, 1])

    def bn(self, x: str, c: int, gamma: float = 1.0) -> str:
        rng = self.rng
        params = [rng.uniform(0.8, 1.2, c) * gamma, rng.uniform(-0.1, 0.1, c), rng.uniform(-0.1, 0.1, c),
                  rng.uniform(0.8, 1.2, c)]
        names = [self.const(p.astype(np.float32), n) for p, n in zip(params, ("bn_s", "bn_b", "bn_m", "bn_v"))]
        return self.op("BatchNormalization", x, *names, epsilon=1e-5, momentum=0.9)

    def linear(self, x: str, fin: int, fout: int) -> str:
        w = self.rng.standard_normal((fin, fout)).astype(np.float32) / math.sqrt(fin)
        b = self.rng.uniform(-0.1, 0.1, fout).astype(np.float32)
        return self.op("Add", self.op("MatMul", x, self.const(w, "fc_w")), self.const(b, "fc_b"))

    def flatten_batch(self, x: str) -> str:
        """x.view(x.size(0), -1) as the TorchScript exporter writes it."""
        n = self.op("Gather", self.op("Shape", x), self.const(np.array(0, np.int64), "idx"), axis=0)
        shape = self.op("Concat", self.op("Unsqueeze", n, self.const(np.array([0], np.int64), "axes")),
                        self.const(np.array([-1], np.int64), "minus1"), axis=0)
        return self.op("Reshape", x, shape)

    def gelu(self, x: str) -> str:
        """0.5 * x * (1 + erf(x / sqrt(2))), as exported at opset 17."""
        erf = self.op("Erf", self.op("Div", x, self.const(np.array(math.sqrt(2), np.float32), "sqrt2")))
        half = self.op("Mul", x, self.const(np.array(0.5, np.float32), "half"))
        return self.op("Mul", half, self.op("Add", erf, self.const(np.array(1.0, np.float32), "one")))

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="kernelkit-zoo")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def _image_io(image: int, classes: int, batch):
    return ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, image, image])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])])


# -- ResNet ---------------------------------------------------------------------------------------
def resnet(depth: int = 18, width: int = 64, image: int = 224, classes: int = 1000, batch="N",
           seed: int = 0) -> onnx.ModelProto:
    """ResNet-18/34 (basic blocks) or -50/101 (bottlenecks), He et al. 2015."""
    blocks = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}[depth]
    bottleneck = depth >= 50
    expansion = 4 if bottleneck else 1
    w = _Writer(seed)
    x = w.op("Relu", w.bn(w.conv("x", 3, width, 7, stride=2), width))
    x = w.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, count in enumerate(blocks):
        planes = width * 2**stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            cout = planes * expansion
            if bottleneck:
                y = w.op("Relu", w.bn(w.conv(x, cin, planes, 1), planes))
                y = w.op("Relu", w.bn(w.conv(y, planes, planes, 3, stride), planes))
                y = w.bn(w.conv(y, planes, cout, 1), cout, gamma=0.5)
            else:
                y = w.op("Relu", w.bn(w.conv(x, cin, planes, 3, stride), planes))
                y = w.bn(w.conv(y, planes, cout, 3), cout, gamma=0.5)
            shortcut = x if stride == 1 and cin == cout else w.bn(w.conv(x, cin, cout, 1, stride), cout)
            x = w.op("Relu", w.op("Add", y, shortcut))
            cin = cout
    x = w.flatten_batch(w.op("GlobalAveragePool", x))
    y = w.linear(x, cin, classes)
    w.nodes[-1].output[0] = "y"
    return w.model(f"resnet{depth}", *_image_io(image, classes, batch))


# -- MobileNetV2 ----------------------------------------------------------------------------------
def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenet_v2(width_mult: float = 1.0, image: int = 224, classes: int = 1000, batch="N",
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (Sandler et al. 2018): inverted residuals, depthwise convs, ReLU6 as Clip."""
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    w = _Writer(seed)
    lo, hi = w.const(np.array(0, np.float32), "relu6_lo"), w.const(np.array(6, np.float32), "relu6_hi")

    def relu6(t):
        return w.op("Clip", t, lo, hi)

    cin = _divisible(32 * width_mult)
    x = relu6(w.bn(w.conv("x", 3, cin, 3, stride=2), cin))
    for t, c, n, s in settings:
        cout = _divisible(c * width_mult)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = relu6(w.bn(w.conv(y, cin, hidden, 1), hidden))
            y = relu6(w.bn(w.conv(y, hidden, hidden, 3, stride, group=hidden), hidden))
            y = w.bn(w.conv(y, hidden, cout, 1), cout, gamma=0.5)
            x = w.op("Add", x, y) if stride == 1 and cin == cout else y
            cin = cout
    last = _divisible(1280 * max(1.0, width_mult))
    x = relu6(w.bn(w.conv(x, cin, last, 1), last))
    x = w.flatten_batch(w.op("GlobalAveragePool", x))
    w.linear(x, last, classes)
    w.nodes[-1].output[0] = "y"
    return w.model("mobilenet_v2", *_image_io(image, classes, batch))


# -- transformer encoder --------------------------------------------------------------------------
def transformer_encoder(layers: int = 4, d_model: int = 256, heads: int = 4, ff: int = 1024, seq: int = 128,
                        batch="N", seed: int = 0) -> onnx.ModelProto:
    """Post-norm encoder layers (nn.TransformerEncoderLayer, batch_first, activation="gelu")."""
    w = _Writer(seed)
    head_dim = d_model // heads
    scale = w.const(np.array(1 / math.sqrt(head_dim), np.float32), "scale")

    def layer_norm(t):
        g = w.const(w.rng.uniform(0.8, 1.2, d_model).astype(np.float32), "ln_g")
        b = w.const(w.rng.uniform(-0.1, 0.1, d_model).astype(np.float32), "ln_b")
        return w.op("LayerNormalization", t, g, b, axis=-1, epsilon=1e-5)

    def split_heads(t):
        shape = w.op("Concat", *[w.op("Unsqueeze", w.op("Gather", w.op("Shape", t), w.const(np.array(i, np.int64),
                                                                                           "idx"), axis=0),
                                      w.const(np.array([0], np.int64), "axes")) for i in (0, 1)],
                     w.const(np.array([heads, head_dim], np.int64), "heads"), axis=0)
        return w.op("Transpose", w.op("Reshape", t, shape), perm=[0, 2, 1, 3])

    x = "x"
    for _ in range(layers):
        q, k, v = (split_heads(w.linear(x, d_model, d_model)) for _ in range(3))
        scores = w.op("Mul", w.op("MatMul", q, w.op("Transpose", k, perm=[0, 1, 3, 2])), scale)
        ctx = w.op("Transpose", w.op("MatMul", w.op("Softmax", scores, axis=-1), v), perm=[0, 2, 1, 3])
        merged_shape = w.op("Concat", *[w.op("Unsqueeze", w.op("Gather", w.op("Shape", x), w.const(
            np.array(i, np.int64), "idx"), axis=0), w.const(np.array([0], np.int64), "axes")) for i in (0, 1)],
            w.const(np.array([d_model], np.int64), "dmodel"), axis=0)
        attn = w.linear(w.op("Reshape", ctx, merged_shape), d_model, d_model)
        x = layer_norm(w.op("Add", x, attn))
        hidden = w.linear(w.gelu(w.linear(x, d_model, ff)), ff, d_model)
        x = layer_norm(w.op("Add", x, hidden))
    w.nodes[-1].output[0] = "y"
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d_model])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d_model])])
    return w.model("transformer_encoder", *io)


# -- MLP ------------------------------------------------------------------------------------------
def mlp(sizes=(784, 1024, 1024, 10), batch="N", seed: int = 0) -> onnx.ModelProto:
    """Linear -> ReLU stack with a Softmax head."""
    w = _Writer(seed)
    x = "x"
    for i, (fin, fout) in enumerate(zip(sizes[:-1], sizes[1:])):
        x = w.linear(x, fin, fout)
        if i < len(sizes) - 2:
            x = w.op("Relu", x)
    w.op("Softmax", x, axis=-1)
    w.nodes[-1].output[0] = "y"
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])])
    return w.model("mlp", *io)


# name -> (full-size builder, small builder for tests, input shape for a batch of n)
MODELS = {
    "resnet18": lambda: resnet(18),
    "resnet50": lambda: resnet(50),
    "mobilenet_v2": lambda: mobilenet_v2(),
    "transformer": lambda: transformer_encoder(),
    "mlp": lambda: mlp(),
}
SMALL = {
    "resnet18": lambda: resnet(18, width=8, image=32, classes=10),
    "resnet50": lambda: resnet(50, width=8, image=32, classes=10),
    "mobilenet_v2": lambda: mobilenet_v2(width_mult=0.25, image=32, classes=10),
    "transformer": lambda: transformer_encoder(layers=2, d_model=32, heads=4, ff=64, seq=16),
    "mlp": lambda: mlp((64, 128, 128, 10)),
}


def input_shape(model: onnx.ModelProto, batch: int) -> tuple[int, ...]:
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return tuple(batch if d.dim_param else d.dim_value for d in dims)

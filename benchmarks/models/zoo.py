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


# -- the extra architectures of issue 11 (real exports numba once ran slower than the reference) ----
def _silu(w: _Writer, t: str) -> str:
    """x * sigmoid(x), as torch.onnx writes nn.SiLU at opset 17."""
    return w.op("Mul", t, w.op("Sigmoid", t))


def _squeeze_excite(w: _Writer, x: str, c: int, squeezed: int, act) -> str:
    """GlobalAveragePool -> 1x1 conv -> act -> 1x1 conv -> Sigmoid -> scale the channels."""
    s = act(w.conv(w.op("GlobalAveragePool", x), c, squeezed, 1, bias=True))
    return w.op("Mul", x, w.op("Sigmoid", w.conv(s, squeezed, c, 1, bias=True)))


def efficientnet_b0(width_mult: float = 1.0, image: int = 224, classes: int = 1000, batch="N",
                    seed: int = 0) -> onnx.ModelProto:
    """EfficientNet-B0 (Tan & Le 2019): MBConv blocks with SiLU, squeeze-and-excitation, 5x5 depthwise."""
    settings = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    w = _Writer(seed)
    act = lambda t: _silu(w, t)  # noqa: E731
    cin = _divisible(32 * width_mult)
    x = act(w.bn(w.conv("x", 3, cin, 3, stride=2), cin))
    for t, k, s, c, n in settings:
        cout = _divisible(c * width_mult)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = act(w.bn(w.conv(x, cin, hidden, 1), hidden)) if t != 1 else x
            y = act(w.bn(w.conv(y, hidden, hidden, k, stride, group=hidden), hidden))
            y = _squeeze_excite(w, y, hidden, max(1, cin // 4), act)
            y = w.bn(w.conv(y, hidden, cout, 1), cout, gamma=0.5)
            x = w.op("Add", x, y) if stride == 1 and cin == cout else y
            cin = cout
    last = _divisible(1280 * max(1.0, width_mult))
    x = act(w.bn(w.conv(x, cin, last, 1), last))
    x = w.flatten_batch(w.op("GlobalAveragePool", x))
    w.linear(x, last, classes)
    w.nodes[-1].output[0] = "y"
    return w.model("efficientnet_b0", *_image_io(image, classes, batch))


def regnet_y(widths=(48, 104, 208, 440), depths=(1, 3, 6, 6), group_width: int = 8, image: int = 224,
             classes: int = 1000, batch="N", seed: int = 0) -> onnx.ModelProto:
    """RegNetY-400MF (Radosavovic et al. 2020): grouped 3x3 bottlenecks with squeeze-and-excitation."""
    w = _Writer(seed)
    relu = lambda t: w.op("Relu", t)  # noqa: E731
    cin = 32
    x = relu(w.bn(w.conv("x", 3, cin, 3, stride=2), cin))
    for width, depth in zip(widths, depths):
        for i in range(depth):
            stride = 2 if i == 0 else 1
            y = relu(w.bn(w.conv(x, cin, width, 1), width))
            y = relu(w.bn(w.conv(y, width, width, 3, stride, group=width // group_width), width))
            y = _squeeze_excite(w, y, width, max(1, cin // 4), relu)
            y = w.bn(w.conv(y, width, width, 1), width, gamma=0.5)
            shortcut = x if stride == 1 and cin == width else w.bn(w.conv(x, cin, width, 1, stride), width)
            x = relu(w.op("Add", y, shortcut))
            cin = width
    x = w.flatten_batch(w.op("GlobalAveragePool", x))
    w.linear(x, cin, classes)
    w.nodes[-1].output[0] = "y"
    return w.model("regnet_y", *_image_io(image, classes, batch))


def _token_io(seq, batch):
    return [helper.make_tensor_value_info("x", TensorProto.INT64, [batch, seq])]


def _dynamic_dim(w: _Writer, t: str, axis: int) -> str:
    """Shape(t)[axis] as a 1-element int64 tensor (the exporter's size() chain)."""
    dim = w.op("Gather", w.op("Shape", t), w.const(np.array(axis, np.int64), "idx"), axis=0)
    return w.op("Unsqueeze", dim, w.const(np.array([0], np.int64), "axes"))


def _attention(w: _Writer, x: str, d_model: int, heads: int, fused_qkv: bool, mask=None, bias=None) -> str:
    """Multi-head self-attention as the transformers exporters write it: projections, view +
    transpose into heads, scores / sqrt(d), a mask (boolean Where or additive), softmax, merge."""
    head_dim = d_model // heads
    batch_dim, seq_dim = _dynamic_dim(w, x, 0), _dynamic_dim(w, x, 1)
    split_shape = w.op("Concat", batch_dim, seq_dim, w.const(np.array([heads, head_dim], np.int64), "heads"), axis=0)
    if fused_qkv:  # GPT-2's Conv1D c_attn, split in three
        qkv = w.linear(x, d_model, 3 * d_model)
        q, k, v = w.op("Split", qkv, w.const(np.array([d_model] * 3, np.int64), "split"), axis=2, outputs=3)
    else:
        q, k, v = (w.linear(x, d_model, d_model) for _ in range(3))
    q, k, v = (w.op("Transpose", w.op("Reshape", t, split_shape), perm=[0, 2, 1, 3]) for t in (q, k, v))
    scores = w.op("MatMul", q, w.op("Transpose", k, perm=[0, 1, 3, 2]))
    scores = w.op("Div", scores, w.const(np.array(math.sqrt(head_dim), np.float32), "sqrt_d"))
    if mask is not None:
        scores = w.op("Where", mask, scores, w.const(np.array(np.finfo(np.float32).min, np.float32), "min"))
    if bias is not None:
        scores = w.op("Add", scores, bias)
    ctx = w.op("Transpose", w.op("MatMul", w.op("Softmax", scores, axis=-1), v), perm=[0, 2, 1, 3])
    merged = w.op("Concat", batch_dim, seq_dim, w.const(np.array([d_model], np.int64), "dmodel"), axis=0)
    return w.linear(w.op("Reshape", ctx, merged), d_model, d_model)


def _layer_norm(w: _Writer, t: str, d: int) -> str:
    g = w.const(w.rng.uniform(0.8, 1.2, d).astype(np.float32), "ln_g")
    b = w.const(w.rng.uniform(-0.1, 0.1, d).astype(np.float32), "ln_b")
    return w.op("LayerNormalization", t, g, b, axis=-1, epsilon=1e-5)


def _embedding(w: _Writer, ids: str, rows: int, d: int) -> str:
    return w.op("Gather", w.const((w.rng.standard_normal((rows, d)) * 0.1).astype(np.float32), "emb"), ids, axis=0)


def gpt2(layers: int = 12, d_model: int = 768, heads: int = 12, vocab: int = 50257, context: int = 1024,
         seq: int = 64, batch="N", seed: int = 0) -> onnx.ModelProto:
    """GPT-2 (Radford et al. 2019), pre-norm decoder: token ids in, logits out. Position ids from
    Range over the sequence length, the causal mask sliced from a boolean buffer and applied with
    Where, the tanh GELU with Pow, the output projection tied to the token embedding (written
    transposed, as the exporter's constant folding writes it)."""
    w = _Writer(seed)
    wte_data = (w.rng.standard_normal((vocab, d_model), np.float32) * 0.1).astype(np.float32)
    seq_len = _dynamic_dim(w, "x", 1)
    positions = w.op("Range", w.const(np.array(0, np.int64), "zero"),
                     w.op("Squeeze", seq_len, w.const(np.array([0], np.int64), "axes")),
                     w.const(np.array(1, np.int64), "one"))
    wte = w.const(wte_data, "wte")
    x = w.op("Add", w.op("Gather", wte, "x", axis=0),
             _embedding(w, w.op("Unsqueeze", positions, w.const(np.array([0], np.int64), "axes")), context, d_model))
    causal = np.tril(np.ones((context, context), bool))[None, None]
    zeros2 = w.const(np.array([0, 0], np.int64), "starts")
    mask = w.op("Slice", w.const(causal, "causal"), zeros2, w.op("Concat", seq_len, seq_len, axis=0),
                w.const(np.array([2, 3], np.int64), "mask_axes"))
    c = w.const(np.array(math.sqrt(2 / math.pi), np.float32), "gelu_c")

    def gelu_tanh(t):
        cube = w.op("Mul", w.op("Pow", t, w.const(np.array(3.0, np.float32), "three")),
                    w.const(np.array(0.044715, np.float32), "gelu_a"))
        inner = w.op("Tanh", w.op("Mul", w.op("Add", t, cube), c))
        half = w.op("Mul", t, w.const(np.array(0.5, np.float32), "half"))
        return w.op("Mul", half, w.op("Add", inner, w.const(np.array(1.0, np.float32), "one_f")))

    for _ in range(layers):
        x = w.op("Add", x, _attention(w, _layer_norm(w, x, d_model), d_model, heads, True, mask=mask))
        h = w.linear(gelu_tanh(w.linear(_layer_norm(w, x, d_model), d_model, 4 * d_model)), 4 * d_model, d_model)
        x = w.op("Add", x, h)
    # the tied output projection: the exporter's constant folding writes wte^T as its own initializer
    w.op("MatMul", _layer_norm(w, x, d_model), w.const(np.ascontiguousarray(wte_data.T), "lm_head"))
    w.nodes[-1].output[0] = "y"
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, vocab])]
    return w.model("gpt2", _token_io(seq, batch), out)


def bert(layers: int = 12, d_model: int = 768, heads: int = 12, ff: int = 3072, vocab: int = 30522,
         seq: int = 128, batch="N", seed: int = 0) -> onnx.ModelProto:
    """BERT-base (Devlin et al. 2019), post-norm encoder: token ids in (0 = padding), the additive
    attention mask built from them (Equal, Not, Cast, Sub, Mul), token-type embeddings from a
    ConstantOfShape, erf GELU, the pooler (first token, dense, Tanh) out."""
    w = _Writer(seed)
    seq_len = _dynamic_dim(w, "x", 1)
    positions = w.op("Slice", w.const(np.arange(512, dtype=np.int64)[None], "position_ids"),
                     w.const(np.array([0], np.int64), "start"), seq_len, w.const(np.array([1], np.int64), "axis1"))
    types = w.op("ConstantOfShape", w.op("Shape", "x"), value=helper.make_tensor("v", TensorProto.INT64, [1], [0]))
    x = w.op("Add", w.op("Add", _embedding(w, "x", vocab, d_model), _embedding(w, positions, 512, d_model)),
             _embedding(w, types, 2, d_model))
    x = _layer_norm(w, x, d_model)
    keep = w.op("Cast", w.op("Not", w.op("Equal", "x", w.const(np.array(0, np.int64), "pad"))), to=TensorProto.FLOAT)
    keep = w.op("Unsqueeze", keep, w.const(np.array([1, 2], np.int64), "axes12"))
    bias = w.op("Mul", w.op("Sub", w.const(np.array(1.0, np.float32), "one_f"), keep),
                w.const(np.array(-10000.0, np.float32), "neg"))
    for _ in range(layers):
        x = _layer_norm(w, w.op("Add", x, _attention(w, x, d_model, heads, False, bias=bias)), d_model)
        x = _layer_norm(w, w.op("Add", x, w.linear(w.gelu(w.linear(x, d_model, ff)), ff, d_model)), d_model)
    first = w.op("Gather", x, w.const(np.array(0, np.int64), "idx"), axis=1)
    w.op("Tanh", w.linear(first, d_model, d_model))
    w.nodes[-1].output[0] = "y"
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_model])]
    return w.model("bert", _token_io(seq, batch), out)


def detection_head(width: int = 32, classes: int = 80, anchors: int = 3, image: int = 320, batch="N",
                   seed: int = 0) -> onnx.ModelProto:
    """A YOLOv5-style detector, small backbone: Conv-BN-SiLU downsampling to strides 8/16/32, a
    top-down path (Resize nearest x2 + Concat), and per scale the decode an export writes:
    Reshape + Transpose to (N, A, H, W, 5 + C), Sigmoid, xy = (2s - 0.5 + grid) * stride,
    wh = (2s)^2 * anchor, Concat, all boxes out as (N, boxes, 5 + C)."""
    w = _Writer(seed)
    act = lambda t: _silu(w, t)  # noqa: E731

    def cbs(t, cin, cout, k=3, stride=1):
        return act(w.bn(w.conv(t, cin, cout, k, stride), cout))

    x, c, feats = "x", 3, []
    for i, cout in enumerate((width, width * 2, width * 4, width * 8, width * 16)):
        x = cbs(cbs(x, c, cout, 3, 2), cout, cout)
        c = cout
        if i >= 2:
            feats.append((x, c))
    top, ctop = feats[-1]
    for f, cf in reversed(feats[:-1]):
        up = w.op("Resize", top, "", w.const(np.array([1, 1, 2, 2], np.float32), "scales"), mode="nearest")
        top = cbs(w.op("Concat", up, f, axis=1), ctop + cf, cf, 1)
        feats[feats.index((f, cf))] = (top, cf)
        ctop = cf
    outs, no = [], 5 + classes
    anchor_sets = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]
    for level, (f, cf) in enumerate(feats):
        stride, size = 2 ** (level + 3), image // 2 ** (level + 3)
        p = w.conv(f, cf, anchors * no, 1, bias=True)
        p = w.op("Transpose", w.op("Reshape", p, w.const(np.array([-1, anchors, no, size, size], np.int64), "shape")),
                 perm=[0, 1, 3, 4, 2])
        s = w.op("Sigmoid", p)
        xy, wh, rest = w.op("Split", s, w.const(np.array([2, 2, no - 4], np.int64), "split"), axis=4, outputs=3)
        gy, gx = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
        grid = (np.stack([gx, gy], -1)[None, None] - 0.5).astype(np.float32)
        xy = w.op("Mul", w.op("Add", w.op("Mul", xy, w.const(np.array(2.0, np.float32), "two")),
                              w.const(grid, "grid")), w.const(np.array(float(stride), np.float32), "stride"))
        anchor = np.array(anchor_sets[level], np.float32).reshape(1, anchors, 1, 1, 2)
        wh = w.op("Mul", w.op("Pow", w.op("Mul", wh, w.const(np.array(2.0, np.float32), "two")),
                              w.const(np.array(2.0, np.float32), "sq")), w.const(anchor, "anchor"))
        box = w.op("Concat", xy, wh, rest, axis=4)
        outs.append(w.op("Reshape", box, w.const(np.array([-1, anchors * size * size, no], np.int64), "shape")))
    w.op("Concat", *outs, axis=1)
    w.nodes[-1].output[0] = "y"
    boxes = sum(anchors * (image // 2 ** (level + 3)) ** 2 for level in range(3))
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, image, image])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, boxes, no])])
    return w.model("detection_head", *io)


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


# The five architectures of issue 11's "untested set of real exports" (EfficientNet-B0, RegNet, GPT-2,
# BERT, a detection head): published sizes, and small versions for the tests.
EXTRA = {
    "efficientnet_b0": lambda: efficientnet_b0(),
    "regnet_y_400mf": lambda: regnet_y(),
    "gpt2": lambda: gpt2(),
    "bert": lambda: bert(),
    "detection_head": lambda: detection_head(),
}
EXTRA_SMALL = {
    "efficientnet_b0": lambda: efficientnet_b0(width_mult=0.25, image=32, classes=10),
    "regnet_y_400mf": lambda: regnet_y(widths=(8, 16, 24, 32), depths=(1, 2, 2, 1), image=32, classes=10),
    "gpt2": lambda: gpt2(layers=2, d_model=32, heads=4, vocab=101, context=32, seq=12),
    "bert": lambda: bert(layers=2, d_model=32, heads=4, ff=64, vocab=101, seq=12),
    "detection_head": lambda: detection_head(width=4, classes=3, image=64),
}


def feed(model: onnx.ModelProto, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A random input for any zoo model: images from a normal distribution, token ids uniform over
    the vocabulary (the embedding's rows) with the last positions of every other row padding (0)."""
    rng = np.random.default_rng(seed)
    tensor = model.graph.input[0]
    shape = input_shape(model, batch)
    if tensor.type.tensor_type.elem_type != TensorProto.INT64:
        return {tensor.name: rng.standard_normal(shape).astype(np.float32)}
    vocab = next(i.dims[0] for i in model.graph.initializer if i.name.startswith(("wte", "emb")))
    ids = rng.integers(1, vocab, shape, dtype=np.int64)
    ids[1::2, -max(1, shape[1] // 4):] = 0
    return {tensor.name: ids}

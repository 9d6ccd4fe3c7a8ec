"""ResNet-18/50 and MobileNetV2 as kernelkit graphs (GraphBuilder), BatchNorm already folded into
the convolutions (bias + fused activation), with seeded random weights. Used by run_gpu.py (GPU
machine) and benchmarks/test_bench_opencl.py (PoCL), so both measure the same graphs."""
from __future__ import annotations

import numpy as np
from kernelkit import GraphBuilder


class _Net:
    def __init__(self, name: str, batch: int, res: int, seed: int = 0):
        self.g = GraphBuilder(name)
        self.rng = np.random.default_rng(seed)
        self.x = self.g.input("x", (batch, 3, res, res), "float32")

    def conv(self, x, cin, cout, k, stride=1, group=1, act="Relu", gain=1.0):
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * gain * np.sqrt(2.0 / fan_in)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.01).astype(np.float32)
        params = [0.0, 6.0] if act == "Clip" else []
        return self.g.op("Conv", x, w, b, strides=[stride, stride], pads=[k // 2] * 4, group=group,
                         activation=act, activation_params=params)

    def head(self, x, cin, classes=1000):
        y = self.g.op("Flatten", self.g.op("GlobalAveragePool", x), axis=1)
        w = (self.rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)).astype(np.float32)
        b = np.zeros(classes, np.float32)
        self.g.output(self.g.op("Gemm", y, w, b, transB=1))
        return self.g.build()


def resnet(depth: int, batch: int = 1, res: int = 224):
    """ResNet-18 (basic blocks) or ResNet-50 (bottlenecks)."""
    n = _Net(f"resnet{depth}", batch, res)
    g = n.g
    x = n.conv(n.x, 3, 64, 7, stride=2)
    x = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    blocks = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
    bottleneck = depth >= 50
    cin = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        cout = width * 4 if bottleneck else width
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            if bottleneck:
                y = n.conv(x, cin, width, 1)
                y = n.conv(y, width, width, 3, stride)
                y = n.conv(y, width, cout, 1, act="", gain=0.3)
            else:
                y = n.conv(x, cin, width, 3, stride)
                y = n.conv(y, width, cout, 3, act="", gain=0.3)
            short = n.conv(x, cin, cout, 1, stride, act="") if (stride != 1 or cin != cout) else x
            x = g.op("Relu", g.op("Add", y, short))
            cin = cout
    return n.head(x, cin)


def mobilenet_v2(batch: int = 1, res: int = 224):
    n = _Net("mobilenetv2", batch, res)
    g = n.g
    x = n.conv(n.x, 3, 32, 3, stride=2, act="Clip")
    cin = 32
    for t, c, reps, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                          (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(reps):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = n.conv(x, cin, hidden, 1, act="Clip") if t != 1 else x
            y = n.conv(y, hidden, hidden, 3, stride, group=hidden, act="Clip")
            y = n.conv(y, hidden, c, 1, act="", gain=0.5)
            x = g.op("Add", x, y) if stride == 1 and cin == c else y
            cin = c
    x = n.conv(x, cin, 1280, 1, act="Clip")
    return n.head(x, 1280)


def transformer(batch: int = 1, res: int = 0, layers: int = 4, seq: int = 128, d: int = 256, heads: int = 4,
                ffn: int = 1024):
    """The numba benchmark's post-norm encoder (nn.TransformerEncoderLayer with GELU: multi-head
    attention as MatMul -> Mul(scale) -> Softmax -> MatMul, LayerNormalization), batch ``batch``;
    input ``x`` (batch, seq, d). ``res`` is ignored (the CNN builders' signature)."""
    g = GraphBuilder("transformer")
    rng = np.random.default_rng(0)
    x = g.input("x", (batch, seq, d), "float32")
    dh = d // heads
    split = np.array([batch, seq, heads, dh], np.int64)
    merge = np.array([batch, seq, d], np.int64)
    scale = np.float32(1 / np.sqrt(dh))

    def linear(t, cin, cout):
        w = (rng.standard_normal((cin, cout)) * np.sqrt(1.0 / cin)).astype(np.float32)
        return g.op("Add", g.op("MatMul", t, w), (rng.standard_normal(cout) * 0.01).astype(np.float32))

    def heads_of(t, perm):
        return g.op("Transpose", g.op("Reshape", t, split), perm=perm)

    def norm(t):
        return g.op("LayerNormalization", t, np.ones(d, np.float32), np.zeros(d, np.float32), axis=-1, epsilon=1e-5)

    for _ in range(layers):
        q = heads_of(linear(x, d, d), [0, 2, 1, 3])
        k = heads_of(linear(x, d, d), [0, 2, 3, 1])
        v = heads_of(linear(x, d, d), [0, 2, 1, 3])
        att = g.op("Softmax", g.op("Mul", g.op("MatMul", q, k), scale), axis=-1)
        ctx = g.op("Reshape", g.op("Transpose", g.op("MatMul", att, v), perm=[0, 2, 1, 3]), merge)
        x = norm(g.op("Add", x, linear(ctx, d, d)))
        x = norm(g.op("Add", x, linear(g.op("Gelu", linear(x, d, ffn)), ffn, d)))
    g.output(x)
    return g.build()


MODELS = {
    "resnet18": lambda batch, res=224: resnet(18, batch, res),
    "resnet50": lambda batch, res=224: resnet(50, batch, res),
    "mobilenetv2": lambda batch, res=224: mobilenet_v2(batch, res),
    "transformer": transformer,
}


def torch_runner(model, device="cuda"):
    """A callable running ``model``'s graph with torch eager ops (the baseline on the GPU machine):
    the same folded graph kernelkit runs, op by op, as torch would run it."""
    import torch
    import torch.nn.functional as F

    graph = model.graph
    consts = {k: torch.from_numpy(np.array(v)).to(device) for k, v in graph.constants.items()}
    host = {k: np.array(v) for k, v in graph.constants.items()}

    def act(y, node):
        a, p = node.attrs.get("activation", ""), list(node.attrs.get("activation_params", ()))
        if a == "Relu":
            return F.relu(y)
        if a == "Clip":
            return torch.clamp(y, p[0], p[1])
        assert not a, a
        return y

    def run(x):
        env = dict(consts)
        env[graph.inputs[0]] = x
        for node in graph.nodes:
            ins = [env[i] if i else None for i in node.inputs]
            at = node.attrs
            if node.op == "Conv":
                s, p = at.get("strides", [1, 1]), at.get("pads", [0, 0, 0, 0])
                y = act(F.conv2d(ins[0], ins[1], ins[2], stride=tuple(s), padding=(p[0], p[1]),
                                 groups=at.get("group", 1)), node)
            elif node.op == "MaxPool":
                y = F.max_pool2d(ins[0], at["kernel_shape"], at["strides"], at["pads"][0])
            elif node.op == "Add":
                y = ins[0] + ins[1]
            elif node.op == "Relu":
                y = F.relu(ins[0])
            elif node.op == "GlobalAveragePool":
                y = F.adaptive_avg_pool2d(ins[0], 1)
            elif node.op == "Flatten":
                y = torch.flatten(ins[0], 1)
            elif node.op == "Gemm":
                y = F.linear(ins[0], ins[1], ins[2])
            elif node.op == "MatMul":
                y = act(torch.matmul(ins[0], ins[1]), node)
            elif node.op == "Mul":
                y = ins[0] * ins[1]
            elif node.op == "Reshape":
                y = ins[0].reshape(tuple(int(v) for v in host[node.inputs[1]]))
            elif node.op == "Transpose":
                y = ins[0].permute(*at["perm"])
            elif node.op == "Softmax":
                y = torch.softmax(ins[0], dim=at.get("axis", -1))
            elif node.op == "LayerNormalization":
                y = F.layer_norm(ins[0], ins[0].shape[-1:], ins[1], ins[2], at.get("epsilon", 1e-5))
            elif node.op == "Gelu":
                y = F.gelu(ins[0])
            else:
                raise NotImplementedError(node.op)
            env[node.outputs[0]] = y
        return env[graph.outputs[0]]

    return run

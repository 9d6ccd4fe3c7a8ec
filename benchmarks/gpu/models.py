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


MODELS = {
    "resnet18": lambda batch, res=224: resnet(18, batch, res),
    "resnet50": lambda batch, res=224: resnet(50, batch, res),
    "mobilenetv2": lambda batch, res=224: mobilenet_v2(batch, res),
}


def torch_runner(model, device="cuda"):
    """A callable running ``model``'s graph with torch eager ops (the baseline on the GPU machine):
    the same folded graph kernelkit runs, op by op, as torch would run it."""
    import torch
    import torch.nn.functional as F

    graph = model.graph
    consts = {k: torch.from_numpy(np.array(v)).to(device) for k, v in graph.constants.items()}

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
            else:
                raise NotImplementedError(node.op)
            env[node.outputs[0]] = y
        return env[graph.outputs[0]]

    return run

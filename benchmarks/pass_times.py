"""How long each graph pass takes on a model, and a digest of the graph the passes leave: a session's
passes in its first round, one after the other, each timed on its own copy of the graph it meets
(``REPEATS`` copies, median and best), then the whole pipeline to its fixed point as a session runs it.

    python benchmarks/pass_times.py MODEL[,MODEL...] [REPEATS=7] [--passes fuse_gelu,fuse_silu,...]

MODEL: a name of benchmarks/models/zoo.py (``resnet18``, ``bert``, ``gpt2``, ``efficientnet_b0``, ...),
``bert_l4`` / ``gpt2_l4`` (four layers, a vocabulary of 2048, as turns.py builds them), ``q:NAME`` /
``qs:NAME`` (NAME as benchmarks/quantized.py quantizes it, published or small size), or a synthetic chain of
N blocks: ``gelu:N`` (GELU written out, the erf form and GPT-2's tanh form in turn), ``silu:N``
(x * Sigmoid(x)), ``qdq:N`` (DequantizeLinear -> MatMul -> QuantizeLinear groups, each tensor its own scale).

Prints a row per model and pass (nodes it met, rewrites, median and best ms), then per model a line with the
digest of the first round's graph and of the pipeline's (every node's op, name, inputs, outputs and
attributes in order): two trees that give the same digests fused the same graphs (issue 11, session 15:
the passes' node-list places). Timings are for A/Bs in one machine's processes, alternated (pass times are
a few ms; the host's noise is of that order).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chain(kind: str, n: int):
    """N blocks of ``kind`` one after another on a (4, 16) float32 tensor (QDQ: int8)."""
    from kernelkit import GraphBuilder

    g = GraphBuilder(f"{kind}{n}")
    f32 = lambda v: g.constant(np.array(v, np.float32))  # noqa: E731
    if kind == "qdq":  # each tensor its own scale and zero point, as onnxruntime's quantizer writes them
        rng = np.random.default_rng(0)
        t = g.input("x", (4, 16), dtype="int8")
        scale, zero = f32(0.05), g.constant(np.array(0, np.int8))
        for _ in range(n):
            w = g.constant(rng.integers(-100, 100, (16, 16)).astype(np.int8))
            w_f = g.op("DequantizeLinear", w, f32(0.01), g.constant(np.array(0, np.int8)))
            product = g.op("MatMul", g.op("DequantizeLinear", t, scale, zero), w_f)
            scale, zero = f32(0.05), g.constant(np.array(0, np.int8))
            t = g.op("QuantizeLinear", product, scale, zero)
    else:
        t = g.input("x", (4, 16))
        for i in range(n):
            if kind == "silu":
                t = g.op("Mul", t, g.op("Sigmoid", t))
            elif i % 2:  # GPT-2's tanh form
                inner = g.op("Add", t, g.op("Mul", g.op("Pow", t, f32(3.0)), f32(0.044715)))
                act = g.op("Tanh", g.op("Mul", inner, f32(0.7978845608028654)))
                t = g.op("Mul", g.op("Mul", t, f32(0.5)), g.op("Add", act, f32(1.0)))
            else:  # the erf form
                act = g.op("Erf", g.op("Div", t, f32(1.4142135623730951)))
                t = g.op("Mul", g.op("Mul", t, f32(0.5)), g.op("Add", act, f32(1.0)))
    g.output(t)
    return g.build()


def load(name: str, folder: Path | None = None):
    """The kernelkit Model for a MODEL argument (an int8 model's files in ``folder``, else a new temporary one)."""
    from kernelkit_converters.onnx import convert

    if ":" in name:
        kind, arg = name.split(":", 1)
        if kind in ("q", "qs"):
            qbench = _module("kernelkit_quantized", HERE / "quantized.py")
            folder = folder or Path(tempfile.mkdtemp())
            _, path = qbench.quantized_model(arg, kind == "qs", folder, not qbench._has_vnni())
            return convert(path)
        return _chain(kind, int(arg))
    zoo = _module("kernelkit_zoo", HERE / "models" / "zoo.py")
    if name.endswith("_l4"):
        return convert(getattr(zoo, name[:-3])(layers=4, vocab=2048))
    return convert({**zoo.MODELS, **zoo.EXTRA}[name]())


def digest(graph) -> str:
    """A hash of the node list: each node's op, name, inputs, outputs and attributes (arrays by their bytes)."""
    h = hashlib.sha256()
    for node in graph.nodes:
        attrs = []
        for key in sorted(node.attrs):
            value = node.attrs[key]
            if isinstance(value, np.ndarray):
                value = (value.dtype.str, value.shape, hashlib.sha256(value.tobytes()).hexdigest())
            attrs.append((key, repr(value)))
        h.update(repr((node.op_id, node.name, node.inputs, node.outputs, attrs)).encode())
    return h.hexdigest()[:16]


def context():
    from kernelkit.passes import PassContext
    from kernelkit.registry import KernelScope

    return PassContext("cpu", None, {}, scope=KernelScope())


def prepared(model):
    """A copy of the model's graph, ordered and its shapes inferred, as a session hands it to the passes."""
    from kernelkit.shape import infer_shapes

    graph = model.graph.copy()
    graph.toposort()
    infer_shapes(graph)
    return graph


def first_round() -> list:
    from kernelkit.passes import passes

    return [p for p in passes() if p.default and not p.final]


def before(model, name: str):
    """The graph pass ``name`` meets in a session's first round: the passes before it run once each."""
    graph = prepared(model)
    for p in first_round():
        if p.name == name:
            return graph
        p.fn(graph, context())
    raise KeyError(name)


def times(model, repeats: int, only: set[str]) -> tuple[list, str, str]:
    """(rows (pass, nodes met, rewrites, median ms, best ms), the first round's digest, the pipeline's)."""
    from kernelkit.passes import run_passes

    graph = prepared(model)
    start = graph.copy()
    rows = []
    for p in first_round():
        spent, fired = [], 0
        for _ in range(repeats if not only or p.name in only else 1):
            g = graph.copy()
            ctx = context()
            t0 = time.perf_counter()
            fired = int(p.fn(g, ctx) or 0)
            spent.append((time.perf_counter() - t0) * 1e3)
        if not only or p.name in only:
            rows.append((p.name, len(graph.nodes), fired, statistics.median(spent), min(spent)))
        graph = g
    first = digest(graph)
    run_passes(start, None, context())
    return rows, first, digest(start)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models")
    p.add_argument("repeats", nargs="?", type=int, default=7)
    p.add_argument("--passes", default="", help="comma separated: time only these (the others run once)")
    args = p.parse_args(argv)
    only = {n for n in args.passes.split(",") if n}
    print("| model | pass | nodes | rewrites | median ms | best ms |\n|---|---|---:|---:|---:|---:|")
    digests = []
    for name in args.models.split(","):
        rows, first, final = times(load(name), args.repeats, only)
        for pname, nodes, fired, med, best in rows:
            print(f"| {name} | {pname} | {nodes} | {fired} | {med:.2f} | {best:.2f} |")
        digests.append(f"{name}: first round {first}, pipeline {final}")
    print("\n".join(digests))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

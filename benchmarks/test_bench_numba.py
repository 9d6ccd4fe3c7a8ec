"""Numba backend speed: kernelkit (vendor numba, and the NumPy reference) next to onnxruntime at 1
and 2 threads on batch-1 CNNs, a transformer encoder and a batch-64 MLP, plus cold/warm session
build time. Models are built here with onnx.helper (seeded random weights) and imported through
kernelkit_converters, so every runtime executes the same graph.

    python -m pytest benchmarks/test_bench_numba.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=min,median,mean,rounds

Each group is one model; ``extra_info`` holds the model's GFLOP and the achieved GFLOP/s.
Set KERNELKIT_BENCH_MODELS=resnet18,mlp to run a subset.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("kernelkit_numba")
converters = pytest.importorskip("kernelkit_converters.onnx")
ort = pytest.importorskip("onnxruntime")

import kernelkit  # noqa: E402
from kernelkit.testing import MODEL_COSINE, cosine  # noqa: E402

OPSET = 21


class OnnxNet:
    """A tiny ONNX graph writer that tracks shapes (for FLOP counts) and seeds its weights."""

    def __init__(self, name: str, seed: int = 0):
        self.name, self.rng = name, np.random.default_rng(seed)
        self.nodes, self.inits, self.shapes, self.flops, self._n = [], [], {}, 0, 0

    def fresh(self, base: str) -> str:
        self._n += 1
        return f"{base}{self._n}"

    def const(self, array, base="w") -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        self.shapes[name] = np.shape(array)
        return name

    def weight(self, *shape, fan_in=None) -> str:
        fan_in = fan_in or int(np.prod(shape[1:]))
        return self.const((self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))

    def node(self, op, inputs, shape, **attrs) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shapes[out] = tuple(shape)
        return out

    # -- layers --------------------------------------------------------------------------------
    def conv(self, x, cout, k, stride=1, group=1, bias=False):
        n, cin, h, w = self.shapes[x]
        pad = k // 2
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        self.flops += 2 * n * cout * (cin // group) * k * k * oh * ow
        inputs = [x, self.weight(cout, cin // group, k, k)] + ([self.const(np.zeros(cout, np.float32))] if bias else [])
        return self.node("Conv", inputs, (n, cout, oh, ow), kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, group=group)

    def bn(self, x):
        c = self.shapes[x][1]
        r = self.rng
        params = [r.uniform(0.5, 1.5, c), r.uniform(-0.1, 0.1, c), r.uniform(-0.1, 0.1, c), r.uniform(0.5, 1.5, c)]
        return self.node("BatchNormalization", [x] + [self.const(p.astype(np.float32)) for p in params],
                         self.shapes[x], epsilon=1e-5)

    def relu(self, x):
        return self.node("Relu", [x], self.shapes[x])

    def relu6(self, x):
        lo, hi = self.const(np.float32(0), "lo"), self.const(np.float32(6), "hi")
        return self.node("Clip", [x, lo, hi], self.shapes[x])

    def add(self, a, b):
        return self.node("Add", [a, b], np.broadcast_shapes(self.shapes[a], self.shapes[b]))

    def matmul(self, a, b):
        sa, sb = self.shapes[a], self.shapes[b]
        out = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
        self.flops += 2 * int(np.prod(out)) * sa[-1]
        return self.node("MatMul", [a, b], out)

    def linear(self, x, cin, cout):
        return self.add(self.matmul(x, self.weight(cin, cout, fan_in=cin)),
                        self.const((self.rng.standard_normal(cout) * 0.01).astype(np.float32)))

    def head(self, x, classes=1000):
        n, c = self.shapes[x][:2]
        x = self.node("GlobalAveragePool", [x], (n, c, 1, 1))
        x = self.node("Flatten", [x], (n, c), axis=1)
        self.flops += 2 * n * c * classes
        return self.node("Gemm", [x, self.weight(classes, c), self.const(np.zeros(classes, np.float32))],
                         (n, classes), transB=1)

    def build(self, x_name, x_shape, out) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name, [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, self.shapes[out])], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 10
        return model


def resnet(depth: int, batch: int = 1) -> tuple[onnx.ModelProto, int]:
    net = OnnxNet(f"resnet{depth}")
    net.shapes["x"] = (batch, 3, 224, 224)
    x = net.relu(net.bn(net.conv("x", 64, 7, 2)))
    n, c, h, w = net.shapes[x]
    x = net.node("MaxPool", [x], (n, c, h // 2, w // 2), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    blocks, bottleneck = {18: ([2, 2, 2, 2], False), 50: ([3, 4, 6, 3], True)}[depth]
    cin = 64
    for stage, (count, width) in enumerate(zip(blocks, [64, 128, 256, 512])):
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            cout = width * 4 if bottleneck else width
            if bottleneck:
                y = net.relu(net.bn(net.conv(x, width, 1)))
                y = net.relu(net.bn(net.conv(y, width, 3, stride)))
                y = net.bn(net.conv(y, cout, 1))
            else:
                y = net.relu(net.bn(net.conv(x, width, 3, stride)))
                y = net.bn(net.conv(y, width, 3))
            short = net.bn(net.conv(x, cout, 1, stride)) if stride != 1 or cin != cout else x
            x, cin = net.relu(net.add(y, short)), cout
    out = net.head(x)
    return net.build("x", (batch, 3, 224, 224), out), net.flops


def mobilenet_v2(batch: int = 1) -> tuple[onnx.ModelProto, int]:
    net = OnnxNet("mobilenetv2")
    net.shapes["x"] = (batch, 3, 224, 224)
    x = net.relu6(net.bn(net.conv("x", 32, 3, 2)))
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            y = net.relu6(net.bn(net.conv(x, cin * t, 1))) if t != 1 else x
            y = net.relu6(net.bn(net.conv(y, cin * t, 3, stride, group=cin * t)))
            y = net.bn(net.conv(y, c, 1))
            x = net.add(x, y) if stride == 1 and cin == c else y
            cin = c
    x = net.relu6(net.bn(net.conv(x, 1280, 1)))
    return net.build("x", (batch, 3, 224, 224), net.head(x)), net.flops


def transformer(layers=4, seq=128, d=256, heads=4, ffn=1024, batch=1) -> tuple[onnx.ModelProto, int]:
    net = OnnxNet("transformer")
    net.shapes["x"] = (batch, seq, d)
    x, dh = "x", d // heads
    split = net.const(np.array([batch, seq, heads, dh], np.int64), "shape")
    merge = net.const(np.array([batch, seq, d], np.int64), "shape")
    scale = net.const(np.float32(1 / np.sqrt(dh)), "scale")

    def heads_of(t, perm):
        t = net.node("Reshape", [t, split], (batch, seq, heads, dh))
        return net.node("Transpose", [t], tuple((batch, seq, heads, dh)[p] for p in perm), perm=perm)

    def norm(t):
        ones, zeros = net.const(np.ones(d, np.float32)), net.const(np.zeros(d, np.float32))
        return net.node("LayerNormalization", [t, ones, zeros], net.shapes[t], axis=-1, epsilon=1e-5)

    for _ in range(layers):
        q = heads_of(net.linear(x, d, d), [0, 2, 1, 3])
        k = heads_of(net.linear(x, d, d), [0, 2, 3, 1])
        v = heads_of(net.linear(x, d, d), [0, 2, 1, 3])
        att = net.node("Mul", [net.matmul(q, k), scale], (batch, heads, seq, seq))
        att = net.node("Softmax", [att], (batch, heads, seq, seq), axis=-1)
        ctx = net.node("Transpose", [net.matmul(att, v)], (batch, seq, heads, dh), perm=[0, 2, 1, 3])
        ctx = net.node("Reshape", [ctx, merge], (batch, seq, d))
        x = norm(net.add(x, net.linear(ctx, d, d)))
        hidden = net.node("Gelu", [net.linear(x, d, ffn)], (batch, seq, ffn))
        x = norm(net.add(x, net.linear(hidden, ffn, d)))
    return net.build("x", (batch, seq, d), x), net.flops


def mlp(batch=64, sizes=(784, 1024, 1024, 10)) -> tuple[onnx.ModelProto, int]:
    net = OnnxNet("mlp")
    net.shapes["x"] = (batch, sizes[0])
    x = "x"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        net.flops += 2 * batch * a * b
        x = net.node("Gemm", [x, net.weight(b, a, fan_in=a), net.const(np.zeros(b, np.float32))], (batch, b), transB=1)
        if i < len(sizes) - 2:
            x = net.relu(x)
    return net.build("x", (batch, sizes[0]), x), net.flops


BUILDERS = {"resnet18": lambda: resnet(18), "resnet50": lambda: resnet(50), "mobilenetv2": mobilenet_v2,
            "transformer": transformer, "mlp": mlp, "transformer_b8": lambda: transformer(batch=8),
            "resnet18_b8": lambda: resnet(18, batch=8), "mobilenetv2_b8": lambda: mobilenet_v2(batch=8)}
BATCH8 = ("resnet18_b8", "mobilenetv2_b8")  # throughput runs: by name only, not in the default set
WANTED = [m for m in os.environ.get("KERNELKIT_BENCH_MODELS",
                                    ",".join(b for b in BUILDERS if b not in BATCH8)).split(",") if m]
ROUNDS = {"numba1": 20, "numba2": 20, "reference": 3, "ort1": 20, "ort2": 20}
_cache: dict[str, tuple] = {}


def model_case(name: str):
    """(onnx proto, kernelkit model, feed, GFLOP) for a model, built once per process; a name of the zoo's
    (benchmarks/models/zoo.py: gpt2, bert, ...) at batch 1, its GFLOP not counted (0); ``gpt2_l4``,
    ``bert_l4``: their first four layers with a vocabulary of 2048 (each layer's shapes as published: a build
    of seconds, where the published sizes take 30-45 s and 3.5-5 GB a process)."""
    if name not in _cache and name not in BUILDERS:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
        import zoo

        short = name.removesuffix("_l4")
        make = {**zoo.MODELS, **zoo.EXTRA}[short]
        proto = make() if short == name else getattr(zoo, short)(layers=4, vocab=2048)
        _cache[name] = (proto, converters.convert(proto.SerializeToString()), zoo.feed(proto, 1), 0.0)
    if name not in _cache:
        proto, flops = BUILDERS[name]()
        x = proto.graph.input[0]
        shape = tuple(d.dim_value for d in x.type.tensor_type.shape.dim)
        feed = {x.name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
        _cache[name] = (proto, converters.convert(proto), feed, flops / 1e9)
    return _cache[name]


def ort_session(proto, threads: int):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def kernelkit_session(model, runtime: str):
    """numba1/numba2: numba kernels (reference for the ops numba leaves to it) at 1/2 threads."""
    if runtime == "reference":
        return kernelkit.Session(model, vendors=["reference"], fallback=False)
    return kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=int(runtime[5:]))


@pytest.mark.parametrize("runtime", ["numba1", "numba2", "reference", "ort1", "ort2"])
@pytest.mark.parametrize("name", WANTED)
def test_latency(benchmark, name, runtime):
    proto, model, feed, gflop = model_case(name)
    benchmark.group = f"{name} (batch {next(iter(feed.values())).shape[0]})"
    if runtime.startswith("ort"):
        sess = ort_session(proto, int(runtime[3:]))
        run = lambda: sess.run(None, feed)  # noqa: E731
    else:
        sess = kernelkit_session(model, runtime)
        run = lambda: sess.run(None, feed)  # noqa: E731
    out = run()[0]
    expected = ort_session(proto, 2).run(None, feed)[0]
    assert cosine(out, expected) >= MODEL_COSINE, f"{name}/{runtime} disagrees with onnxruntime"
    benchmark.pedantic(run, rounds=ROUNDS[runtime], warmup_rounds=1)
    benchmark.extra_info["gflop"] = round(gflop, 3)
    benchmark.extra_info["gflops_achieved"] = round(gflop / benchmark.stats.stats.median, 1)


_BUILD_PROBE = """
import sys, time, json
t0 = time.perf_counter()
import numpy as np, onnx, kernelkit
from kernelkit_converters.onnx import convert
model = convert(onnx.load(sys.argv[1]))
t1 = time.perf_counter()
sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
x = sess.get_inputs()[0]
sess.run(None, {x.name: np.zeros(x.shape, np.float32)})
print(json.dumps({"import_convert_s": t1 - t0, "build_and_first_run_s": time.perf_counter() - t1}))
"""


@pytest.mark.parametrize("cache", ["cold", "warm"])
@pytest.mark.parametrize("name", WANTED)
def test_session_build(benchmark, tmp_path_factory, name, cache):
    """Session build + first run in a fresh process: with an empty Numba cache (cold, compiles
    every kernel) and with a populated one (warm, loads them). Target: warm <= 2 s."""
    proto = model_case(name)[0]
    folder = tmp_path_factory.mktemp(f"build_{name}_{cache}")
    path = folder / "model.onnx"
    onnx.save(proto, path)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(folder / "numba_cache")}

    def probe():
        out = subprocess.run([sys.executable, "-c", _BUILD_PROBE, str(path)], env=env, check=True,
                             capture_output=True, text=True, timeout=600)
        return json.loads(out.stdout.strip().splitlines()[-1])

    if cache == "warm":
        probe()  # populate the cache
    benchmark.group = f"session build: {name}"
    result = {}
    t0 = time.perf_counter()
    benchmark.pedantic(lambda: result.update(probe()), rounds=1, iterations=1)
    benchmark.extra_info.update({k: round(v, 3) for k, v in result.items()})
    benchmark.extra_info["process_s"] = round(time.perf_counter() - t0, 3)


def block_table(names=WANTED, rounds: int = 15) -> list[dict]:
    """Latency per runtime, each measured in its own block of ``rounds`` calls after a warm-up, the
    blocks run twice in mirrored order (numba1 numba2 ort1 ort2, then ort2 ort1 numba2 numba1) and
    the better median of the two kept, so that slow drift of a shared machine hits both sides.

    Not round-robin: onnxruntime's and OpenBLAS's worker threads spin for a while after each call,
    so in a round-robin the runtime measured next runs against a busy core (on 2 cores that moved
    onnxruntime's transformer median from 15 to 30 ms)."""
    rows = []
    for name in names:
        proto, model, feed, gflop = model_case(name)
        makers = {"numba1": lambda m=model: kernelkit_session(m, "numba1"),
                  "numba2": lambda m=model: kernelkit_session(m, "numba2"),
                  "ort1": lambda p=proto: ort_session(p, 1), "ort2": lambda p=proto: ort_session(p, 2)}
        medians: dict[str, list[float]] = {k: [] for k in makers}
        mins: dict[str, list[float]] = {k: [] for k in makers}
        for order in (list(makers), list(makers)[::-1]):
            for key in order:
                sess = makers[key]()
                for _ in range(2):
                    sess.run(None, feed)
                times = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    sess.run(None, feed)
                    times.append((time.perf_counter() - t0) * 1e3)
                medians[key].append(float(np.median(times)))
                mins[key].append(min(times))
                del sess
                time.sleep(0.2)  # let worker threads of the last runtime go idle
        row = {"model": name, "gflop": round(gflop, 3)}
        for key in makers:
            row[f"{key}_median"], row[f"{key}_min"] = round(min(medians[key]), 2), round(min(mins[key]), 2)
        rows.append(row)
    return rows


def apply_bench_set(spec: str | None = None) -> None:
    """Set ``kernelkit_numba`` constants from ``spec`` (default ``$KERNELKIT_BENCH_SET``):
    ``module.ATTR=value,...``, e.g. ``kernels.dwtile.PARALLEL_US=100,shards.ShardPool.CLAIM_AFTER_S=0.0``
    (a module of ``kernelkit_numba``, or one named in full: ``kernelkit.memory.HOT=0``)
    (a value with a dot is a float, else an int, else a string; ``module.DICT.KEY=value`` sets an item of
    a dict constant, an int key where it reads as one): a variant of the defaults in a benchmark process."""
    import importlib

    spec = os.environ.get("KERNELKIT_BENCH_SET", "") if spec is None else spec
    for item in filter(None, spec.split(",")):
        key, value = item.split("=")
        parts = key.split(".")
        # the longest importable module, then attributes: kernelkit_numba's, or any module named in
        # full from kernelkit or kernelkit_numba (kernelkit.memory.HOT=0)
        absolute = parts[0] in ("kernelkit", "kernelkit_numba")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(("" if absolute else "kernelkit_numba.") + ".".join(parts[:cut]))
                break
            except ImportError:
                continue
        for part in parts[cut:-1]:
            obj = obj[_bench_value(part)] if isinstance(obj, dict) else getattr(obj, part)
        if isinstance(obj, dict):  # an item of a dict constant: kernels.fgemm.MR.2=12
            obj[_bench_value(parts[-1])] = _bench_value(value)
        else:
            setattr(obj, parts[-1], _bench_value(value))


def _bench_value(value: str):
    """A ``KERNELKIT_BENCH_SET`` value: a float with a dot, else an int, else the string itself."""
    try:
        return float(value) if "." in value else int(value)
    except ValueError:
        return value


_RUNTIMES = ("numba1", "numba", "reference1", "ort1", "ort2")
_LABELS = {"numba1": "numba 1t", "numba": "numba default", "reference1": "reference 1t", "ort1": "ORT 1t",
           "ort2": "ORT 2t"}

_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[4])
import numpy as np
from test_bench_numba import model_case, kernelkit_session, ort_session
import kernelkit
from kernelkit.testing import MODEL_COSINE, cosine
name, runtime, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
from test_bench_numba import apply_bench_set
apply_bench_set()
proto, model, feed, gflop = model_case(name)
if runtime == "reference1":
    from threadpoolctl import threadpool_limits
    threadpool_limits(1, user_api="blas")
    sess = kernelkit.Session(model, vendors=["reference"], fallback=False)
elif runtime == "numba":
    sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
elif runtime.startswith("numba"):
    sess = kernelkit_session(model, runtime)
else:
    sess = ort_session(proto, int(runtime[3:]))
t0 = time.perf_counter()
out = sess.run(None, feed)[0]
first = time.perf_counter() - t0
for _ in range(2):
    sess.run(None, feed)
from _timing import steal_seconds
steal0, wall0 = steal_seconds(), time.perf_counter()
blocks = []
for _ in range(3):
    t = []
    for _ in range(rounds):
        t0 = time.perf_counter(); sess.run(None, feed); t.append((time.perf_counter() - t0) * 1e3)
    blocks.append(float(np.median(t)))
steal1, wall1 = steal_seconds(), time.perf_counter()
steal = None if steal0 is None or steal1 is None else (steal1 - steal0) / (wall1 - wall0)
expected = ort_session(proto, 1).run(None, feed)[0]
pool = sys.modules["kernelkit_numba.shards"].POOL if "kernelkit_numba.shards" in sys.modules else None
fp = sys.modules.get("kernelkit_numba.kernels.fpair")  # the float32 pairs' helper, where it ran (session 10)
fpair_stats = dict(fp.server().stats) if fp is not None and fp._server else {}
print(json.dumps({"model": name, "runtime": runtime, "median_ms": min(blocks), "blocks": blocks,
                  "first_run_s": first, "steal_share": steal, "cosine_ok": bool(cosine(out, expected) >= MODEL_COSINE),
                  "pool_stalls": pool.stalls if pool else 0, "pool": dict(pool.stats) if pool else {},
                  "fpair": fpair_stats}))
"""


def process_table(names, rounds: int = 15, loaded: bool = False, runtimes=_RUNTIMES, repeats: int = 1) -> dict:
    """Each (model, runtime) in its own process (inheriting this process's CPU affinity, e.g.
    ``taskset -c 0,1``), block-timed: 3 blocks of ``rounds`` calls after warm-up, the best block
    median kept. ``loaded``: a busy-loop process pinned to the first of those CPUs runs meanwhile.
    numba default = ``Session()`` without ``threads`` (the pool uses every CPU of the affinity).
    ``repeats`` > 1 runs the whole table that many times in turn (the host drifts between
    processes: runtimes of one repeat stand side by side, in reverse order on odd repeats) and keeps
    each cell's median. Each child reports the hypervisor's steal share of its CPUs over its timed
    runs (``steal_share``)."""
    busy = None
    if loaded:
        cpu = min(os.sched_getaffinity(0))
        spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
        busy = subprocess.Popen([sys.executable, "-c", spin])
        time.sleep(0.5)
    here = os.path.dirname(os.path.abspath(__file__))
    runs: dict = {}
    try:
        # odd repeats take the runtimes in reverse: drift through a repeat hits each runtime alike
        order = [(name, runtime) for rep in range(repeats) for name in names
                 for runtime in (runtimes if rep % 2 == 0 else runtimes[::-1])]
        for name, runtime in order:
            res = subprocess.run([sys.executable, "-c", _CHILD, name, runtime, str(rounds), here],
                                 stdout=subprocess.PIPE, text=True, timeout=900)
            if res.returncode:
                print(json.dumps({"model": name, "runtime": runtime, "error": res.returncode}), flush=True)
                continue
            row = json.loads(res.stdout.strip().splitlines()[-1])
            row["load"] = "loaded" if loaded else "quiet"
            print(json.dumps(row), flush=True)
            runs.setdefault((name, runtime), []).append(row["median_ms"])
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return {key: float(np.median(ms)) for key, ms in runs.items()}


def markdown(table: dict, names, title: str, runtimes=_RUNTIMES) -> str:
    head = "| model (" + title + ") | " + " | ".join(_LABELS[r] for r in runtimes)
    head += " | numba default / ORT 2t | reference 1t / numba 1t | numba default / numba 1t |"
    lines = [head, "|---" * (len(runtimes) + 4) + "|"]
    for name in names:
        def get(r, name=name):
            return table.get((name, r), float("nan"))

        cells = " | ".join(f"{get(r):.2f}" for r in runtimes)
        lines.append(f"| {name} | {cells} | {get('numba') / get('ort2'):.2f} | {get('reference1') / get('numba1'):.2f}"
                     f" | {get('numba') / get('numba1'):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    # python benchmarks/test_bench_numba.py [models] [rounds] [quiet,loaded] [repeats]
    #   KERNELKIT_BENCH_SET=kernels.dwtile.PARALLEL_US=100,config.HEARTBEAT=0 sets kernelkit_numba
    #   module constants in every child process (a variant of the defaults, each in its own run)
    #   each runtime in its own process; run it pinned: taskset -c 0,1 python benchmarks/...
    # Steady-state timing: numba kernels compile in the warm-up calls, not in the background while
    # blocks are timed (tiered start, docs/numba.md "First call"); the child processes inherit it.
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    picked = sys.argv[1].split(",") if len(sys.argv) > 1 else WANTED
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["quiet", "loaded"]
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    tables = {mode: process_table(picked, rounds, loaded=mode == "loaded", repeats=repeats) for mode in modes}
    for mode, table in tables.items():
        print(markdown(table, picked, mode))

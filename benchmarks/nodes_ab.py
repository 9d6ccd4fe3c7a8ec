"""Per-node A/B of kernelkit_numba settings inside a model at one thread: the reference session, the
numba session with the defaults and one numba session per ``LABEL=SPEC`` variant (SPEC:
``;``-separated ``module.ATTR=VALUE`` constants, as turns.py's ``--variant1``; each set while its
session is built and warmed, then put back), all in one process, run in turn one run each per round
(``_timing.best_node_ms_interleaved``), each node's best time. Prints the Conv nodes grouped by
kind (kernel, stride, channels, map; ``+Z`` with a fused residual) and the other ops, per group the
summed ms of every session and the ratios reference / numba and numba / variant (above 1: the
variant faster). Issue 11, session 11 (docs/numba.md, "ResNet-50's 1x1 layers at one thread").
A constant that code built once a process reads (``cache.built_once_readers``: ``ftile.ROWS_TILE_MAJOR``,
``fdirect.MP``, ...) cannot be switched in the process: such a variant is refused (turns.py's
``--variant1`` gives each value a process).

    taskset -c 0,1 python benchmarks/nodes_ab.py resnet50 [runs=15] \
        [kc512=kernels.ftile.KC12=512 ...] [--rotate]

``--rotate``: the sessions' order turned every round (``_timing.best_node_ms_interleaved``), so that no
session always runs after the same other one. ``--nodes=NAME,NAME``: also those nodes one by one, each
session's best ms and the within-round ratios reference / numba and numba / variant as the median over the
rounds with their range (``_timing.node_ms_rounds_interleaved``): whether a per-node gap is outside the
rounds' noise.
"""
from __future__ import annotations

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # the reference's BLAS at one thread (ops_vs_reference.py)
import kernelkit  # noqa: E402
import zoo  # noqa: E402
from _timing import best_node_ms_interleaved, node_ms_rounds_interleaved  # noqa: E402, F401 (nodes_ab2t.py)
from kernelkit_converters.onnx import convert  # noqa: E402
from onnx import numpy_helper  # noqa: E402


def _saved(spec: str) -> dict:
    """The current values of SPEC's constants (to put back after the variant's session is built)."""
    import importlib

    out = {}
    for item in filter(None, spec.split(";")):
        key = item.split("=")[0]
        mod, attr = key.rsplit(".", 1)
        absolute = mod.split(".")[0] in ("kernelkit", "kernelkit_numba")  # named in full: kernelkit.memory.HOT
        obj = importlib.import_module(mod if absolute else "kernelkit_numba." + mod)
        out[(obj, attr)] = getattr(obj, attr)
    return out


def _constant(key: str) -> tuple[str, str]:
    """(module, name) of the module constant a SPEC key sets (test_bench_numba.apply_bench_set's reading:
    the longest importable module, relative to kernelkit_numba unless named in full, then the constant,
    whose items a longer key sets: kernels.fgemm.MR.2 is MR's)."""
    import importlib

    parts = key.split(".")
    absolute = parts[0] in ("kernelkit", "kernelkit_numba")
    for cut in range(len(parts) - 1, 0, -1):
        name = ("" if absolute else "kernelkit_numba.") + ".".join(parts[:cut])
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name, parts[cut]
    raise SystemExit(f"{key}: no module of kernelkit_numba or kernelkit holds it")


def refuse_built_once(variants: list, tool: str) -> None:
    """Exit with a message where a variant's SPEC sets a constant that code a process builds once reads
    (kernelkit_numba.cache.built_once_readers: ftile.ROWS_TILE_MAJOR, fdirect.MP, ...): set inside this
    process, after the default session built that code, the variant would run the default's code."""
    import importlib
    import pkgutil

    from kernelkit_numba import cache, kernels

    for info in pkgutil.iter_modules(kernels.__path__):  # the builders of every kernel, not only the imported
        importlib.import_module(f"{kernels.__name__}.{info.name}")
    for label, spec in variants:
        for item in filter(None, spec.split(";")):
            module, name = _constant(item.split("=")[0])
            readers = cache.built_once_readers(module, name)
            if readers:
                raise SystemExit(
                    f"{tool}: variant {label}: {module}.{name} is read by code a process builds or compiles once "
                    f"({', '.join(r.removeprefix('kernelkit_numba.') for r in readers)}); switched in this "
                    f"process, the variant would run the code built first for the default. A/B it with a "
                    f"process per value: turns.py --variant1 {label}={spec} (one thread) or --variant (default)")


def _kinds(proto) -> dict:
    """Conv node name -> its kind label (kernel/stride, in -> out channels, input map)."""
    weights = {t.name: numpy_helper.to_array(t).shape for t in proto.graph.initializer}
    shapes = {}
    for vi in list(proto.graph.value_info) + list(proto.graph.input):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    out = {}
    for node in proto.graph.node:
        if node.op_type != "Conv" or node.input[1] not in weights:
            continue
        m, c, kh, kw = weights[node.input[1]]
        stride = next((list(a.ints) for a in node.attribute if a.name == "strides"), [1, 1])
        hw = shapes.get(node.input[0], [])
        where = f"@{hw[2]}" if len(hw) == 4 and hw[2] else ""
        out[node.name] = f"{kh}x{kw}/{stride[0]} {c}->{m}{where}"
        for o in node.output:
            out[o] = out[node.name]
    return out


def load(name: str):
    """The zoo model ``name``: its Conv kind labels (``_kinds``), the converted model and a batch-1 feed."""
    short = name.removesuffix("_l4")  # bert_l4, gpt2_l4: four layers, a vocabulary of 2048 (turns.py's)
    proto = {**zoo.MODELS, **zoo.EXTRA}[name]() if short == name else getattr(zoo, short)(layers=4, vocab=2048)
    try:
        import onnx

        proto = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - the map sizes are labels only
        pass
    return _kinds(proto), convert(proto.SerializeToString()), zoo.feed(proto, 1)


def variant_session(model, feed, spec: str, threads: int):
    """A numba session built and warmed (two runs) under SPEC's constants, which are then put back."""
    from test_bench_numba import apply_bench_set

    saved = _saved(spec)
    apply_bench_set(spec.replace(";", ","))
    try:
        sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=threads, profile=True)
        for _ in range(2):
            sess.run(None, feed)
    finally:
        for (obj, attr), value in saved.items():
            setattr(obj, attr, value)
    return sess


def print_groups(title: str, kinds: dict, plan_session, best: list[dict], labels: list[str],
                 ratio_names: list[str], ratios) -> None:
    """The nodes of ``plan_session``'s plan grouped by kind (Conv by ``kinds``' label, ``+Z`` with a fused
    residual; other ops by op), per group the summed best ms of every session (``best``, one dict per
    label) and ``ratios(ms)`` (one value per name in ``ratio_names``), sorted by the second session's ms,
    and the sums."""
    groups: dict = collections.defaultdict(lambda: [0] + [0.0] * len(labels))
    for node, step in {s.name: s for s in plan_session.plan.kernel_steps()}.items():
        kind = step.op
        if step.op == "Conv":
            label = next((kinds[o] for o in [node, *step.outputs] if o in kinds), "?")
            kind = f"Conv {label}" + (" +Z" if len(step.inputs) > 3 else "")
        row = groups[kind]
        row[0] += 1
        for i, b in enumerate(best):
            row[1 + i] += b.get(node, 0.0)
    print(title)
    print(f"| kind | nodes | {' | '.join(labels)} | " + " | ".join(ratio_names) + " |")
    print("|---|---:|" + "---:|" * (len(labels) + len(ratio_names)))
    total = [0.0] * len(labels)
    for kind, row in sorted(groups.items(), key=lambda kv: -kv[1][2]):
        ms = row[1:]
        total = [a + b for a, b in zip(total, ms)]
        print(f"| {kind} | {row[0]} | " + " | ".join(f"{v:.3f}" for v in ms) + " | "
              + " | ".join(f"{r:.3f}" for r in ratios(ms)) + " |")
    print("| **sum** | | " + " | ".join(f"{v:.2f}" for v in total) + " | "
          + " | ".join(f"{r:.3f}" for r in ratios(total)) + " |")


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def round_ratio(a: list, b: list) -> str:
    """The within-round ratio a / b over the rounds: "median (lowest-highest)"."""
    import numpy as np

    r = sorted(x / y for x, y in zip(a, b) if y > 0 and np.isfinite(x) and np.isfinite(y))
    return f"{np.median(r):.3f} ({r[0]:.2f}-{r[-1]:.2f})" if r else "-"


def print_nodes(nodes: list[str], rounds: list[dict], labels: list[str]) -> None:
    """``--nodes``: per named node each session's best ms, then reference / numba and numba / variant
    within each round, median (range over the rounds)."""
    print(f"| node | {' | '.join(labels)} | reference / numba | " + " | ".join(f"numba / {v}" for v in labels[2:])
          + " |")
    print("|---|" + "---:|" * (2 * len(labels) - 1))
    for node in nodes:
        if any(node not in r for r in rounds):
            print(f"| {node} | not in every session's plan |")
            continue
        print(f"| {node} | " + " | ".join(f"{min(r[node]):.3f}" for r in rounds) + " | "
              + " | ".join([round_ratio(rounds[0][node], rounds[1][node])]
                           + [round_ratio(rounds[1][node], r[node]) for r in rounds[2:]]) + " |")


def main(argv: list[str]) -> int:
    rotate = "--rotate" in argv  # the sessions' order turned every round (ops_vs_reference.py's --rotate)
    nodes = [n for a in argv if a.startswith("--nodes=") for n in a.split("=", 1)[1].split(",") if n]
    argv = [a for a in argv if a != "--rotate" and not a.startswith("--nodes=")]
    name = argv[0] if argv else "resnet50"
    runs = int(argv[1]) if len(argv) > 1 else 15
    variants = [a.split("=", 1) for a in argv[2:]]
    refuse_built_once(variants, "nodes_ab.py")
    kinds, model, feed = load(name)
    labels = ["reference", "numba"] + [v[0] for v in variants]
    sessions = [kernelkit.Session(model, vendors=["reference"], threads=1, profile=True),
                kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True)]
    sessions += [variant_session(model, feed, spec, 1) for _, spec in variants]
    rounds = node_ms_rounds_interleaved(sessions, feed, runs, rotate)
    best = [{node: min(ms) for node, ms in r.items()} for r in rounds]
    print_groups(f"## {name}, 1 thread, best of {runs} per node (ms), sessions in turn"
                 + (", order rotated" if rotate else ""), kinds, sessions[1], best,
                 labels, ["reference / numba"] + [f"numba / {v}" for v in labels[2:]],
                 lambda ms: [_ratio(ms[0], ms[1])] + [_ratio(ms[1], v) for v in ms[2:]])
    # every node of each session's own plan (a variant that fuses differently has other nodes than the
    # default's, which the groups above are made of)
    print("| all nodes, each session's own | | " + " | ".join(f"{sum(b.values()):.2f}" for b in best) + " | "
          + " | ".join(f"{r:.3f}" for r in [_ratio(sum(best[0].values()), sum(best[1].values()))]
                       + [_ratio(sum(best[1].values()), sum(b.values())) for b in best[2:]]) + " |")
    if nodes:
        print_nodes(nodes, rounds, labels)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

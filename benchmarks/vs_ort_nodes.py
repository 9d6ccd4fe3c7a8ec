"""Every node of a benchmark model, kernelkit (numba) against onnxruntime at the same thread count
(issue 11, session 9): each node's best time over ``--runs`` runs, onnxruntime's from its own
profiler (``SessionOptions.enable_profiling``), the nodes matched by name and output, then a sum per
layer kind (Conv by kernel, stride, map size and channels; other ops by op) with what each kind
costs above onnxruntime. The whole run's time without profiling (calls interleaved, best CPU ms at
one thread, wall ms at more) is printed beside the per-node sums: onnxruntime's profiler costs it
time per node, so its per-node figures read high.

    python benchmarks/vs_ort_nodes.py resnet50 [--threads 1] [--runs 10] [--batch 1] [--reference]
        [--json OUT.json]
    python benchmarks/vs_ort_nodes.py resnet50,mlp --base DIR [--rounds 2] [--budget 150] [--out DIR]
    python benchmarks/vs_ort_nodes.py --merge a.json b.json ...

``--reference`` adds the NumPy reference kernels' per-node times (a third column) and their whole run.
``--set kernels.fgemm.KC=256`` sets a module attribute of kernelkit_numba first. ``--base DIR``:
this tree and the tree at DIR (``git archive`` of the branch point) in alternating processes
(``--rounds`` each per model, none started after ``--budget`` seconds), each writing a JSON file
into ``--out``; then the merged table: per node the median over each tree's processes, base / new
and new / onnxruntime. ``--merge``: that table from JSON files written before (the tree is the
``tree`` field: ``new`` unless the file came from ``--base``'s base processes). ``--variant
LABEL:MODEL:kernels.ftile.ROWS12_ON=False;...`` adds this tree with those settings as one more
configuration of MODEL's turns.

Matching: onnxruntime names a fused node after the last node it fused (``relu8_nchwc`` for
Conv -> BatchNormalization -> Relu), and kernelkit's fused step writes that node's output
(``relu8``), so a node pairs with the step whose outputs include the original node's outputs; what
is left pairs by (op, input shapes) in execution order; onnxruntime's layout nodes (ReorderInput,
ReorderOutput) have no kernelkit step and are listed as such.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


# ------------------------------------------------------------------------------------ measuring
def _layer_kind(op: str, shapes: list, attrs: dict, has_z: bool) -> str:
    """A node's layer kind: Conv as kernel/stride, map, channels in -> out (+Z: the fused residual)."""
    if op != "Conv" or len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return op
    x, w = shapes[0], shapes[1]
    k = "x".join(map(str, w[2:]))
    s = (attrs.get("strides") or [1])[0]
    g = int(attrs.get("group", 1))
    kind = f"Conv {k}/{s} @{x[-1]} {x[1]}->{w[0]}"
    if g > 1:
        kind += " dw" if g == x[1] else f" g{g}"
    return kind + (" +Z" if has_z else "")


def _kk_nodes(model, feed, vendor: str, threads: int, runs: int) -> list[dict]:
    import kernelkit
    from _timing import best_node_ms

    vendors = [vendor, "reference"] if vendor != "reference" else ["reference"]
    sess = kernelkit.Session(model, vendors=vendors, threads=threads, profile=True)
    best = best_node_ms(sess, feed, runs)
    rows = []
    for step in sess.plan.kernel_steps():
        shapes = [list(sess.graph.spec(i).shape) if i else None for i in step.inputs]
        attrs = dict(getattr(step.node, "attrs", None) or {})
        has_z = step.op == "Conv" and len(step.inputs) > 3 and bool(step.inputs[3])
        rows.append({"name": step.name, "op": step.op, "outputs": list(step.outputs), "shapes": shapes,
                     "kind": _layer_kind(step.op, shapes, attrs, has_z), "ms": best.get(step.name, 0.0),
                     "vendor": step.key.vendor})
    return rows


def _ort_nodes(proto, feed, threads: int, runs: int) -> list[dict]:
    from _timing import ort_best_nodes

    return ort_best_nodes(proto, feed, threads, runs)


def _whole_runs(proto, model, feed, threads: int, reps: int, reference: bool, min_seconds: float = 0.0) -> dict:
    """Best time of a whole run (ms) of kernelkit numba and onnxruntime (and the reference kernels,
    BLAS at ``threads`` threads) without profiling, calls interleaved: CPU time at one thread, wall
    time at more; ``reps`` rounds, or more (at most 400) until numba's runs fill ``min_seconds``."""
    import kernelkit
    from test_bench_numba import ort_session
    from threadpoolctl import threadpool_limits

    sessions = {"numba": kernelkit.Session(model, vendors=["numba", "reference"], threads=threads),
                "ort": ort_session(proto, threads)}
    if reference:
        sessions["reference"] = kernelkit.Session(model, vendors=["reference"])
    clock = time.process_time if threads == 1 else time.perf_counter
    best = dict.fromkeys(sessions, float("inf"))
    with threadpool_limits(threads):
        for sess in sessions.values():
            for _ in range(3):
                sess.run(None, feed)
        spent, i = 0.0, 0
        while i < reps or (spent < min_seconds and i < 400):
            for name, sess in sessions.items():
                t0 = clock()
                sess.run(None, feed)
                dt = clock() - t0
                best[name] = min(best[name], dt * 1e3)
                spent += dt if name == "numba" else 0.0
            i += 1
    return best


def _base_name(ort_name: str) -> str:
    return re.sub(r"(_nchwc|_token_\d+)+$", "", re.sub(r"^fused ", "", ort_name))


def match(proto, kk: list[dict], ox: list[dict]) -> list[tuple]:
    """[(kk row or None, ort row or None)]: by the original node's outputs, then (op, input shapes)
    in order (module docstring)."""
    outputs = {n.name: list(n.output) for n in proto.graph.node}
    by_output = {o: i for i, r in enumerate(kk) for o in r["outputs"]}
    by_name = {r["name"]: i for i, r in enumerate(kk)}
    pair: dict[int, dict] = {}
    left = []
    for r in ox:
        name = _base_name(r["name"])
        hits = [by_output[o] for o in outputs.get(name, [name]) if o in by_output] + \
            ([by_name[name]] if name in by_name else [])
        if hits and hits[0] not in pair:
            pair[hits[0]] = r
        else:
            left.append(r)
    pool = collections.defaultdict(list)
    for r in left:
        pool[(r["op"], tuple(tuple(s) for s in r["shapes"][:2]))].append(r)
    rows = []
    for i, r in enumerate(kk):
        if i not in pair:
            key = (r["op"], tuple(tuple(s) for s in r["shapes"][:2] if s is not None))
            if pool.get(key):
                pair[i] = pool[key].pop(0)
        rows.append((r, pair.get(i)))
    rows += [(None, r) for v in pool.values() for r in v]
    return rows


def measure(name: str, threads: int, runs: int, batch: int, reference: bool, min_seconds: float = 0.0) -> dict:
    """One process's figures of a model: the whole runs first, then (``runs``, or more: as many as
    fill ``min_seconds`` of numba runs, at most 200: the MLP's 2 ms runs want more than ResNet's)
    each node's best time of numba, the reference kernels (``reference``) and onnxruntime."""
    from bench_e2e_interleaved import batched

    proto, model, feed = batched(name, batch)
    whole = _whole_runs(proto, model, feed, threads, max(5, runs), reference, min_seconds)
    runs = max(runs, min(200, int(min_seconds * 1e3 / max(whole["numba"], 1e-3))))
    kk = _kk_nodes(model, feed, "numba", threads, runs)
    ref = _kk_nodes(model, feed, "reference", threads, runs) if reference else []
    ox = _ort_nodes(proto, feed, threads, runs)
    ref_ms = {r["name"]: r["ms"] for r in ref}
    nodes = []
    for k, o in match(proto, kk, ox):
        row = {"name": (k or o)["name"], "op": (k or o)["op"], "kind": k["kind"] if k else f"ORT {o['op']}",
               "kk": k["ms"] if k else None, "ort": o["ms"] if o else None, "ort_name": o["name"] if o else None}
        if k and ref_ms:
            row["ref"] = ref_ms.get(k["name"])
        nodes.append(row)
    import kernelkit_numba

    return {"model": name, "threads": threads, "batch": batch, "runs": runs, "nodes": nodes, "whole": whole,
            "source": os.path.dirname(kernelkit_numba.__file__)}


# ------------------------------------------------------------------------------------- printing
def _f(v, w=7, d=3):
    return f"{v:{w}.{d}f}" if v is not None else " " * (w - 1) + "-"


def _ratio(a, b):
    return a / b if a is not None and b else None


def table(results: list[dict]) -> str:
    """One model's merged table: per node the median over the processes of each tree."""
    trees = sorted({r.get("tree", "new") for r in results}, key=lambda t: (t != "base", t != "new", t))
    first = results[0]
    per = {t: [r for r in results if r.get("tree", "new") == t] for t in trees}
    names = [n["name"] for n in first["nodes"]]
    meta = {n["name"]: n for n in first["nodes"]}

    def med(t, node, field):
        vals = [n[field] for r in per[t] for n in r["nodes"] if n["name"] == node and n.get(field) is not None]
        return statistics.median(vals) if vals else None

    has_ref = any("ref" in n for r in results for n in r["nodes"])
    cols = [f"kk {t}" for t in trees] + ["ORT"] + (["ref"] if has_ref else []) + \
        [f"{t} / ORT" for t in trees] + [f"{t} / base" for t in trees[1:] if trees[0] == "base"]
    lines = [f"## {first['model']} batch {first['batch']}, {first['threads']} thread(s), best of {first['runs']} "
             f"runs per node, median over {', '.join(f'{len(per[t])} {t}' for t in trees)} process(es), ms",
             "", "| node | kind | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    sums = collections.defaultdict(lambda: collections.defaultdict(float))
    for node in names:
        vals = {t: med(t, node, "kk") for t in trees}
        o = med(trees[0], node, "ort")
        o = statistics.median([v for v in [med(t, node, "ort") for t in trees] if v is not None] or [0]) or o
        ref = med(trees[-1], node, "ref") if has_ref else None
        kind = meta[node]["kind"]
        for t in trees:
            if vals[t] is not None:
                sums[kind][t] += vals[t]
                sums[kind][t + " over"] += max(0.0, vals[t] - (o or 0.0))
        sums[kind]["ORT"] += o or 0.0
        sums[kind]["n"] += 1
        if ref is not None:
            sums[kind]["ref"] += ref
        cells = [_f(vals[t]) for t in trees] + [_f(o)] + ([_f(ref)] if has_ref else [])
        cells += [_f(_ratio(vals[t], o), 5, 2) for t in trees]
        if trees[0] == "base":
            cells += [_f(_ratio(vals[t], vals["base"]), 5, 2) for t in trees[1:]]
        lines.append(f"| {node} | {kind} | " + " | ".join(cells) + " |")
    lines += ["", "Per layer kind (sums of the per-node medians; 'over': the sum of what each node takes above "
              "onnxruntime's node), ms:", "",
              "| kind | nodes | " + " | ".join(f"kk {t} | {t} over" for t in trees) + " | ORT" +
              (" | ref" if has_ref else "") + " | " + " | ".join(f"{t} / ORT" for t in trees) + " |",
              "|---|---:|" + "---:|" * (2 * len(trees) + 1 + has_ref + len(trees))]
    tot = collections.defaultdict(float)
    for kind, s in sorted(sums.items(), key=lambda kv: -kv[1].get(trees[-1] + " over", 0.0)):
        for k, v in s.items():
            tot[k] += v
        lines.append(f"| {kind} | {int(s['n'])} | " + " | ".join(f"{_f(s[t])} | {_f(s[t + ' over'])}" for t in trees)
                     + f" | {_f(s['ORT'])}" + (f" | {_f(s['ref'])}" if has_ref else "") + " | "
                     + " | ".join(_f(_ratio(s[t], s["ORT"]), 5, 2) for t in trees) + " |")
    lines.append(f"| total | {int(tot['n'])} | " + " | ".join(f"{_f(tot[t], 8, 2)} | {_f(tot[t + ' over'], 8, 2)}"
                                                             for t in trees)
                 + f" | {_f(tot['ORT'], 8, 2)}" + (f" | {_f(tot['ref'], 8, 2)}" if has_ref else "") + " | "
                 + " | ".join(_f(_ratio(tot[t], tot["ORT"]), 5, 2) for t in trees) + " |")
    clock = "CPU" if first["threads"] == 1 else "wall"
    for t in trees:
        w = [r["whole"] for r in per[t]]
        lines.append(f"\nWhole run without profiling, {t} ({clock} ms, best per process): numba "
                     + ", ".join(f"{x['numba']:.2f}" for x in w) + "; onnxruntime "
                     + ", ".join(f"{x['ort']:.2f}" for x in w) + "; numba / ORT "
                     + ", ".join(f"{x['numba'] / x['ort']:.2f}" for x in w)
                     + ("; reference " + ", ".join(f"{x['reference']:.2f}" for x in w) + "; reference / numba "
                        + ", ".join(f"{x['reference'] / x['numba']:.2f}" for x in w) if "reference" in w[0] else "")
                     + f" (kernels from {per[t][0]['source']})")
    return "\n".join(lines) + "\n"


def merged(results: list[dict]) -> str:
    by_model = collections.defaultdict(list)
    for r in results:
        by_model[(r["model"], r["threads"], r["batch"])].append(r)
    return "\n".join(table(v) for v in by_model.values())


# ------------------------------------------------------------------------------- two trees A/B
def alternate(models: list[str], base: str, args) -> list[dict]:
    from alternate_trees import tree_env

    out = args.out or tempfile.mkdtemp(prefix="vs_ort_")
    os.makedirs(out, exist_ok=True)
    trees = {"base": os.path.abspath(base), "new": os.path.dirname(HERE)}
    caches = {t: os.path.join(out, f"numba_cache_{t}") for t in trees}
    configs = [("base", "base", []), ("new", "new", [])]
    for spec in args.variant or []:  # LABEL:MODEL:module.ATTR=value;module.ATTR=value (this tree only)
        label, model, sets = spec.split(":", 2)
        configs.append((label, "new", [(model, x) for x in sets.split(";") if x]))
    t_end = time.monotonic() + args.budget
    results = []
    for rnd in range(args.rounds):
        for model in models:
            turn = [c for c in configs if all(m == model for m, _ in c[2])]
            for label, tree, sets in (turn if rnd % 2 == 0 else turn[::-1]):
                if time.monotonic() > t_end:
                    print(f"budget spent: {label} {model} round {rnd} not started", flush=True)
                    continue
                path = os.path.join(out, f"{model}_{label}_{rnd}.json")
                cmd = [sys.executable, os.path.abspath(__file__), model, "--threads", str(args.threads), "--runs",
                       str(args.runs), "--min-seconds", str(args.min_seconds), "--batch", str(args.batch), "--json",
                       path, "--tree", label, "--quiet"]
                cmd += [a for _, x in sets for a in ("--set", x)]
                if args.reference and (args.reference == "all" or model in args.reference.split(",")):
                    cmd.append("--reference")
                t0 = time.monotonic()
                done = subprocess.run(cmd, env=tree_env(trees[tree], caches[tree]), capture_output=True, text=True,
                                      timeout=max(10.0, t_end - time.monotonic() + 60))
                print(f"{model} {label} round {rnd}: rc {done.returncode}, {time.monotonic() - t0:.1f} s", flush=True)
                if done.returncode:
                    print(done.stderr[-3000:], flush=True)
                    continue
                with open(path) as f:
                    results.append(json.load(f))
                with open(os.path.join(out, "table.md"), "w") as f:  # so far: a cut-off run keeps it
                    f.write(merged(results))
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="?", default="")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=10, help="runs per node at least")
    p.add_argument("--min-seconds", type=float, default=0.5,
                   help="more runs per node where the model's runs are short: as many as fill this much")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--reference", nargs="?", const="all", default="",
                   help="add the reference kernels (of every model, or of those named: mlp,transformer)")
    p.add_argument("--json")
    p.add_argument("--tree", default="new")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--base")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--budget", type=float, default=150.0)
    p.add_argument("--out")
    p.add_argument("--merge", nargs="+")
    p.add_argument("--set", action="append", help="module.ATTR=value of kernelkit_numba, set before measuring")
    p.add_argument("--variant", action="append",
                   help="with --base: LABEL:MODEL:module.ATTR=value;... this tree with settings, one more turn")
    args = p.parse_args(argv)
    for spec in args.set or []:
        import ast
        import importlib

        target, value = spec.split("=", 1)
        mod, attr = target.rsplit(".", 1)
        setattr(importlib.import_module(f"kernelkit_numba.{mod}"), attr, ast.literal_eval(value))
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")  # steady state: compiled in the warm-up runs
    if args.merge:
        results = []
        for path in args.merge:
            with open(path) as f:
                results.append(json.load(f))
        print(merged(results))
        return
    models = [m for m in args.models.split(",") if m]
    if args.base:
        results = alternate(models, args.base, args)
        text = merged(results) if results else "no results\n"
        print(text)
        if args.out:
            with open(os.path.join(args.out, "table.md"), "w") as f:
                f.write(text)
        return
    for model in models:
        ref = bool(args.reference) and (args.reference == "all" or model in args.reference.split(","))
        res = measure(model, args.threads, args.runs, args.batch, ref, args.min_seconds)
        res["tree"] = args.tree
        if args.json:
            with open(args.json if len(models) == 1 else f"{args.json}.{model}", "w") as f:
                json.dump(res, f)
        if not args.quiet:
            print(table([res]))


if __name__ == "__main__":
    main()

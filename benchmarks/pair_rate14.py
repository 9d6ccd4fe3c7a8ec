"""ResNet-50's 14x14 1x1 layers at two threads, alone (issue 11, session 17; docs/numba.md, "ResNet-50's 14x14 1x1
halves on the one-thread tiles"): a chain of its 14x14 bottleneck blocks without the 3x3 layer (``blocks`` times
1024 -> 256 + Relu, then 256 -> 1024 + the block's input + Relu, random weights: 2.1 MB a block, so each layer's
weights come from L3 as in the model, and each layer reads the input that the layer before it wrote on both cores),
in sessions run in turn in one process (nodes_ab2t.py's protocol: one run each a round, the order rotated, each
node's best run):

- ``numba1``: one thread (the cols tiles, 3 x 7 whole tiles, K chunk 128, prefetch 16);
- ``default`` and one two-thread session per ``LABEL=SPEC`` (nodes_ab.py's SPEC), every pair call traced
  (pairs.TRACE: the caller's own half, its wait, the helper's start and its half);
- ``LABEL seq`` for the default and the first variant: the helper held asleep, so the caller runs both halves in turn
  (pair_halves.py's ``seq``): seq / 1t above 1 is work the cut adds; own and helper against seq's halves what two
  cores side by side cost.

Per kind (summed over its nodes), ms and GFLOP/s (2 M K pixels over the node's best time), and for the traced
sessions each side's rate over its half (half the layer's FLOPs over the side's median own / helper time, over the
runs whose calls paired; a node that never paired is left out of those sums)::

    taskset -c 0,1 python benchmarks/pair_rate14.py [runs=20] [blocks=5] [LABEL=SPEC ...] [--no-seq] [--no-backoff]
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodes_ab import kernelkit, refuse_built_once, variant_session  # noqa: E402, I001 (sets the environment)
from nodes_ab2t import _Woken  # noqa: E402
from pair_halves import _Held, run_rounds  # noqa: E402

import numpy as np  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HW = 14


def chain(blocks: int, c: int = 1024, m: int = 256):
    """The model, its feed and node -> (kind, GFLOP)."""
    rng = np.random.default_rng(0)
    nodes, inits, kinds = [], [], {}
    x = "x0"
    for b in range(blocks):
        wa = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        wb = (rng.standard_normal((c, m, 1, 1)) / np.sqrt(m)).astype(np.float32)
        for name, w in ((f"wa{b}", wa), (f"wb{b}", wb)):
            inits.append(numpy_helper.from_array(w, name))
            inits.append(numpy_helper.from_array((rng.standard_normal(w.shape[0]) * 0.1).astype(np.float32),
                                                 name + "_b"))
        nodes += [helper.make_node("Conv", [x, f"wa{b}", f"wa{b}_b"], [f"p{b}"], kernel_shape=[1, 1], name=f"proj{b}"),
                  helper.make_node("Relu", [f"p{b}"], [f"a{b}"], name=f"relu_p{b}"),
                  helper.make_node("Conv", [f"a{b}", f"wb{b}", f"wb{b}_b"], [f"e{b}"], kernel_shape=[1, 1],
                                   name=f"exp{b}"),
                  helper.make_node("Add", [f"e{b}", x], [f"s{b}"], name=f"add{b}"),
                  helper.make_node("Relu", [f"s{b}"], [f"x{b + 1}"], name=f"relu_e{b}")]
        kinds[f"proj{b}"] = (f"1x1 @{HW} {c}->{m}", 2e-9 * m * c * HW * HW)
        kinds[f"exp{b}"] = (f"1x1 @{HW} {m}->{c} +Z", 2e-9 * m * c * HW * HW)
        x = f"x{b + 1}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x0", TensorProto.FLOAT,
                                                                             [1, c, HW, HW])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, HW, HW])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    proto.ir_version = 10
    feed = {"x0": np.maximum(rng.standard_normal((1, c, HW, HW)), 0).astype(np.float32)}
    return convert(proto.SerializeToString()), feed, kinds


def _node_of(step_names, kinds):
    for n in step_names:
        if n in kinds:
            return n
    return None


def main(argv: list[str]) -> int:
    seq = "--no-seq" not in argv
    if "--no-backoff" in argv:  # (nodes_ab2t.py's: neither the shard pool nor the pairs' helper backs off)
        from kernelkit_numba import shards
        from kernelkit_numba.kernels import pairs

        shards.POOL.backoff = False
        pairs.PairServer._back_off = lambda self, seconds=0.0: None
    argv = [a for a in argv if a not in ("--no-seq", "--no-backoff")]
    runs = int(argv[0]) if argv else 20
    blocks = int(argv[1]) if len(argv) > 1 else 5
    variants = [a.split("=", 1) for a in argv[2:]]
    refuse_built_once(variants, "pair_rate14.py")
    model, feed, kinds = chain(blocks)
    want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)[0]
    labels = ["numba1", "default"] + [v[0] for v in variants]
    sessions = [kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True),
                _Woken(kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True))]
    sessions += [_Woken(variant_session(model, feed, spec, 2)) for _, spec in variants]
    traced = set(range(1, len(sessions)))
    if seq:
        specs = [("default", "")] + variants[:1]  # (the default's halves in turn and the first variant's)
        for label, spec in specs:
            s = variant_session(model, feed, spec, 2) if spec else kernelkit.Session(
                model, vendors=["numba", "reference"], threads=2, profile=True)
            sessions.append(_Held(s))
            labels.append(f"{label} seq")
    for label, sess in zip(labels, sessions):
        got = sess.run(None, feed)[0]
        err = float(np.max(np.abs(got - want)) / max(1e-30, float(np.max(np.abs(want)))))
        print(f"{label}: max |out - reference| / max |reference| {err:.1e}")
    per, halves = run_rounds(sessions, feed, runs, traced)
    # node names in the profile: the plan's step names; map each to the Conv node of the chain
    step_node = {}
    for step in sessions[1].sess.plan.kernel_steps():
        n = _node_of([step.name, *step.outputs], kinds) or _node_of(
            [k for k in kinds if f"{k}" in step.name], kinds)
        if n is None and step.op == "Conv":
            out = step.outputs[0] if step.outputs else ""
            n = {f"p{b}": f"proj{b}" for b in range(blocks)}.get(out) or {f"e{b}": f"exp{b}" for b in
                                                                          range(blocks)}.get(out)
            if n is None and out.startswith(("s", "x")):  # (the Add fused: its output names the Conv)
                b = int(out[1:]) - (1 if out.startswith("x") else 0)
                n = f"exp{b}"
        if n is not None:
            step_node[step.name] = n
    groups: dict = {}
    for step_name, n in step_node.items():
        kind, gflop = kinds[n]
        g = groups.setdefault(kind, {"nodes": 0, "gflop": 0.0, "ms": [0.0] * len(sessions), "own": {}, "helper": {},
                                     "wait": {}, "paired": {}, "calls": {}})
        g["nodes"] += 1
        g["gflop"] += gflop
        for i, p in enumerate(per):
            g["ms"][i] += min(p.get(step_name, [np.inf]))
        for i in traced:
            rows = [r for r in halves[i].get(step_name, []) if r is not None]
            both = [r for r in rows if r[4] == r[5] > 0]  # (the runs whose calls all paired: the sides' medians)
            if both:
                for key, j in (("own", 0), ("wait", 1), ("helper", 3)):
                    g[key][i] = g[key].get(i, 0.0) + float(np.median([r[j] for r in both]))
                for key, j in (("paired", 4), ("calls", 5)):
                    g[key][i] = g[key].get(i, 0.0) + float(sum(r[j] for r in rows))
    print(f"\n## ResNet-50's 14x14 1x1 layers, {blocks} blocks, best of {runs} per node (ms; GFLOP/s)")
    print("| kind | nodes | " + " | ".join(labels) + " |")
    print("|---|---:|" + "---:|" * len(labels))
    for kind, g in groups.items():
        print(f"| {kind} | {g['nodes']} | " + " | ".join(f"{ms:.3f} ({g['gflop'] / ms * 1e3:.0f})"
                                                        for ms in g["ms"]) + " |")
    print("\n| kind | session | / numba1 | / default | own ms (GFLOP/s a side) | helper ms (GFLOP/s) | wait ms "
          "| paired / calls |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for kind, g in groups.items():
        ms = g["ms"]
        for i, label in enumerate(labels[1:], 1):
            row = f"| {kind} | {label} | {ms[i] / ms[0]:.3f} | {ms[i] / ms[1]:.3f} |"
            if i in g["own"]:
                half = g["gflop"] / 2 * 1e3
                row += (f" {g['own'][i]:.3f} ({half / g['own'][i]:.0f}) | {g['helper'][i]:.3f} "
                        f"({half / max(g['helper'][i], 1e-9):.0f}) | {g['wait'][i]:.3f} | "
                        f"{g['paired'][i]:.0f} / {g['calls'][i]:.0f} |")
            else:
                row += " | | | |"
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""ResNet-50's bottleneck blocks as their own small models, at one thread (issue 11, session 15,
docs/numba.md "ResNet-50's bottleneck blocks at one thread"): per stage (56, 28, 14, 7) a chain of
``--blocks`` identity blocks with ResNet-50's channels (1x1 C -> C/4 + Relu, 3x3 C/4 -> C/4 + Relu,
1x1 C/4 -> C + the block's input + Relu), each block its own weights. Per layer of the middle blocks
(the first block's input comes from the feed), each node's best time in the chain, numba's from
kernelkit's profiler and onnxruntime's from its own (``enable_profiling``: its NCHWc kernels, the
layout kept between the layers, the reorders at the chain's ends only), against the same layer as a
one-node model (Conv + bias (+ Add z) + Relu): numba's fused step and onnxruntime's Conv node
(without its ReorderInput / ReorderOutput, listed apart), hot (the same call again) and cold (64 MiB
written and the input read back before each run: the weights from memory, as in the model). The
question: does a layer lose in the block what it does not lose alone, and does onnxruntime's layer
gain in the block (its blocked layout between layers) over its one-node time? ``pack``: the rows
tiles' copy of the input into tile order (ftile.conv_tiles' ``pack``, where ftile.pack_rows takes
it), alone and hot, in ms: what a producer writing that order would save.

    taskset -c 0,1 python benchmarks/bench_r50_blocks.py [--runs 20] [--blocks 3] [--stages 56,28,14,7]
        [--set kernels.ftile.PACK_MIN_M=100000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from kernelkit.testing import assert_close  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

STAGES = {56: 256, 28: 512, 14: 1024, 7: 2048}  # map -> block channels (the middle ones a quarter)
ROLES = ("1x1 reduce", "3x3", "1x1 expand +Z")
_FLUSH = np.ones(16 << 20, np.float32)  # 64 MiB


def _conv(nodes, inits, rng, x, y, c, m, k):
    w = (rng.standard_normal((m, c, k, k)) * np.sqrt(2.0 / (c * k * k))).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    inits += [numpy_helper.from_array(w, y + ".w"), numpy_helper.from_array(b, y + ".b")]
    nodes.append(helper.make_node("Conv", [x, y + ".w", y + ".b"], [y], name=y, kernel_shape=[k, k],
                                  pads=[k // 2] * 4))


def block_chain(h: int, blocks: int, seed: int = 0):
    """(proto, feed, roles): ``blocks`` bottleneck identity blocks at an h x h map; roles maps each
    tensor a layer's fused step writes to (block, role)."""
    c = STAGES[h]
    m = c // 4
    rng = np.random.default_rng(seed)
    nodes, inits, roles = [], [], {}
    x = "x"
    for i in range(blocks):
        p = f"b{i}"
        _conv(nodes, inits, rng, x, p + ".c1", c, m, 1)
        nodes.append(helper.make_node("Relu", [p + ".c1"], [p + ".r1"], name=p + ".r1"))
        _conv(nodes, inits, rng, p + ".r1", p + ".c2", m, m, 3)
        nodes.append(helper.make_node("Relu", [p + ".c2"], [p + ".r2"], name=p + ".r2"))
        _conv(nodes, inits, rng, p + ".r2", p + ".c3", m, c, 1)
        if i == 0:  # a projection shortcut, as a stage's first block has: onnxruntime then keeps NCHWc
            _conv(nodes, inits, rng, x, p + ".sc", c, c, 1)  # through the residual Adds (fused in the convs)
            x = p + ".sc"
        nodes.append(helper.make_node("Add", [p + ".c3", x], [p + ".a"], name=p + ".a"))
        nodes.append(helper.make_node("Relu", [p + ".a"], [p + ".r3"], name=p + ".r3"))
        for j, t in enumerate(("c1", "c2", "c3")):
            roles[f"{p}.{t}"] = (i, ROLES[j])
        roles[p + ".r1"], roles[p + ".r2"] = (i, ROLES[0]), (i, ROLES[1])
        roles[p + ".a"] = roles[p + ".r3"] = (i, ROLES[2])
        x = p + ".r3"
    graph = helper.make_graph(nodes, f"r50_{h}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, h, h])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    feed = {"x": np.maximum(rng.standard_normal((1, c, h, h)), 0).astype(np.float32)}
    return proto, feed, roles


def one_layer(h: int, role: str, seed: int = 1):
    """The layer of ``role`` at an h x h map as a one-node model: Conv + bias (+ Add z) + Relu."""
    c = STAGES[h]
    cin, m, k = {ROLES[0]: (c, c // 4, 1), ROLES[1]: (c // 4, c // 4, 3), ROLES[2]: (c // 4, c, 1)}[role]
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    _conv(nodes, inits, rng, "x", "c", cin, m, k)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, h, h])]
    last = "c"
    if role == ROLES[2]:
        nodes.append(helper.make_node("Add", ["c", "z"], ["a"], name="a"))
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, m, h, h]))
        last = "a"
    nodes.append(helper.make_node("Relu", [last], ["y"], name="y"))
    graph = helper.make_graph(nodes, "layer", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                    [1, m, h, h])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    feed = {"x": np.maximum(rng.standard_normal((1, cin, h, h)), 0).astype(np.float32)}
    if role == ROLES[2]:
        feed["z"] = rng.standard_normal((1, m, h, h)).astype(np.float32)
    return proto, feed


def _cold(feed):
    np.add(_FLUSH, 1.0, out=_FLUSH)
    for v in feed.values():
        v.sum()


def numba_nodes(proto, feed, runs: int, cold: bool) -> tuple[list, dict]:
    """(steps [(name, outputs)], best ms per step name) of numba's one-thread session; cold: _cold first."""
    model = convert(proto.SerializeToString())
    sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True)
    want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)[0]
    assert_close(sess.run(None, feed)[0], want, "float32")
    for _ in range(3):
        sess.run(None, feed)
    sess.reset_profile()
    for _ in range(runs):
        if cold:
            _cold(feed)
        sess.run(None, feed)
    best: dict = {}
    for node, _start, secs, _tid in sess.profile_events():
        best[node] = min(best.get(node, np.inf), secs * 1e3)
    steps = [(s.name, list(s.outputs), s.op) for s in sess.plan.kernel_steps()]
    return steps, best


def ort_nodes(proto, feed, runs: int, cold: bool) -> list[tuple]:
    """[(name, op, best ms)] of onnxruntime's one-thread session, from its profiler (3 warm-up runs
    skipped); cold: _cold before every run."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feed)
    for _ in range(runs):
        if cold:
            _cold(feed)
        sess.run(None, feed)
    path = sess.end_profiling()
    with open(path) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    os.unlink(path)
    order, best, ops = [], {}, {}
    for e in events[len(events) * 3 // (3 + runs):]:
        name = e["name"][:-len("_kernel_time")]
        if name not in best:
            order.append(name)
            ops[name] = e["args"].get("op_name")
        best[name] = min(best.get(name, np.inf), e["dur"] / 1e3)
    return [(n, ops[n], best[n]) for n in order]


def whole_ms(proto, feed, reps: int) -> dict:
    """Best CPU ms of a whole run: numba 1t, onnxruntime 1t, the reference; calls interleaved."""
    import onnxruntime as ort

    model = convert(proto.SerializeToString())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    fns = {"numba": kernelkit.Session(model, vendors=["numba", "reference"], threads=1).run,
           "ORT": ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run,
           "reference": kernelkit.Session(model, vendors=["reference"]).run}
    best = dict.fromkeys(fns, np.inf)
    for f in fns.values():
        for _ in range(2):
            f(None, feed)
    for i in range(reps):
        names = list(fns)
        for name in names[i % 3:] + names[:i % 3]:
            t0 = time.process_time()
            fns[name](None, feed)
            best[name] = min(best[name], (time.process_time() - t0) * 1e3)
    return best


def _ort_role(name: str, roles: dict):
    base = name.replace("fused ", "")
    for suffix in ("_nchwc", "_token"):
        base = base.split(suffix)[0]
    return roles.get(base)


def pack_ms(h: int, role: str, reps: int) -> float | None:
    """The rows tiles' copy of the layer's input into tile order alone (hot), ms; None where ftile
    does not pack (pack_rows) or the layer is not a 1x1 on the rows tiles."""
    from kernelkit_numba.config import jit
    from kernelkit_numba.kernels import ftile

    if role == ROLES[1] or h <= 14:
        return None
    c = STAGES[h]
    k_n, m_n = (c, c // 4) if role == ROLES[0] else (c // 4, c)
    n_pix = h * h
    if not ftile.pack_rows(m_n, k_n, n_pix):
        return None
    kind = ftile.select() or 0
    nr = ftile.NR[kind]
    block, _, _, kc = ftile.plan(kind, m_n, k_n, n_pix, 1)

    @jit
    def copy(x, xp, k_n, n_pix, block, kc, nr):
        for p0 in range(0, n_pix, block):
            n = min(block, n_pix - p0)
            for k0 in range(0, k_n, kc):
                kk = min(kc, k_n - k0)
                for k in range(kk):
                    src = (k0 + k) * n_pix + p0
                    for t in range(0, n, nr):
                        d = t * kk + k * nr
                        for j in range(min(nr, n - t)):
                            xp[U(d + j)] = x[U(src + t + j)]  # as conv_tiles' driver indexes

    U = ftile.U
    x = np.random.default_rng(0).standard_normal(k_n * n_pix).astype(np.float32)
    xp = np.empty(block * kc + nr * kc, np.float32)
    best = np.inf
    for _ in range(reps + 2):
        t0 = time.perf_counter()
        copy(x, xp, k_n, n_pix, block, kc, nr)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def stage(h: int, blocks: int, runs: int) -> dict:
    proto, feed, roles = block_chain(h, blocks)
    steps, kk_best = numba_nodes(proto, feed, runs, False)
    kk_in: dict = {r: [] for r in ROLES}
    other = 0.0
    for name, outs, op in steps:
        hit = next((roles[o] for o in outs if o in roles), None)
        if hit is None or op != "Conv":
            other += kk_best.get(name, 0.0)
            continue
        if hit[0] > 0:
            kk_in[hit[1]].append(kk_best.get(name, 0.0))
    ort_in: dict = {r: [] for r in ROLES}
    ort_other = []
    for name, op, ms in ort_nodes(proto, feed, runs, False):
        hit = _ort_role(name, roles)
        if hit is not None and "Conv" in (op or ""):
            if hit[0] > 0:
                ort_in[hit[1]].append(ms)
        else:
            ort_other.append((name, op, round(ms, 3)))
    alone = {}
    for role in ROLES:
        lp, lf = one_layer(h, role)
        row = {}
        for cold in (False, True):
            lsteps, lbest = numba_nodes(lp, lf, runs, cold)
            conv = [lbest.get(n, 0.0) for n, _, op in lsteps if op == "Conv"]
            ox = ort_nodes(lp, lf, runs, cold)
            row["cold" if cold else "hot"] = {
                "numba": sum(conv), "ORT": sum(ms for _, op, ms in ox if "Conv" in (op or "")),
                "ORT reorders": sum(ms for _, op, ms in ox if "Reorder" in (op or ""))}
        alone[role] = row
    whole = whole_ms(proto, feed, max(5, runs // 2))
    return {"h": h, "blocks": blocks, "runs": runs, "numba_in": kk_in, "ort_in": ort_in, "alone": alone,
            "numba_other_ms": other, "ort_other": ort_other, "whole": whole,
            "pack": {r: pack_ms(h, r, runs) for r in ROLES}}


def table(results: list[dict]) -> str:
    med = statistics.median
    lines = ["| map | layer | numba in | numba hot | numba cold | ORT in | ORT hot | ORT cold | ORT reorders cold |"
             " numba in / ORT in | numba in / numba cold | ORT in / ORT cold | pack |",
             "|---|---|" + "---:|" * 11]
    for r in results:
        for role in ROLES:
            a = r["alone"][role]
            ni, oi = med(r["numba_in"][role]), med(r["ort_in"][role]) if r["ort_in"][role] else float("nan")
            pk = r["pack"][role]
            lines.append(f"| {r['h']} | {role} | {ni:.3f} | {a['hot']['numba']:.3f} | {a['cold']['numba']:.3f} | "
                         f"{oi:.3f} | {a['hot']['ORT']:.3f} | {a['cold']['ORT']:.3f} | "
                         f"{a['cold']['ORT reorders']:.3f} | {ni / oi:.2f} | {ni / a['cold']['numba']:.2f} | "
                         f"{oi / a['cold']['ORT']:.2f} | {'' if pk is None else f'{pk:.3f}'} |")
    lines += ["", "| map | blocks | numba ms | ORT ms | reference ms | numba / ORT | reference / numba |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        w = r["whole"]
        lines.append(f"| {r['h']} | {r['blocks']} | {w['numba']:.2f} | {w['ORT']:.2f} | {w['reference']:.2f} | "
                     f"{w['numba'] / w['ORT']:.2f} | {w['reference'] / w['numba']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--stages", default="56,28,14,7")
    ap.add_argument("--set", default="", help="kernels.X.Y=V[;...]: module attributes of kernelkit_numba first")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.set:
        from test_bench_numba import apply_bench_set

        apply_bench_set(args.set.replace(";", ","))
    results = []
    for h in [int(s) for s in args.stages.split(",") if s]:
        results.append(stage(h, args.blocks, args.runs))
        print(f"stage {h} done", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"Bottleneck blocks at one thread, best of {args.runs} runs per node (median over the middle blocks), "
          "ms; 'in': in the chain, 'hot'/'cold': the layer alone")
    print(table(results))
    for r in results:
        print(f"{r['h']}: ORT's other nodes {r['ort_other']}; numba's other steps {r['numba_other_ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

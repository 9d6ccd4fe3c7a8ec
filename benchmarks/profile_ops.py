"""Per-node profile of one benchmark model: kernelkit (numba, or the reference) and onnxruntime at
the same thread count, side by side, each node's best call over the runs (ms), matched by op and
input shapes (convolutions by input and weight shape, in execution order). Shows which
convolution shapes lose and by how much (docs/numba.md, "Convolutions").

    python benchmarks/profile_ops.py resnet18 [threads=1] [runs=10] [vendor=numba] [batch=1]
"""
from __future__ import annotations

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# steady state: numba kernels compile in the warm-up calls (not in the background while timed)
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
from _timing import best_node_ms, ort_best_nodes  # noqa: E402
from bench_e2e_interleaved import batched  # noqa: E402


def _key(op, shapes):
    return (op, tuple(tuple(s) for s in shapes[:2] if s is not None))


def kernelkit_profile(model, feed, vendor: str, threads: int, runs: int) -> list[tuple]:
    vendors = [vendor, "reference"] if vendor != "reference" else ["reference"]
    sess = kernelkit.Session(model, vendors=vendors, threads=threads, profile=True)
    best = best_node_ms(sess, feed, runs)
    rows = []
    for step in sess.plan.kernel_steps():
        specs = [sess.graph.spec(i) if i else None for i in step.inputs]
        shapes = [s.shape if s is not None else None for s in specs]
        extra = ""
        if step.op == "Conv":
            a = dict(getattr(step.node, "attrs", None) or {})
            strides = "x".join(map(str, a.get("strides") or (1, 1)))
            z = " +Z" if len(step.inputs) > 3 and step.inputs[3] else ""
            act = f" {a['activation']}" if a.get("activation") else ""
            extra = f"stride {strides} group {a.get('group', 1)}{z}{act}"
        rows.append((_key(step.op, shapes), step.name, best.get(step.name, 0.0), step.key.vendor, extra))
    return rows


def ort_profile(proto, feed, threads: int, runs: int) -> list[tuple]:
    return [(_key(n["op"], n["shapes"]), n["name"], n["ms"]) for n in ort_best_nodes(proto, feed, threads, runs)]


def main(argv):
    name = argv[0]
    threads = int(argv[1]) if len(argv) > 1 else 1
    runs = int(argv[2]) if len(argv) > 2 else 10
    vendor = argv[3] if len(argv) > 3 else "numba"
    batch = int(argv[4]) if len(argv) > 4 else 1
    proto, model, feed = batched(name, batch)
    kk = kernelkit_profile(model, feed, vendor, threads, runs)
    ox = ort_profile(proto, feed, threads, runs)
    pool = collections.defaultdict(list)
    for key, _node, ms in ox:
        pool[key].append(ms)
    print(f"{name} batch {batch}, {threads} thread(s), best of {runs} runs per node (ms); {vendor} vs onnxruntime")
    print(f"{'node':28s} {'op':18s} {'input, weight':42s} {'ours':>7s} {'ort':>7s} {'ratio':>6s}  notes")
    tot_k = tot_o = 0.0
    by_op = collections.defaultdict(lambda: [0.0, 0.0])
    for key, node, ms, vend, extra in kk:
        o = pool[key].pop(0) if pool.get(key) else float("nan")
        tot_k += ms
        by_op[key[0]][0] += ms
        if o == o:
            tot_o += o
            by_op[key[0]][1] += o
        if ms < 0.02 and not o > 0.02:
            continue
        shapes = " ".join("x".join(map(str, s)) for s in key[1])
        ratio = ms / o if o == o and o else float("nan")
        print(f"{node[:28]:28s} {key[0][:18]:18s} {shapes[:42]:42s} {ms:7.3f} {o:7.3f} {ratio:6.2f}  {vend} {extra}")
    left = sum(sum(v) for v in pool.values())
    print(f"{'total':28s} {'':18s} {'':42s} {tot_k:7.2f} {tot_o + left:7.2f} {tot_k / (tot_o + left):6.2f}"
          f"  (ORT nodes not matched: {left:.2f} ms)")
    for op, (k, o) in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        print(f"  {op:18s} {k:8.2f} {o:8.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

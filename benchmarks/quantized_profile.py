"""Per-op profile of one quantized model (as benchmarks/quantized.py makes it): kernelkit numba int8
against onnxruntime int8 at the same thread count, time summed by op type (best call of each node
over the runs, ms), then kernelkit's slowest nodes. The two graphs fuse differently (onnxruntime's
QDQ transformer and NHWC rewrite, kernelkit's fuse_qdq), so ops are compared by type, not node by node.

    OPENBLAS_NUM_THREADS=1 python benchmarks/quantized_profile.py mobilenet_v2 [--threads 1] [--runs 10]
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from _timing import best_node_ms  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_quantized", Path(__file__).parent / "quantized.py")
qbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qbench)


def kernelkit_profile(model, feed, threads: int, runs: int):
    sess = kernelkit.Session(model, threads=threads, profile=True, options={"numba_start": "eager"})
    best = best_node_ms(sess, feed, runs)
    rows = []
    for step in sess.plan.kernel_steps():
        shapes = [sess.graph.spec(i).shape if i else None for i in step.inputs]
        attrs = dict(getattr(step.node, "attrs", None) or {})
        op = step.op
        if op in ("QLinearConv", "ConvInteger"):  # split the convolutions by kind
            w = shapes[3] if len(shapes) > 3 and op == "QLinearConv" else shapes[1] if len(shapes) > 1 else None
            group = int(attrs.get("group", 1))
            kind = "depthwise" if group > 1 else "1x1" if w is not None and tuple(w[2:]) == (1, 1) else "kxk"
            op = f"{op} {kind}"
        rows.append((op, step.name, best.get(step.name, 0.0), step.key.vendor, shapes[:2]))
    return rows


def ort_profile(path, feed, threads: int, runs: int):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(3 + runs):
        sess.run(None, feed)
    with open(sess.end_profiling()) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    best, ops = {}, {}
    for e in events[len(events) * 3 // (3 + runs):]:
        name = e["name"][:-len("_kernel_time")]
        ops[name] = e["args"].get("op_name")
        best[name] = min(best.get(name, np.inf), e["dur"] / 1e3)
    return [(ops[n], n, ms) for n, ms in best.items()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=sorted(qbench.MODES))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--small", action="store_true")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    name = args.model
    folder = Path(tempfile.mkdtemp())
    proto, path = qbench.quantized_model(name, args.small, folder, reduce_range=not qbench._has_vnni())
    feed = {"x": qbench._inputs(proto, 1, 0)}
    kk = kernelkit_profile(convert(path), feed, args.threads, args.runs)
    ox = ort_profile(path, feed, args.threads, args.runs)
    from kernelkit_numba.kernels import qtile

    variant = qtile.select(True)
    print(f"{name}: int8, batch 1, {args.threads} thread(s), best call per node over {args.runs} runs (ms); "
          f"int8 micro-kernel {variant.name if variant else 'off'} (for 7-bit-safe weights)")
    by_k, by_o = collections.defaultdict(float), collections.defaultdict(float)
    for op, _n, ms, _v, _s in kk:
        by_k[op] += ms
    for op, _n, ms in ox:
        by_o[op] += ms
    tk, to = sum(by_k.values()), sum(by_o.values())
    print("| kernelkit op | ms | share | | onnxruntime op | ms | share |\n|---|---:|---:|---|---|---:|---:|")
    left, right = sorted(by_k.items(), key=lambda kv: -kv[1]), sorted(by_o.items(), key=lambda kv: -kv[1])
    for i in range(max(len(left), len(right))):
        a = f"{left[i][0]} | {left[i][1]:.3f} | {left[i][1] / tk:.0%}" if i < len(left) else " | |"
        b = f"{right[i][0]} | {right[i][1]:.3f} | {right[i][1] / to:.0%}" if i < len(right) else " | |"
        print(f"| {a} | | {b} |")
    print(f"| total | {tk:.3f} | | | total | {to:.3f} | |  (kk / ort {tk / to:.2f}x)")
    print(f"\nkernelkit's {args.top} slowest nodes:")
    for op, node, ms, vendor, shapes in sorted(kk, key=lambda r: -r[2])[:args.top]:
        dims = " ".join("x".join(map(str, s)) for s in shapes if s is not None)
        print(f"  {ms:7.3f}  {op:22s} {dims:36s} {vendor} {node[:40]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

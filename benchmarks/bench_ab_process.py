"""Two source trees of kernelkit (old, new) on one model, each runtime in its own process as
``test_bench_numba.process_table`` runs them (block medians: 3 blocks of ``blocks`` calls after
warm-up, the best block kept): onnxruntime once per thread count, then old and new processes
alternating. Each result is appended to ``out`` as a JSON line when it comes (a device call that runs out
of time keeps what it has), and a summary (median over rounds, new / old, numba / ORT) ends it.

    python benchmarks/bench_ab_process.py OLD_ROOT NEW_ROOT OUT [model=mobilenetv2] [rounds=4]
        [runtimes=numba1,numba] [blocks=15]

OLD_ROOT and NEW_ROOT are repository checkouts; a child process puts their ``packages/*/src`` first
on PYTHONPATH (the installed kernelkit's entry points then load that tree's modules). The first
process of each tree (its Numba cache cold) is a warm-up and not counted. Pin it: ``taskset -c 0,1``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _child_code() -> str:
    from test_bench_numba import _CHILD

    return _CHILD


def run_one(root: str, model: str, runtime: str, blocks: int) -> dict:
    env = dict(os.environ)
    srcs = [os.path.join(root, "packages", p, "src") for p in ("core", "cpu_numba", "converters")]
    env["PYTHONPATH"] = os.pathsep.join(srcs + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("KERNELKIT_NUMBA_START", "eager")
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _child_code(), model, runtime, str(blocks), HERE], env=env,
                         capture_output=True, text=True, timeout=600)
    if res.returncode:
        return {"error": res.returncode, "stderr": res.stderr[-2000:]}
    row = json.loads(res.stdout.strip().splitlines()[-1])
    row["process_s"] = round(time.perf_counter() - t0, 2)
    return row


def main(argv) -> None:
    old, new, out = argv[0], argv[1], argv[2]
    model = argv[3] if len(argv) > 3 else "mobilenetv2"
    rounds = int(argv[4]) if len(argv) > 4 else 4
    runtimes = argv[5].split(",") if len(argv) > 5 else ["numba1", "numba"]
    blocks = int(argv[6]) if len(argv) > 6 else 15
    results: dict = {}

    def record(tree, runtime, row, counted=True):
        row.update(tree=tree, counted=counted)
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        if counted and "median_ms" in row:
            results.setdefault((tree, runtime), []).append(row["median_ms"])

    for tree, root in (("old", old), ("new", new)):  # cold Numba caches: compile, not counted
        record(tree, runtimes[0], run_one(root, model, runtimes[0], 3), counted=False)
    for runtime in ("ort1", "ort2"):  # before the rounds: a call that runs out of time still has them
        record("new", runtime, run_one(new, model, runtime, blocks))
    for _ in range(rounds):
        for runtime in runtimes:
            for tree, root in (("old", old), ("new", new)):
                record(tree, runtime, run_one(root, model, runtime, blocks))
    lines = []
    for runtime in runtimes:
        o, n = results.get(("old", runtime), []), results.get(("new", runtime), [])
        if o and n:
            mo, mn = statistics.median(o), statistics.median(n)
            ort = results.get(("new", "ort1" if runtime == "numba1" else "ort2"), [float("nan")])[0]
            lines.append(f"{model} {runtime}: old {mo:.2f} new {mn:.2f} (medians of {len(o)}/{len(n)} processes: "
                         f"old {[round(v, 2) for v in o]} new {[round(v, 2) for v in n]}) new/old {mn / mo:.3f}; "
                         f"ORT {ort:.2f}: old/ORT {mo / ort:.2f} new/ORT {mn / ort:.2f}")
    with open(out, "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

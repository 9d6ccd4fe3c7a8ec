"""Variants of the numba default side by side with numba's 1-thread figure, quiet or under load (a
busy loop pinned to the first CPU of this process's affinity), each run in its own process as in
``test_bench_numba.process_table`` (its child: 2 warm-up runs, 3 blocks of ``rounds``, best block
median), the configurations taking turns so that the host's drift hits all of them.

    taskset -c 0,1 python benchmarks/loaded_ab.py transformer,resnet18 --mode loaded --repeats 3 \\
        --variant old=shards.ShardPool.FREE_CORES=0
    taskset -c 0,1 python benchmarks/loaded_ab.py resnet18 --mode quiet --variant off=kernels.winograd.TILES=0 \
        --variant1 off1=kernels.winograd.TILES=0 --budget 100   # 1-thread variants too; no repeat past 100 s

Prints a JSON line per process (with the pool's counters) and, per model, each configuration's
median over the repeats and default / 1t per repeat."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_bench_numba import _CHILD  # noqa: E402


def child(name: str, runtime: str, rounds: int, bench_set: str) -> dict:
    env = dict(os.environ, KERNELKIT_BENCH_SET=bench_set)
    env.setdefault("KERNELKIT_NUMBA_START", "eager")
    res = subprocess.run([sys.executable, "-c", _CHILD, name, runtime, str(rounds), HERE], stdout=subprocess.PIPE,
                         text=True, timeout=900, env=env)
    if res.returncode:
        return {"model": name, "runtime": runtime, "error": res.returncode}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("--mode", choices=["quiet", "loaded"], default="loaded")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[], help="LABEL=module.ATTR=value,... (a default variant)")
    ap.add_argument("--variant1", action="append", default=[], help="LABEL=module.ATTR=value,... (a 1-thread variant)")
    ap.add_argument("--ort", action="store_true", help="onnxruntime at two threads too (config ort2t)")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds: no repeat started after this (0: none)")
    args = ap.parse_args()
    configs = [("1t", "numba1", ""), ("new", "numba", "")]
    for flag, runtime in ((args.variant, "numba"), (args.variant1, "numba1")):
        for v in flag:
            label, spec = v.split("=", 1)
            configs.append((label, runtime, spec))
    if args.ort:
        configs.append(("ort2t", "ort2", ""))
    start = time.perf_counter()
    busy = None
    if args.mode == "loaded":
        cpu = min(os.sched_getaffinity(0))
        spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
        busy = subprocess.Popen([sys.executable, "-c", spin])
        time.sleep(0.5)
    got: dict = {}
    try:
        for rep in range(args.repeats):
            if rep and args.budget and time.perf_counter() - start > args.budget * rep / (rep + 1):
                break  # another repeat would not end within the budget (repeats take about as long)
            for name in args.models.split(","):
                order = configs if rep % 2 == 0 else configs[::-1]
                for label, runtime, spec in order:
                    row = child(name, runtime, args.rounds, spec)
                    row.update(config=label, repeat=rep, mode=args.mode)
                    print(json.dumps(row), flush=True)
                    got.setdefault((name, label), []).append(row.get("median_ms", float("nan")))
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    for name in args.models.split(","):
        if (name, "1t") not in got:
            continue
        one = got[(name, "1t")]
        line = [f"{name} ({args.mode})"]
        for label, _, _ in configs:
            ms = got[(name, label)]
            ratios = [m / o for m, o in zip(ms, one)]
            line.append(f"{label} {np.median(ms):.2f} ms" + ("" if label == "1t" else
                        " (/1t " + " ".join(f"{r:.2f}" for r in ratios) + f", median {np.median(ratios):.2f})"))
        print("; ".join(line))


if __name__ == "__main__":
    main()

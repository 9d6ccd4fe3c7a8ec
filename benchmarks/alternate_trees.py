"""Two source trees (a base and this one) timed in alternating processes, quiet and loaded
(docs/numba.md, "Two threads on the CNNs (issue 11, session 8)"): each (tree, runtime) in its own
process, as ``test_bench_numba.py``'s process table does (its child: 2 warm-up runs, 3 blocks of
``--rounds`` calls, the best block median), the configurations taking turns within each round and
the rounds alternating quiet and loaded (a busy loop pinned to ``--busy-cpu`` while loaded), so
that the host's drift hits every configuration alike::

    python benchmarks/alternate_trees.py --base DIR [--models resnet18,mobilenetv2] [--rounds 5]
        [--repeats 2] [--cpus 0,1] [--busy-cpu 1] [--modes quiet,loaded] [--budget 250] [--out F.jsonl]
        [--variant MODEL:module.ATTR=value,...] [--warm-cpus 2,3,4,5,...]

Configurations (``--configs``): ``base numba1`` (1 thread), ``base numba`` and ``new numba``
(``Session()``: every CPU of the affinity), and any other (tree, runtime), e.g. ``base:ort2``. Each
result is printed (and appended to ``--out``) as it comes; the summary gives per model and mode the
median over the repeats and the ratios default / 1t, new / base and default / ORT 2t.
No process starts after ``--budget`` seconds.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_RUN = ("import sys; sys.path.insert(0, sys.argv[4]); import test_bench_numba as t; exec(t._CHILD)")


def tree_env(tree: str, cache: str) -> dict:
    src = [os.path.join(tree, "packages", p, "src") for p in ("core", "cpu_numba", "converters")]
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, KERNELKIT_NUMBA_START="eager", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(src + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return env


def child(tree: str, cache: str, model: str, runtime: str, rounds: int, cpus: str, timeout: float,
          bench_set: str = "") -> dict:
    env = tree_env(tree, cache)
    env["KERNELKIT_BENCH_SET"] = bench_set
    cmd = ["taskset", "-c", cpus, sys.executable, "-c", _RUN, model, runtime, str(rounds),
           os.path.join(tree, "benchmarks")]
    res = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True,
                         timeout=timeout)
    if res.returncode:
        return {"error": res.returncode, "stderr": res.stderr[-500:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def warm(trees: dict, caches: dict, models, cpus) -> None:
    """Every (tree, model) at 1 thread and the default, one run each, all at once on CPU pairs."""
    import concurrent.futures

    jobs = [(t, m) for t in trees for m in models]
    pairs = [",".join(cpus[i:i + 2]) for i in range(0, len(cpus) - 1, 2)]

    def one(k):
        tree, model = jobs[k]
        for runtime in ("numba1", "numba"):
            child(trees[tree], caches[tree], model, runtime, 1, pairs[k % len(pairs)], 600)

    with concurrent.futures.ThreadPoolExecutor(len(pairs)) as ex:
        list(ex.map(one, range(len(jobs))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", default=os.path.dirname(HERE))
    ap.add_argument("--models", default="resnet18,resnet50,mobilenetv2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--busy-cpu", type=int, default=1)
    ap.add_argument("--modes", default="quiet,loaded")
    ap.add_argument("--budget", type=float, default=250.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--variant", default="", help="MODEL:module.ATTR=value,...: one more configuration, this "
                    "tree's default with those constants (KERNELKIT_BENCH_SET), quiet only, for that model")
    ap.add_argument("--configs", default="base:numba1,base:numba,new:numba",
                    help="TREE:RUNTIME,... in turn (runtimes as test_bench_numba's children take them: numba1, "
                    "numba (the default), ort2, ...)")
    ap.add_argument("--warm-cpus", default="", help="fill both trees' Numba caches first, one process per "
                    "(tree, model) at once on these CPU pairs (e.g. 2,3,4,5,...; not timed)")
    args = ap.parse_args()
    start = time.monotonic()
    trees = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    caches = {k: f"/tmp/kk_alt_nc_{k}" for k in trees}
    configs = [tuple(c.split(":", 1)) for c in args.configs.split(",")]
    var_model, _, var_set = args.variant.partition(":")
    if args.warm_cpus:
        warm(trees, caches, args.models.split(","), args.warm_cpus.split(","))
        print(json.dumps({"warm_s": round(time.monotonic() - start, 1)}), flush=True)
    results = collections.defaultdict(list)
    out = open(args.out, "a") if args.out else None
    for rep in range(args.repeats):
        for mode in args.modes.split(","):
            busy = None
            if mode == "loaded":
                busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"],
                                        preexec_fn=lambda: os.sched_setaffinity(0, {args.busy_cpu}))
                time.sleep(0.3)
            try:
                for model in args.models.split(","):
                    todo = configs + ([("new", "numba", var_set)] if mode == "quiet" and model == var_model else [])
                    order = todo if rep % 2 == 0 else todo[::-1]
                    for tree, runtime, *bench_set in order:
                        left = args.budget - (time.monotonic() - start)
                        if left < 5:
                            break
                        row = child(trees[tree], caches[tree], model, runtime, args.rounds, args.cpus, left + 60,
                                    *bench_set)
                        name = f"{tree} {runtime}" + (f" {bench_set[0]}" if bench_set else "")
                        row.update(tree=tree, config=name, mode=mode, repeat=rep, model=model,
                                   at_s=round(time.monotonic() - start, 1))
                        line = json.dumps(row)
                        print(line, flush=True)
                        if out:
                            out.write(line + "\n")
                            out.flush()
                        if "median_ms" in row:
                            results[(model, mode, row["config"])].append(row["median_ms"])
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
    print(summary(results, args.models.split(","), args.modes.split(",")))
    for (model, mode, config), v in sorted(results.items()):
        print(f"{model} {mode} {config}: " + " ".join(f"{x:.2f}" for x in v))


def summary(results: dict, models, modes) -> str:
    lines = ["| model | mode | base 1t | base default | new default | ORT 2t | base default / 1t | new default / 1t | "
             "new / base (default) | base / ORT 2t | new / ORT 2t | repeats |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model in models:
        for mode in modes:
            med = {c: statistics.median(v) for (m, md, c), v in results.items() if m == model and md == mode}
            if not med:
                continue
            one, base, new = (med.get(c, float("nan")) for c in ("base numba1", "base numba", "new numba"))
            ort = med.get("base ort2", med.get("new ort2", float("nan")))
            n = min(len(v) for (m, md, c), v in results.items() if m == model and md == mode)
            lines.append(f"| {model} | {mode} | {one:.2f} | {base:.2f} | {new:.2f} | {ort:.2f} | {base / one:.2f} | "
                         f"{new / one:.2f} | {new / base:.2f} | {base / ort:.2f} | {new / ort:.2f} | {n} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

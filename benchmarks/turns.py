"""Issue 11's process table, taken in turns: every runtime of a model in its own live process, the
processes running short blocks one at a time, round after round, and each ratio taken within a round.

The Xeon's speed drifts by 1.5x over seconds (session 10: numba's 1-thread MLP ran 1.96 ms in one
process and 3.42 ms in the next, MobileNetV2 7.1 against 11.5 ms), so the one-process-per-cell table
of ``test_bench_numba.py`` compares runtimes that ran on different hosts, in effect. Here each runtime
still has a process of its own (its own heap, threads and BLAS), built and warmed once; then the parent
asks each in turn for a block of calls (``--turn-s`` seconds' worth, after ``--settle`` untimed calls
that warm the caches the other processes evicted, ``--gap-s`` after the last block ended). Only one
process runs at a time: the others wait on a pipe (the shard pool's workers sleep after their idle
spin). A round is one block of each runtime,
in a rotated order; the ratios of the table are medians over rounds of the ratios within each round,
so that a drift of the host moves both sides of a ratio alike.

    taskset -c 0,1 python benchmarks/turns.py resnet18,mobilenetv2,transformer,mlp [--rounds 9]
        [--mode quiet,loaded] [--runtimes numba1,numba,reference1,ort1,ort2] [--json OUT.jsonl]
    python benchmarks/turns.py --from-json OUT.jsonl [MORE.jsonl ...] [--blocks pair_stalls,backoffs]

``--variant LABEL=SPEC`` adds the default session with other settings as one more runtime, e.g.
``--variant notiles=kernels.winograd.TILES=0 --variant nopair=KERNELKIT_F32_PAIR=off`` (SPEC:
``;``-separated ``NAME=VALUE`` environment variables and ``module.ATTR=VALUE`` kernelkit_numba
constants), with its ratios to the default and to onnxruntime 2t. ``--variant1 LABEL=SPEC`` adds the
one-thread session (``numba1``) with SPEC's settings, with its ratios to numba 1t and onnxruntime 1t
and the reference's ratio to it.

``--from-json FILE [FILE ...]``: no run; the tables (and each numba runtime's pool counters) from the JSON
lines that runs wrote with ``--json``, the same medians, ratios and ranges over rounds as the live run
printed, so that a run cut by a deadline still gives its table (of the rounds it finished: a ratio takes the
rounds that hold both its runtimes). A variant's spec comes from its lines (older lines without it: from
``--variant``/``--variant1`` as given to the run, else the label alone); ``--blocks KEY,...`` adds each
block's pool counters of those names.

``--probe``: each process times a fixed workload (a 1 MiB float32 array scaled 20 times, best of 5) just before
each block's settling calls and writes it with the block (``probe_ms``); under the table, each runtime's probe times
and each ratio over the rounds whose two blocks' probes agree within 10 %. The Xeon runs at two speeds for
seconds at a time (session 15's call L3: numba 1t's and onnxruntime 1t's MobileNetV2 blocks each at ~7.5 or
~10.5 ms, whatever their CPU), and a ratio of blocks that ran at different speeds measures the host.

``loaded``: a busy loop pinned to the first CPU of this process's affinity for the whole model. Each
numba process reports its shard pool's counters per block (back-offs, preempted jobs); each process
checks its output against onnxruntime at one thread (``MODEL_COSINE``) before timing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIMES = ("numba1", "numba", "reference1", "ort1", "ort2")
LABELS = {"numba1": "numba 1t", "numba": "numba default", "reference1": "reference 1t", "ort1": "ORT 1t",
          "ort2": "ORT 2t", "numbanp": "numba default, no conv pairs"}  # numbanp: KERNELKIT_F32_PAIR=off
# (label, numerator, denominator): issue 11's ratios
RATIOS = (("1t / ORT 1t", "numba1", "ort1"), ("default / ORT 2t", "numba", "ort2"),
          ("reference / numba 1t", "reference1", "numba1"), ("default / 1t", "numba", "numba1"),
          ("no pairs / ORT 2t", "numbanp", "ort2"), ("default / no pairs", "numba", "numbanp"))

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[3])
# a --variant: the default session with these settings (NAME=VALUE: an environment variable, in this process's
# environment from its start (Child); module.ATTR=VALUE: a kernelkit_numba constant, test_bench_numba.apply_bench_set)
variant = sys.argv[4] if len(sys.argv) > 4 else ""
env_items = [i for i in variant.split(";") if i and "." not in i.split("=")[0]]
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import numpy as np
from test_bench_numba import apply_bench_set, kernelkit_session, model_case, ort_session
import kernelkit
from kernelkit.testing import MODEL_COSINE, cosine
name, runtime = sys.argv[1], sys.argv[2]
apply_bench_set()
proto, model, feed, gflop = model_case(name)
if runtime == "reference1":
    from threadpoolctl import threadpool_limits
    threadpool_limits(1, user_api="blas")
    sess = kernelkit.Session(model, vendors=["reference"], fallback=False)
elif runtime == "numbanp":  # the default without the conv pairs (kernels/cpair.py)
    os.environ["KERNELKIT_F32_PAIR"] = "off"
    sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False)
elif runtime == "numba" or variant:
    if variant:
        apply_bench_set(",".join(i for i in variant.split(";") if i and i not in env_items))
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else None  # a --variant1: one thread
    sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=threads)
elif runtime.startswith("numba"):
    sess = kernelkit_session(model, runtime)
else:
    sess = ort_session(proto, int(runtime[3:]))
out = sess.run(None, feed)[0]
for _ in range(2):
    sess.run(None, feed)
ok = bool(cosine(out, ort_session(proto, 1).run(None, feed)[0]) >= MODEL_COSINE)
pool = sys.modules["kernelkit_numba.shards"].POOL if "kernelkit_numba.shards" in sys.modules else None
cpair = sys.modules.get("kernelkit_numba.kernels.cpair")  # the conv pairs' helper counters, as pair_*


def pairs():
    return {f"pair_{k}": v for k, v in cpair.server().stats.items()} if cpair and cpair.fpair._server else {}


# KERNELKIT_TURNS_TRACE=1: each block's pair halves, CPUs' steal and threads (benchmarks/turns_trace.py)
tracer = None
if os.environ.get("KERNELKIT_TURNS_TRACE") == "1":
    from turns_trace import BlockTrace, getcpu
    tracer = BlockTrace()
# --probe: the host's speed at each block, _timing.probe_ms (the same work in every process, whatever the runtime)
# timed just before its settling calls
from _timing import PROBE_FLOATS, probe_ms
probe_buf = np.ones(PROBE_FLOATS, np.float32) if os.environ.get("KERNELKIT_TURNS_PROBE") == "1" else None


t0 = time.perf_counter()
for _ in range(3):
    sess.run(None, feed)
print(json.dumps({"ready": True, "cosine_ok": ok, "call_ms": (time.perf_counter() - t0) / 3 * 1e3}), flush=True)
for line in sys.stdin:
    calls, settle = map(int, line.split())
    if calls <= 0:
        break
    before = {**(dict(pool.stats) if pool else {}), **pairs()}
    probe = probe_ms(probe_buf) if probe_buf is not None else None  # before the settling calls: they re-warm the caches
    for _ in range(settle):
        sess.run(None, feed)
    ms = []
    if tracer:
        tracer.start()
    runs = []  # traced: per call its ms, the pair calls paired, alone (missed) and the wakes in it, whether the
    # pool was backed off at its start, the caller's CPU at its end
    for _ in range(calls):
        if tracer:
            p0 = pairs()
            off = bool(pool and pool._serial_until > time.perf_counter())
        t0 = time.perf_counter(); sess.run(None, feed); ms.append((time.perf_counter() - t0) * 1e3)
        if tracer:
            p1 = pairs()
            runs.append([round(ms[-1], 2), *(p1.get(k, 0) - p0.get(k, 0) for k in ("pair_paired", "pair_alone",
                                                                                  "pair_wakes")), int(off), getcpu()])
    trace = tracer.stop(calls) if tracer else None
    if tracer:
        trace["runs"] = runs
    after = {**(dict(pool.stats) if pool else {}), **pairs()}
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    row = {"median_ms": float(np.median(ms)), "best_ms": min(ms), "pool": delta}
    if probe is not None:
        row["probe_ms"] = round(probe, 4)
    if trace is not None:
        row["trace"] = trace
    print(json.dumps(row), flush=True)
"""


class Child:
    """One runtime's live process: built and warmed at start, then a block of calls per ``block``."""

    def __init__(self, model: str, runtime: str, variant: str = "", threads: int | None = None):
        self.runtime = runtime
        extra = [str(threads)] if threads else []
        # (a variant's environment variables in the process's own environment from its start too: those read before
        # Python runs, such as GLIBC_TUNABLES)
        env = dict(os.environ, **dict(i.split("=", 1) for i in variant.split(";") if i and "." not in i.split("=")[0]))
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, model, runtime, HERE, variant, *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self._reply()

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.runtime}: the child process ended (exit {self.proc.wait()})")
        return json.loads(line)

    def block(self, calls: int, settle: int) -> dict:
        self.proc.stdin.write(f"{calls} {settle}\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("0 0\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def busy_loop() -> subprocess.Popen:
    cpu = min(os.sched_getaffinity(0))
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    proc = subprocess.Popen([sys.executable, "-c", spin])
    time.sleep(0.5)
    return proc


def take_turns(model: str, runtimes, rounds: int, turn_s: float, settle: int, loaded: bool, sink,
               gap_s: float = 0.05) -> dict:
    """Rounds of one block per runtime; returns {runtime: [block medians]} and the per-round ratios."""
    busy = busy_loop() if loaded else None
    children = []
    try:
        for runtime in runtimes:  # built one after another: no process compiles beside a timed one
            children.append(Child(model, runtime, VARIANTS.get(runtime, ""), VARIANT_THREADS.get(runtime)))
        def per_block(ms: float) -> int:
            return max(3, min(400, round(turn_s * 1e3 / max(ms, 1e-3))))

        # from the ready calls, then from each block's median: a first call that compiled or woke a pool must
        # not leave a runtime at 3 calls a block for every round (session 13's J2: MobileNetV2's default)
        calls = {c.runtime: per_block(c.ready["call_ms"]) for c in children}
        rows = []
        for rnd in range(rounds):
            shift = rnd % len(children)
            order = children[shift:] + children[:shift]
            if rnd % 2:
                order = order[::-1]
            for child in order:
                time.sleep(gap_s)  # the last process's threads end their idle spin before the next block
                n_calls = calls[child.runtime]
                row = {"model": model, "runtime": child.runtime, "round": rnd, "load": "loaded" if loaded else "quiet",
                       "calls": n_calls, **child.block(n_calls, settle)}
                if child.runtime in VARIANTS:  # what --from-json labels it with
                    row.update(spec=VARIANTS[child.runtime], threads=VARIANT_THREADS.get(child.runtime))
                calls[child.runtime] = per_block(row["median_ms"])
                rows.append(row)
                if sink:
                    sink.write(json.dumps(row) + "\n")
        cosine_ok = {c.runtime: c.ready["cosine_ok"] for c in children}
    finally:
        for child in children:
            child.close()
        if busy is not None:
            busy.kill()
            busy.wait()
    return {**summarise(rows, runtimes), "cosine_ok": cosine_ok}


def summarise(rows: list, runtimes) -> dict:
    """One model's blocks (the rows a run writes with ``--json``, of one load): {"blocks": {runtime: block
    medians, by round}, "ratios": {label: (median, min, max) over the rounds that hold both runtimes of the
    ratio}, "pool": {runtime: summed counters}, "rounds": rounds with a block}, the live run's and
    --from-json's."""
    by_round: dict = {}
    pool: dict = {r: {} for r in runtimes}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["runtime"]] = row["median_ms"]
        counts = pool.setdefault(row["runtime"], {})
        for key, count in (row.get("pool") or {}).items():
            counts[key] = counts.get(key, 0) + count
    rounds = [by_round[k] for k in sorted(by_round)]
    blocks = {r: [rnd[r] for rnd in rounds if r in rnd] for r in runtimes}
    ratios = {}
    for label, num, den in RATIOS:
        per_round = np.array([rnd[num] / rnd[den] for rnd in rounds if num in rnd and den in rnd])
        if per_round.size:
            ratios[label] = (float(np.median(per_round)), float(per_round.min()), float(per_round.max()))
    out = {"blocks": blocks, "ratios": ratios, "pool": pool, "rounds": len(rounds)}
    probes: dict = {}  # --probe: round -> runtime -> the host probe's ms before that block
    for row in rows:
        if row.get("probe_ms"):
            probes.setdefault(row["round"], {})[row["runtime"]] = row["probe_ms"]
    if probes:
        out["probes"] = {r: [probes[k][r] for k in sorted(probes) if r in probes[k]] for r in runtimes}
        out["matched"] = {}  # each ratio over the rounds whose two blocks found the host at one speed
        for label, num, den in RATIOS:
            keep = [by_round[k][num] / by_round[k][den] for k in sorted(by_round)
                    if num in by_round[k] and den in by_round[k] and num in probes.get(k, {}) and den in probes[k]
                    and abs(probes[k][num] / probes[k][den] - 1) <= PROBE_MATCH]
            if keep:
                out["matched"][label] = (float(np.median(keep)), len(keep))
    return out


PROBE_MATCH = 0.10  # --probe: two blocks found the host at one speed where their probes are within 10 %


def probe_lines(results: dict, mode: str, runtimes) -> list[str]:
    """--probe's lines under a table: per model, each runtime's probe ms (median, range over its blocks), and the
    table's ratios over the rounds whose two blocks' probes agree within PROBE_MATCH (median, rounds kept)."""
    lines = []
    for model, res in results.items():
        if not res.get("probes"):
            continue
        probes = ", ".join(f"{r} {np.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
                           for r, v in res["probes"].items() if v and r in runtimes)
        matched = ", ".join(f"{label} {m:.2f} ({n} of {res['rounds']})" for label, (m, n) in res["matched"].items()
                            if any(num in runtimes and den in runtimes and lb == label for lb, num, den in RATIOS))
        lines.append(f"{mode} {model}: host probe ms {probes}")
        lines.append(f"{mode} {model}: rounds at one host speed (probes within {PROBE_MATCH:.0%}): {matched or '-'}")
    return lines


VARIANTS: dict = {}  # --variant LABEL=SPEC: runtime LABEL is the default session with SPEC's settings
VARIANT_THREADS: dict = {}  # --variant1 LABEL=SPEC: LABEL runs at one thread


def add_variant(text: str, threads: int | None = None) -> str:
    """``LABEL=SPEC`` (SPEC: ``;``-separated ``NAME=VALUE`` environment variables and
    ``module.ATTR=VALUE`` kernelkit_numba constants) as one more runtime, with its ratios to the
    default and to onnxruntime 2t (``threads=1``: to numba 1t and onnxruntime 1t, and the reference's
    ratio to it); returns the label."""
    global RATIOS
    label, _, spec = text.partition("=")
    if not label or not spec or label in LABELS:
        raise ValueError(f"--variant {text!r}: expected a new LABEL=SPEC")
    VARIANTS[label] = spec
    LABELS[label] = f"{label} ({spec}{', 1t' if threads else ''})"
    if threads:
        VARIANT_THREADS[label] = threads
        RATIOS = RATIOS + ((f"1t / {label}", "numba1", label), (f"{label} / ORT 1t", label, "ort1"),
                           (f"reference / {label}", "reference1", label))
    else:
        RATIOS = RATIOS + ((f"default / {label}", "numba", label), (f"{label} / ORT 2t", label, "ort2"))
    return label


def markdown(results: dict, mode: str, runtimes) -> str:
    labels = [label for label, num, den in RATIOS if num in runtimes and den in runtimes]
    lines = [f"| {mode} | " + " | ".join(LABELS[r] for r in runtimes) + " | "
             + " | ".join(f"{label} (min-max over rounds)" for label in labels) + " |",
             "|---" + "|---:" * (len(runtimes) + len(labels)) + "|"]
    for model, res in results.items():
        cells = [f"{np.median(res['blocks'][r]):.2f}" if res["blocks"].get(r) else "-" for r in runtimes]
        cells += [f"**{m:.2f}** ({lo:.2f}-{hi:.2f})" if (m, lo, hi) != (None,) * 3 else "-"
                  for m, lo, hi in (res["ratios"].get(label, (None,) * 3) for label in labels)]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def from_json(paths, runtimes=None, blocks_keys=()) -> None:
    """Print the tables of the blocks in ``paths`` (``--json`` files): one per load, in the order the lines
    came, a row per model; the runtimes ``runtimes`` or those in the lines (issue 11's first, then the
    variants as they came); then each numba runtime's summed pool counters, and the counters named in
    ``blocks_keys`` block by block."""
    rows = []
    for path in paths:
        try:
            with open(path) as f:
                found = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            found = []
        if not found:
            print(f"{path}: no blocks")
        rows += found
    specs: dict = {}  # a variant's label and ratios, from its lines (runs before the spec was written: the label)
    for row in rows:
        if row["runtime"] not in LABELS and not specs.get(row["runtime"], (None,))[0]:
            specs[row["runtime"]] = (row.get("spec"), row.get("threads"))
    for rt, (spec, threads) in specs.items():
        add_variant(f"{rt}={spec or '?'}", threads=threads)
    if runtimes is None:
        seen = list(dict.fromkeys(row["runtime"] for row in rows))
        runtimes = [r for r in LABELS if r in seen and r not in VARIANTS] + [r for r in seen if r in VARIANTS]
    for mode in dict.fromkeys(row["load"] for row in rows):
        results = {model: summarise([r for r in rows if r["load"] == mode and r["model"] == model], runtimes)
                   for model in dict.fromkeys(r["model"] for r in rows if r["load"] == mode)}
        print(markdown(results, mode, runtimes))
        for line in probe_lines(results, mode, runtimes):
            print(line)
        for model, res in results.items():
            pools = "; ".join(f"{rt}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                              for rt, counts in res["pool"].items() if counts and rt in runtimes)
            print(f"{mode} {model}: {res['rounds']} rounds" + (f"; pool counters {pools}" if pools else ""))
            for rt in runtimes if blocks_keys else ():
                cells = ["/".join(str((r.get("pool") or {}).get(k, 0)) for k in blocks_keys)
                         for r in rows if r["load"] == mode and r["model"] == model and r["runtime"] == rt]
                if any(c.strip("/0") for c in cells):
                    print(f"  {rt} per block ({'/'.join(blocks_keys)}): " + "  ".join(cells))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="?", help="comma-separated (not with --from-json)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--turn-s", type=float, default=0.3, help="seconds of calls per block")
    ap.add_argument("--settle", type=int, default=2, help="untimed calls at the start of each block")
    ap.add_argument("--gap-s", type=float, default=0.05,
                    help="pause between blocks (the last process's pool threads end their idle spin)")
    ap.add_argument("--mode", default="quiet", help="quiet, loaded or both (comma-separated)")
    ap.add_argument("--runtimes", help=f"comma-separated (default {','.join(RUNTIMES)}; with --from-json: "
                                      "those in the files)")
    ap.add_argument("--json", help="append every block as a JSON line to this file")
    ap.add_argument("--from-json", nargs="+", metavar="FILE",
                    help="no run: the tables of the blocks in these --json files (a run cut short: its rounds)")
    ap.add_argument("--blocks", default="", help="with --from-json: pool counters (comma-separated names) to "
                                                 "print block by block")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL=SPEC: one more runtime, the default with SPEC's settings (';'-separated "
                         "NAME=VALUE environment variables and module.ATTR=VALUE kernelkit_numba constants)")
    ap.add_argument("--probe", action="store_true",
                    help="time a fixed workload in each process before each block (the host's speed), and print "
                         "each ratio over the rounds whose two blocks found the host at one speed")
    ap.add_argument("--variant1", action="append", default=[],
                    help="LABEL=SPEC: one more runtime, numba 1t with SPEC's settings (as --variant)")
    args = ap.parse_args(argv)
    if args.from_json:
        for v in args.variant:
            add_variant(v)
        for v in args.variant1:
            add_variant(v, threads=1)
        from_json(args.from_json, args.runtimes.split(",") if args.runtimes else None,
                  [k for k in args.blocks.split(",") if k])
        return
    if not args.models:
        ap.error("models: comma-separated names (or --from-json FILE)")
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    if args.probe:
        os.environ["KERNELKIT_TURNS_PROBE"] = "1"
    runtimes = (tuple((args.runtimes or ",".join(RUNTIMES)).split(",")) + tuple(add_variant(v) for v in args.variant)
                + tuple(add_variant(v, threads=1) for v in args.variant1))
    unknown = set(runtimes) - set(LABELS)
    if unknown:
        ap.error(f"unknown runtimes {sorted(unknown)}; known: {', '.join(LABELS)}")
    sink = open(args.json, "a", buffering=1) if args.json else None  # noqa: SIM115 (closed below; line-buffered:
    # the blocks written so far stay when a device call's deadline ends the process)
    try:
        for mode in args.mode.split(","):
            results = {}
            for model in args.models.split(","):
                results[model] = take_turns(model, runtimes, args.rounds, args.turn_s, args.settle,
                                            mode == "loaded", sink, args.gap_s)
                bad = [r for r, ok in results[model]["cosine_ok"].items() if not ok]
                if bad:
                    print(f"{model}: output disagrees with onnxruntime for {bad}", file=sys.stderr)
                medians = ", ".join(f"{r} {np.median(b):.2f}" for r, b in results[model]["blocks"].items())
                print(f"{model} {mode}: {medians}; numba default's pool {results[model]['pool'].get('numba', {})}",
                      file=sys.stderr, flush=True)
            print(markdown(results, mode, runtimes), flush=True)
            for line in probe_lines(results, mode, runtimes):
                print(line, flush=True)
    finally:
        if sink:
            sink.close()


if __name__ == "__main__":
    main()

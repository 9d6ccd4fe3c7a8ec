"""``kernelkit bench``: latency of a model, the way onnxruntime_perf_test and OpenVINO's
benchmark_app report it, plus a per-node profile, a Chrome trace and an onnxruntime comparison.

    from kernelkit.tools import bench
    result = bench("resnet18.onnx", batch=1, runs=50, profile=True, compare="onnxruntime")
    result.stats["p99_ms"], result.profile[0], result.compare["ratio_p50"]
    result.write_json("bench.json"); result.write_trace("trace.json"); result.plot("bench.png")
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import progress
from ..errors import InputError
from ._common import bind_inputs, environment, make_feeds, node_flops, open_model, session_settings

PERCENTILES = (50, 90, 95, 99, 99.9)
DEFAULT_RUNS = 100
DEFAULT_WARMUP = 3
JSON_SCHEMA = 1  # bumped when a key of BenchResult.to_json() changes meaning


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of what ``--json`` writes (``bench.schema.json`` beside this file)."""
    from importlib import resources

    return json.loads(resources.files("kernelkit.tools").joinpath("bench.schema.json").read_text(encoding="utf-8"))


def latency_stats(times_ms, batch: int = 1) -> dict:
    """runs, mean/std/min/max and the percentiles of ``times_ms``, plus throughput (inferences
    per second: ``batch`` / mean)."""
    ms = np.asarray(times_ms, np.float64)
    if not ms.size:
        return {"runs": 0}
    stats = {"runs": int(ms.size), "mean_ms": float(ms.mean()), "std_ms": float(ms.std()),
             "min_ms": float(ms.min()), "max_ms": float(ms.max())}
    for p in PERCENTILES:
        stats[f"p{p:g}_ms"] = float(np.percentile(ms, p))
    stats["throughput_per_s"] = batch * 1e3 / stats["mean_ms"] if stats["mean_ms"] > 0 else float("inf")
    return stats


@dataclass
class BenchResult:
    """Every figure of one benchmark; ``to_json()`` is what ``--json`` writes."""

    model: str
    inputs: dict
    batch: int
    device: str
    vendors: list | None
    threads: int | None
    session_ms: float
    first_run_ms: float
    warmup_runs: int
    times_ms: list[float]
    stats: dict
    profile: list[dict] | None = None
    compare: dict | None = None
    environment: dict = field(default_factory=dict)
    trace_events: list = field(default_factory=list, repr=False)

    def to_json(self) -> dict:
        return {"schema": JSON_SCHEMA, "model": self.model, "inputs": self.inputs, "batch": self.batch,
                "device": self.device, "vendors": self.vendors, "threads": self.threads,
                "session_ms": self.session_ms, "first_run_ms": self.first_run_ms, "warmup_runs": self.warmup_runs,
                "latency": self.stats, "times_ms": self.times_ms, "profile": self.profile,
                "compare": self.compare, "environment": self.environment}

    def write_json(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2, allow_nan=True) + "\n", encoding="utf-8")

    def write_trace(self, path) -> None:
        """A Chrome / Perfetto trace (JSON "traceEvents"): one slice per run and per kernel call."""
        if not self.trace_events:
            raise InputError("no trace was recorded: call bench(..., trace=True)")
        doc = {"traceEvents": self.trace_events, "displayTimeUnit": "ms",
               "otherData": {"model": self.model, "device": self.device}}
        Path(path).write_text(json.dumps(doc) + "\n", encoding="utf-8")

    def plot(self, path) -> None:
        """A PNG: time per op type (when profiled) and the latency histogram (needs matplotlib)."""
        from .plot import plot_bench

        plot_bench(self, path)


def _time_runs(sess, feeds, runs, duration, marks, label: str) -> list[float]:
    times: list[float] = []
    limit = runs if runs is not None else None
    with progress.task(label, total=limit) as advance:
        start = time.perf_counter()
        while True:
            if limit is not None and len(times) >= limit:
                break
            if duration is not None and times and time.perf_counter() - start >= duration:
                break
            t0 = time.perf_counter()
            sess.run(None, feeds)
            dt = time.perf_counter() - t0
            times.append(dt * 1e3)
            if marks is not None:
                marks.append((t0, dt))
            advance()
    return times


def time_session(sess, feeds: dict, runs: int | None = None, duration: float | None = None,
                 warmup: int = DEFAULT_WARMUP) -> list[float]:
    """Latency in ms of ``runs`` runs of ``sess`` (or as many as fit in ``duration`` seconds)
    after ``warmup`` untimed runs: what ``kernelkit run --benchmark`` uses."""
    from ..backends import settle

    with progress.task("warm-up", total=warmup) as advance:
        for _ in range(warmup):
            sess.run(None, feeds)
            advance()
    settle()  # kernels a backend compiles in the background (for these feeds' shapes too) are ready
    return _time_runs(sess, feeds, runs if runs is not None or duration is not None else DEFAULT_RUNS,
                      duration, None, "benchmark")


def latency_table(stats: dict, title: str, name: str = "kernelkit"):
    """A rich table of ``latency_stats``: runs, mean, std, min, the percentiles, max, inferences/s."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("runtime", no_wrap=True)
    for c in ("runs", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max", "inf/s"):
        table.add_column(c, justify="right", no_wrap=True)
    add_latency_row(table, name, stats)
    return table


def _ms(v: float) -> str:
    return f"{v:.1f}" if v >= 100 else f"{v:.2f}" if v >= 10 else f"{v:.3f}"


def add_latency_row(table, name: str, st: dict) -> None:
    keys = ["mean_ms", "std_ms", "min_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99.9_ms", "max_ms"]
    table.add_row(name, str(st["runs"]), *(_ms(st[k]) for k in keys), f"{st['throughput_per_s']:.4g}")


def _profile_rows(sess, flops: dict) -> list[dict]:
    """The profile of the timed runs; a node's time is its device time where the device has events
    (OpenCL: the host only enqueues), else the host time around its kernel call."""
    rows = [r for r in sess.profile() if r["calls"]]
    for r in rows:
        r["flops"] = flops.get(r["node"])
        r["busy_ms"] = r["device_ms"] if r["device_ms"] is not None else r["total_ms"]
        r["gflops"] = r["flops"] * r["calls"] / r["busy_ms"] / 1e6 if r["flops"] and r["busy_ms"] > 0 else None
    total = sum(r["busy_ms"] for r in rows) or 1.0
    for r in rows:
        r["percent"] = 100.0 * r["busy_ms"] / total
    return sorted(rows, key=lambda r: -r["busy_ms"])


def _trace_events(sess, marks, origin: float) -> list[dict]:
    pid = os.getpid()
    events = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"kernelkit {sess.graph.name}"}}]
    for i, (t0, dt) in enumerate(marks):
        events.append({"name": f"run {i}", "cat": "run", "ph": "X", "pid": pid, "tid": 0,
                       "ts": (t0 - origin) * 1e6, "dur": dt * 1e6})
    where = {r["node"]: r for r in sess.profile()}
    for node, t0, dt, tid in sess.profile_events():
        row = where.get(node, {})
        events.append({"name": node, "cat": row.get("op", "kernel"), "ph": "X", "pid": pid, "tid": tid,
                       "ts": (t0 - origin) * 1e6, "dur": dt * 1e6,
                       "args": {"op": row.get("op"), "device": row.get("device"), "vendor": row.get("vendor"),
                                "dtype": row.get("dtype")}})
    return events


def _onnxruntime(onnx_path, feeds, threads, runs, warmup, duration, outputs) -> dict:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        from ..cli import MissingExtraError

        raise MissingExtraError(f"--compare onnxruntime needs onnxruntime: pip install onnxruntime ({exc})") from exc
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    t0 = time.perf_counter()
    with progress.task("onnxruntime: building session"):
        osess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    session_ms = (time.perf_counter() - t0) * 1e3
    names = [i.name for i in osess.get_inputs()]
    missing = [n for n in names if n not in feeds]
    if missing:
        raise InputError(f"onnxruntime's model needs inputs {missing} that kernelkit's does not have")
    ofeeds = {n: feeds[n] for n in names}
    t0 = time.perf_counter()
    first = osess.run(None, ofeeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(warmup):
        osess.run(None, ofeeds)

    class _Runner:  # what _time_runs calls
        @staticmethod
        def run(_, __):
            osess.run(None, ofeeds)

    times = _time_runs(_Runner, None, runs, duration, None, "onnxruntime")
    agreement = {}
    for info, got, want in zip(osess.get_outputs(), outputs, first):
        from ._common import compare

        c = compare(info.name, got, np.asarray(want))
        agreement[info.name] = {"cosine": c.cosine, "max_abs_error": c.max_abs, "passed": c.passed}
    return {"runtime": "onnxruntime", "version": ort.__version__, "threads": threads, "session_ms": session_ms,
            "first_run_ms": first_ms, "times_ms": times, "outputs": agreement}


def bench(model, *, device: str | None = None, vendors=None, threads: int | None = None, shapes=None,
          batch: int | None = None, inputs: dict | None = None, runs: int | None = None,
          duration: float | None = None, warmup: int = DEFAULT_WARMUP, seed: int = 0, profile: bool = False,
          trace: bool = False, compare: str | None = None, options: dict | None = None) -> BenchResult:
    """Benchmark ``model`` (a Model or a .kkm/.onnx/deployment path).

    Times session creation and the first run (kernel compilation, OpenCL builds), then ``warmup``
    runs, then ``runs`` timed runs (or as many as fit in ``duration`` seconds; default
    ``DEFAULT_RUNS``). ``shapes`` ({input: shape}) and ``batch`` bind symbolic dims (others: 1);
    ``inputs`` gives arrays (the rest are random, seeded by ``seed``). ``profile`` adds a per-node
    table of the timed runs (warm-up excluded), ``trace`` records a Chrome trace, ``compare=
    "onnxruntime"`` runs the same inputs with the same thread count through onnxruntime."""
    from ..session import Session

    if runs is not None and runs < 1:
        raise InputError(f"runs must be >= 1, got {runs}")
    if duration is not None and duration <= 0:
        raise InputError(f"duration must be > 0 seconds, got {duration}")
    if warmup < 0:
        raise InputError(f"warmup must be >= 0, got {warmup}")
    if compare not in (None, "onnxruntime"):
        raise InputError(f"compare: only 'onnxruntime' is supported, got {compare!r}")
    if runs is None and duration is None:
        runs = DEFAULT_RUNS
    src = open_model(model)
    if compare and src.onnx_path is None:
        raise InputError("--compare onnxruntime needs an .onnx MODEL (or a deployment file naming one)")
    shapes_used = bind_inputs(src.model, shapes, batch, inputs)
    feeds = make_feeds(src.model, inputs, seed)
    settings = session_settings(src, options, device=device, vendors=vendors, threads=threads)
    if profile and settings.get("device", "cpu") != "cpu":
        settings["options"].setdefault("opencl_profile", True)  # device time from events
    origin = time.perf_counter()
    with progress.task("building the session (OpenCL builds, tuning)"):
        sess = Session(src.model, profile=profile or trace, **settings)
    session_ms = (time.perf_counter() - origin) * 1e3
    t0 = time.perf_counter()
    with progress.task("first run (compiling kernels)"):
        outputs = sess.run(None, feeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    from ..backends import settle

    with progress.task("kernels compiling in the background"):
        settle()  # the timed runs see the finished kernels (kernelkit_numba's tiered start)
    with progress.task("warm-up", total=warmup) as advance:
        for _ in range(warmup):
            sess.run(None, feeds)
            advance()
    sess.reset_profile()  # the profile and trace cover the timed runs only
    marks: list = []
    times = _time_runs(sess, feeds, runs, duration, marks, "benchmark")
    lead = [shape[0] for shape in shapes_used.values() if shape]
    n_batch = lead[0] if lead else 1  # throughput counts the leading dim of the first input
    flops = node_flops(sess.graph)
    result = BenchResult(
        model=str(src.path) if src.path else sess.graph.name,
        inputs={n: {"shape": list(a.shape), "dtype": a.dtype.name} for n, a in feeds.items()},
        batch=n_batch, device=sess.device_name, vendors=list(sess.vendors) if sess.vendors else None,
        threads=sess.threads, session_ms=session_ms, first_run_ms=first_ms, warmup_runs=warmup,
        times_ms=times, stats=latency_stats(times, n_batch),
        profile=_profile_rows(sess, flops) if profile else None,
        environment=environment(sess))
    known = [f for f in flops.values() if f is not None]
    result.stats["flops"] = sum(known) if known else None
    if trace:
        result.trace_events = _trace_events(sess, marks, origin)
    if compare:
        ort_threads = sess.threads or os.cpu_count() or 1
        other = _onnxruntime(src.onnx_path, feeds, ort_threads, runs, warmup, duration, outputs)
        other["latency"] = latency_stats(other.pop("times_ms"), n_batch)
        mine, theirs = result.stats, other["latency"]
        other["ratio_p50"] = mine["p50_ms"] / theirs["p50_ms"]
        other["ratio_mean"] = mine["mean_ms"] / theirs["mean_ms"]
        result.compare = other
    return result


def render(result: BenchResult, console) -> None:
    """The rich tables of ``kernelkit bench``."""
    from rich.table import Table

    s = result.stats
    shapes = ", ".join(f"{n} {v['dtype']}{v['shape']}" for n, v in result.inputs.items())
    head = Table(title=f"bench {result.model}", show_header=False)
    head.add_column("what")
    head.add_column("value")
    vendors = ",".join(result.vendors) if result.vendors else "any"
    head.add_row("inputs", shapes)
    head.add_row("device / vendors / threads", f"{result.device} / {vendors} / {result.threads or 'default'}")
    head.add_row("placement", ", ".join(f"{d}/{v} x{n}" for (d, v), n in _placement(result).items()))
    head.add_row("session creation", f"{result.session_ms:.1f} ms")
    head.add_row("first run", f"{result.first_run_ms:.2f} ms")
    head.add_row("warm-up runs", str(result.warmup_runs))
    if s.get("flops"):
        head.add_row("FLOPs per run", f"{s['flops'] / 1e9:.3f} G")
    console.print(head)

    table = latency_table(s, "latency, ms" + ("  (kernelkit vs onnxruntime)" if result.compare else ""))
    if result.compare:
        c = result.compare
        add_latency_row(table, f"onnxruntime {c['version']}", c["latency"])
        table.add_row("ratio", "", f"{c['ratio_mean']:.2f}x", "", "", f"{c['ratio_p50']:.2f}x", *[""] * 6)
    console.print(table)
    if result.compare:
        c = result.compare
        agree = ", ".join(f"{n}: cosine {a['cosine']:.7f}, max|err| {a['max_abs_error']:.3g}"
                          for n, a in c["outputs"].items())
        console.print(f"onnxruntime ({c['threads']} threads): session {c['session_ms']:.1f} ms, first run "
                      f"{c['first_run_ms']:.2f} ms; outputs: {agree}")
    if result.profile:
        render_profile(result.profile, console)


def _placement(result: BenchResult) -> dict:
    counts: dict = {}
    for k in result.environment.get("kernels", []):
        counts[(k["device"], k["vendor"])] = counts.get((k["device"], k["vendor"]), 0) + 1
    return counts


def render_profile(rows: list[dict], console, limit: int | None = None) -> None:
    from rich.table import Table

    device_time = any(r.get("device_ms") is not None for r in rows)
    table = Table(title="per-node time of the timed runs (warm-up excluded), slowest first"
                  + ("; % and GFLOP/s from device time where there is one" if device_time else ""))
    cols = ["node", "op", "vendor", "calls", "ms/call", "total ms", "%", "GFLOP/s"]
    if device_time:
        cols.append("device ms/call")
    for c in cols:
        table.add_column(c, justify="left" if c in ("node", "op", "vendor") else "right")
    for r in rows[:limit]:
        cells = [r["node"], r["op"], r["vendor"], str(r["calls"]), f"{r['mean_ms']:.4f}", f"{r['total_ms']:.3f}",
                 f"{r['percent']:.1f}", f"{r['gflops']:.2f}" if r.get("gflops") else "-"]
        if device_time:
            cells.append(f"{r['device_ms'] / r['calls']:.4f}" if r.get("device_ms") is not None else "-")
        table.add_row(*cells)
    console.print(table)

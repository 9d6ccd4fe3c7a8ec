"""The ``kernelkit`` command: run, info, kernels, convert.

    kernelkit run                          # the bundled digits example: accuracy + latency
    kernelkit run model.kkm --benchmark 50 --input x=x.npy --output-dir out/
    kernelkit run deploy.yml --validate    # a deployment file, checked against its validation data
    kernelkit info model.kkm               # inputs, outputs, ops, parameters, FLOPs, passes, placement
    kernelkit kernels --op Conv            # registered kernel keys
    kernelkit convert model.onnx -o model.kkm

A kernelkit error prints one red line ``error[CODE]: message`` and exits with status 2.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import warnings
from collections import Counter
from contextlib import ExitStack, contextmanager
from importlib import resources
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__, progress
from .deploy import is_deployment, load_deployment
from .errors import FallbackWarning, InputError, KernelkitError, LoaderNotFoundError
from .ir import Model, TensorSpec
from .untrusted import open_regular, read_npy

log = logging.getLogger("kernelkit.cli")

EXAMPLE = ("examples_data", "digits")  # package data: digits.kkm, test.npz, digits.yml
EXAMPLE_RUNS = 100
DEFAULT_RUNS = 100  # kernelkit bench without --runs/--duration (kernelkit.tools.bench.DEFAULT_RUNS)


class MissingExtraError(KernelkitError):
    """A command needs an optional package that is not installed."""

    code = "KK_MISSING_EXTRA"


class UsageError(KernelkitError):
    """The command line does not parse (unknown option, missing argument, bad number)."""

    code = "KK_USAGE"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors become one ``error[KK_USAGE]`` line (sub-commands too)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _console() -> Console:
    # markup off: names like "[batch, 4]" are data; soft_wrap: plain lines (paths, hashes) stay whole
    out = Console(highlight=False, markup=False, soft_wrap=True)
    if not out.is_terminal:
        out = Console(highlight=False, markup=False, soft_wrap=True, width=120)
    return out


# -- shared helpers ----------------------------------------------------------------------------
def _vendors(text: str | None):
    return tuple(v.strip() for v in text.split(",") if v.strip()) if text else None


def _session_kwargs(args) -> dict:
    kwargs = {}
    if args.device is not None:
        kwargs["device"] = args.device
    if args.vendors is not None:
        kwargs["vendors"] = _vendors(args.vendors)
    if getattr(args, "threads", None) is not None:
        kwargs["threads"] = args.threads
    return kwargs


def _open_model(path: str) -> tuple[Model, dict]:
    """The model behind MODEL (.kkm, .onnx or deployment YAML) and the session settings it implies."""
    from .loaders import load_model

    if is_deployment(path):
        dep = load_deployment(path)
        return dep.model(), dict(device=dep.device, vendors=dep.vendors, fallback=dep.fallback,
                                 threads=dep.threads, passes=dep.passes, options=dict(dep.options))
    return load_model(path), {}


def _concrete(spec: TensorSpec, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(dims.get(d, 1) if isinstance(d, str) else d for d in spec.shape)


def _read_inputs(pairs: list[str]) -> dict[str, np.ndarray]:
    feeds = {}
    for pair in pairs or []:
        name, sep, file = pair.partition("=")
        if not sep or not name or not file:
            raise InputError(f"--input {pair!r}: expected name=file.npy")
        try:
            with open_regular(file) as fh:  # a FIFO or a device would block np.load forever
                array = read_npy(fh, f"--input {name}: {file}")
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {name}: cannot read {file}: {exc}") from exc
        feeds[name] = array
    return feeds


def _benchmark(console: Console, sess, feeds: dict, runs: int, title: str) -> None:
    from .tools.bench import latency_stats, latency_table, time_session

    lead = [a.shape[0] for a in feeds.values() if a.ndim]
    console.print(latency_table(latency_stats(time_session(sess, feeds, runs), lead[0] if lead else 1), title))


# -- run ---------------------------------------------------------------------------------------
def _session(model, console: Console, **settings):
    """A Session whose fallback warning becomes one line on the console."""
    from .session import Session

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        sess = Session(model, **settings)
    fallbacks = sess.fallbacks()
    if fallbacks:
        places = Counter(f"{f['device']}/{f['vendor']}" for f in fallbacks)
        copies = sum(len(f["copies"]) for f in fallbacks)
        asked = f"{sess.device_name}" + (f" vendors {list(sess.vendors)}" if sess.vendors else "")
        console.print(Text("fallback: ", style="yellow") + Text(
            f"{len(fallbacks)} node(s) not on {asked}: " + ", ".join(f"{n} on {p}" for p, n in sorted(places.items()))
            + f"; {copies} host<->device copies added (kernelkit info lists them)"))
    return sess


@contextmanager
def _fallback_lines(console: Console):
    """Fallback warnings of the sessions a tool builds, each as one yellow line on the console."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        yield
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            console.print(Text("fallback: ", style="yellow") + Text(str(w.message)))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _run_example(args, console: Console) -> int:
    with ExitStack() as stack:
        folder = resources.files("kernelkit").joinpath(*EXAMPLE)
        model_path = stack.enter_context(resources.as_file(folder / "digits.kkm"))
        data_path = stack.enter_context(resources.as_file(folder / "test.npz"))
        sess = _session(model_path, console, **_session_kwargs(args))
        with np.load(data_path, allow_pickle=False) as data:
            x, labels = data["x"], data["label"]
        with progress.task("first run (compiling kernels)"):
            [probs] = sess.run(None, {"x": x})
        accuracy = float(np.mean(probs.argmax(axis=1) == labels))
        runs = args.benchmark if args.benchmark is not None else EXAMPLE_RUNS
    table = Table(title="digits CNN example (scikit-learn 8x8 digits)", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("device / kernels", ", ".join(f"{d}/{v}" for d, v in sorted(set(sess.placement().values()))))
    table.add_row("held-out images", str(len(labels)))
    table.add_row("accuracy", f"{accuracy:.2%} ({int(round(accuracy * len(labels)))}/{len(labels)})")
    console.print(table)
    if runs > 0:
        _benchmark(console, sess, {"x": x[:1]}, runs, "latency, batch 1 (ms)")
    return 0


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "output"


def _run_model(args, console: Console) -> int:
    from .tools._common import random_input

    model, settings = _open_model(args.model)
    settings.update(_session_kwargs(args))
    if getattr(args, "layout", None):
        settings["options"] = {**(settings.get("options") or {}), "layout": args.layout}
    sess = _session(model, console, **settings)
    if args.validate:
        return _validate(args, sess, console)
    feeds = _read_inputs(args.input)
    unknown = sorted(set(feeds) - {i.name for i in sess.get_inputs()})
    if unknown:
        names = [i.name for i in sess.get_inputs()]
        raise InputError(f"--input {unknown}: model {sess.graph.name!r} has inputs {names}")
    rng = np.random.default_rng(args.seed)
    for info in sess.get_inputs():
        if info.name not in feeds:
            spec = sess.graph.values[info.name].spec
            feeds[info.name] = random_input(rng, _concrete(spec, {}), spec.dtype)
            console.print(f"input {info.name}: random {spec.dtype}{list(feeds[info.name].shape)} "
                          f"(symbolic dims set to 1)" if not spec.is_static else
                          f"input {info.name}: random {spec.dtype}{list(feeds[info.name].shape)}")
    with progress.task("first run (compiling kernels)"):
        outputs = sess.run(None, feeds)
    table = Table(title=f"outputs of {sess.graph.name}")
    for col in ("name", "shape", "dtype", "min", "max", "mean"):
        table.add_column(col)
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    saved = []
    for info, arr in zip(sess.get_outputs(), outputs):
        stats = ((f"{arr.min():.6g}", f"{arr.max():.6g}", f"{arr.astype(np.float64).mean():.6g}") if arr.size
                 else ("-",) * 3)
        table.add_row(info.name, str(list(arr.shape)), arr.dtype.name, *stats)
        if out_dir is not None:
            target = out_dir / f"{_safe_name(info.name)}.npy"
            np.save(target, arr, allow_pickle=False)
            saved.append(f"saved {info.name} to {target}")
    console.print(table)
    for line in saved:
        console.print(line)
    if args.benchmark:
        _benchmark(console, sess, feeds, args.benchmark, f"latency of {sess.graph.name} (ms)")
    return 0


def _validate(args, sess, console: Console) -> int:
    if not is_deployment(args.model):
        raise InputError("--validate needs a deployment file (.yml); for a model file use kernelkit validate")
    from .tools.validate import deployment_oracle_inputs

    dep = load_deployment(args.model)
    needed, inputs = deployment_oracle_inputs(dep)
    if needed:  # no expected outputs: check against onnxruntime (ONNX) or the reference kernels
        from .tools import validate
        from .tools.validate import render

        result = validate(args.model, device=args.device, vendors=_vendors(args.vendors), threads=args.threads,
                          inputs=inputs, seed=args.seed)
        render(result, console)
        return 0 if result.passed else 1
    checks = dep.validate(sess)
    table = Table(title=f"validation of {args.model}")
    for col in ("output", "dtype", "max |error|", "cosine", "rtol", "atol", "result"):
        table.add_column(col)
    for c in checks:
        table.add_row(c.name, c.dtype, f"{c.max_abs_error:.3g}", f"{c.cosine:.8f}", f"{c.rtol:g}", f"{c.atol:g}",
                      Text("pass", style="green") if c.passed else Text("FAIL", style="bold red"))
    console.print(table)
    return 0 if all(c.passed for c in checks) else 1


def cmd_run(args, console: Console) -> int:
    if (args.benchmark is not None and args.benchmark < 0) or (args.threads is not None and args.threads < 1):
        raise InputError("--benchmark must be >= 0 and --threads >= 1")
    if args.seed < 0:
        raise InputError(f"--seed must be >= 0, got {args.seed}")
    if args.model is None:
        if args.input or args.output_dir or args.validate:
            raise InputError("--input, --output-dir and --validate need a MODEL")
        return _run_example(args, console)
    return _run_model(args, console)


# -- info --------------------------------------------------------------------------------------
def _print_json(doc, target) -> None:
    """``--json``: to stdout ('-') or a file."""
    import json

    text = json.dumps(doc, indent=2) + "\n"
    if target == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text, encoding="utf-8")


def cmd_info(args, console: Console) -> int:
    from .tools.info import info, parse_dims

    facts = info(args.model, device=args.device, vendors=_vendors(args.vendors), dims=parse_dims(args.dim),
                 layout=args.layout)
    if args.json:
        _print_json(facts, args.json)
        if args.json == "-":
            return 0
    console.print(Text(facts["name"], style="bold") + Text(f"  producer {facts['producer']}, opsets {facts['opsets']}"))
    io_table = Table(title="inputs and outputs")
    for col in ("kind", "name", "shape", "dtype"):
        io_table.add_column(col)
    for row in facts["io"]:
        io_table.add_row(row["kind"], row["name"], str(row["shape"]), row["dtype"])
    console.print(io_table)
    op_table = Table(title="ops")
    for col in ("op", "nodes (file)", "nodes (after passes)"):
        op_table.add_column(col)
    for op, counts in facts["ops"].items():
        op_table.add_row(op, str(counts["file"]), str(counts["after_passes"]))
    console.print(op_table)
    console.print(f"parameters: {facts['parameters']:,} ({facts['parameter_bytes'] / 1e6:.3f} MB)")
    bound = ", ".join(f"{s}={v}" for s, v in facts["dims"].items())
    console.print(f"FLOPs: {facts['flops']:,}" + (f" (with {bound})" if bound else ""))
    if facts["ops_without_flops"]:
        console.print(f"  ops without a flops function count 0: {', '.join(facts['ops_without_flops'])}")
    if facts["nodes_with_unknown_flops"]:
        console.print(f"  nodes with an unknown (symbolic) count: {', '.join(facts['nodes_with_unknown_flops'][:10])}")
    fired = ", ".join(f"{k} x{v}" for k, v in facts["passes_fired"].items()) or "none"
    console.print(f"passes fired: {fired}")
    p_table = Table(title=f"placement (device {facts['device']}, vendors {facts['vendors'] or 'any'})")
    for col in ("device", "vendor", "nodes", "ops"):
        p_table.add_column(col)
    for row in facts["placement"]:
        p_table.add_row(row["device"], row["vendor"], str(row["nodes"]), ", ".join(row["ops"]))
    console.print(p_table)
    laid, reorders = facts["layouts"], facts["reorders"]
    console.print("layouts: " + (", ".join(f"{lay} x{k}" for lay, k in laid.items()) +
                                 f" (the rest default), {reorders} reorder(s)" if laid else "all default"))
    mem = facts.get("memory")
    if mem:
        m_table = Table(title="memory plan (bytes)")
        for col in ("arena", "live peak", "weights", "largest scratch", "planned values", "in place",
                    "kernel-allocated"):
            m_table.add_column(col, justify="right")
        m_table.add_row(*(f"{mem[k]:,}" for k in ("arena_bytes", "live_peak_bytes", "weights_bytes", "scratch_bytes",
                                                   "planned_values", "inplace_steps", "kernel_allocated_values")))
        console.print(m_table)
    for fb in facts["fallbacks"]:
        copies = f"; copies {', '.join(fb['copies'])}" if fb.get("copies") else ""
        console.print(Text("fallback: ", style="yellow") + Text(f"node {fb['node']!r} ({fb['op']}) on "
                                                                  f"({fb['device']}, {fb['vendor']}): {fb['reason']}"
                                                                  f"{copies}"))
    return 0


# -- validate ----------------------------------------------------------------------------------
def cmd_validate(args, console: Console) -> int:
    from .tools import validate
    from .tools._common import load_inputs, parse_shapes
    from .tools.validate import render

    inputs = load_inputs(args.inputs) if args.inputs else {}
    inputs.update(_read_inputs(args.input))
    with _fallback_lines(console):
        result = validate(args.model, against=args.against, device=args.device, vendors=_vendors(args.vendors),
                          threads=args.threads, shapes=parse_shapes(args.shape), batch=args.batch, inputs=inputs,
                          seed=args.seed)
    render(result, console)
    if args.json:
        result.write_json(args.json)
        console.print(f"--json: wrote {args.json}")
    return 0 if result.passed else 1


# -- bisect ------------------------------------------------------------------------------------
def cmd_bisect(args, console: Console) -> int:
    import json

    from .tools import bisect
    from .tools._common import load_inputs, parse_shapes
    from .tools.bisect import render

    inputs = load_inputs(args.inputs) if args.inputs else {}
    inputs.update(_read_inputs(args.input))
    with _fallback_lines(console):
        result = bisect(args.model, device=args.device, vendors=_vendors(args.vendors), threads=args.threads,
                        shapes=parse_shapes(args.shape), batch=args.batch, inputs=inputs, seed=args.seed,
                        repro_dir=args.repro)
    render(result, console)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
        console.print(f"--json: wrote {args.json}")
    return 0 if result.culprit is None else 1


# -- graph -------------------------------------------------------------------------------------
def cmd_graph(args, console: Console) -> int:
    from .tools import graph
    from .tools._common import parse_shapes

    with _fallback_lines(console):
        text = graph(args.model, args.output, device=args.device, vendors=_vendors(args.vendors),
                     shapes=parse_shapes(args.shape), batch=args.batch, passes=False if args.no_passes else None)
    if args.output:
        console.print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


# -- bench -------------------------------------------------------------------------------------
def cmd_bench(args, console: Console) -> int:
    from .tools import bench
    from .tools._common import parse_shapes
    from .tools.bench import render

    with _fallback_lines(console):
        result = bench(args.model, device=args.device, vendors=_vendors(args.vendors), threads=args.threads,
                       shapes=parse_shapes(args.shape), batch=args.batch, inputs=_read_inputs(args.input),
                       runs=args.runs, duration=args.duration, warmup=args.warmup, seed=args.seed,
                       profile=args.profile, trace=args.trace is not None, compare=args.compare)
    render(result, console)
    for flag, path, write in (("--json", args.json, result.write_json), ("--trace", args.trace, result.write_trace),
                              ("--plot", args.plot, result.plot)):
        if path:
            write(path)
            console.print(f"{flag}: wrote {path}")
    return 0


# -- kernels, convert --------------------------------------------------------------------------
def cmd_kernels(args, console: Console) -> int:
    from .tools.info import kernel_list

    rows = kernel_list(args.op, args.device, args.vendor, args.dtype)
    if args.json:
        _print_json(rows, args.json)
        if args.json == "-":
            return 0
    table = Table(title=f"registered kernels ({len(rows)})")
    for col in ("op", "device", "vendor", "dtype", "priority", "layout", "implementation"):
        table.add_column(col)
    for row in rows:
        table.add_row(*(str(row[k]) for k in ("op", "device", "vendor", "dtype", "priority")), row["layout"] or "-",
                      row["implementation"])
    console.print(table)
    return 0


def _quantizer(src: Path):
    """The quantizer for ``src``'s format, from the ``kernelkit.quantizers`` entry-point group (keyed
    by suffix, like the loaders: core names no converter package)."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="kernelkit.quantizers") if ep.name.lower() == src.suffix.lower()]
    if not found:
        raise MissingExtraError(f"kernelkit convert --quantize: no quantizer for {src.suffix or 'suffix-less'} "
                                "files; install kernelkit-converters (pip install '.[converters]')")
    try:
        return found[0].load()
    except ImportError as exc:
        raise MissingExtraError(f"kernelkit convert --quantize: {found[0].value} cannot be imported: {exc}") from exc


def cmd_convert(args, console: Console) -> int:
    import hashlib

    from .io import load, save
    from .loaders import load_model

    src = Path(args.model)
    out = Path(args.output) if args.output else src.with_suffix(".kkm")
    if out.resolve() == src.resolve() or (out.exists() and src.exists() and os.path.samefile(out, src)):
        raise InputError(f"convert: output {out} is the input model {src}; choose another -o")
    if args.quantize:  # int8 through onnxruntime's quantizer first (docs/quantization.md)
        quantize = _quantizer(src)
        if out.suffix == ".onnx":
            quantize(src, out, mode=args.quantize, calibration=args.calibration, reduce_range=args.reduce_range)
            console.print(f"wrote {out}: {args.quantize} int8 ONNX model")
            return 0
        src = quantize(src, out.with_suffix(".int8.onnx"), mode=args.quantize, calibration=args.calibration,
                       reduce_range=args.reduce_range)
    try:
        with progress.task(f"converting {src.name}"):
            model = load_model(src)
    except LoaderNotFoundError as exc:
        raise MissingExtraError(f"kernelkit convert: {exc}") from exc
    save(model, out)
    back = load(out)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    console.print(f"wrote {out}: {len(back.graph.nodes)} nodes, {len(back.graph.constants)} constants, "
                  f"{out.stat().st_size:,} bytes, sha256 {digest}")
    return 0


class _VersionAction(argparse.Action):
    """``--version``: print :func:`_versions` as it is (argparse's own action re-wraps lines)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(_versions())
        parser.exit(0)


def _versions() -> str:
    """kernelkit's version and Python's, then one line per installed package that plugs into it."""
    import platform

    from .backends import installed_packages

    lines = [f"kernelkit {__version__} (Python {platform.python_version()}, NumPy {np.__version__})"]
    for name, version, backends in installed_packages():
        if name.lower() != "kernelkit":
            lines.append(f"{name} {version}" + (f" (backend {', '.join(backends)})" if backends else ""))
    return "\n".join(lines)


def cmd_batch(args, console: Console) -> int:
    from .integrations.batch import main_summary, run_batch

    kwargs = _session_kwargs(args)
    kwargs.pop("threads", None)
    summary = run_batch(args.model, args.input, args.output, engine=args.engine, workers=args.workers,
                        threads=args.threads, batch_size=args.batch_size, cache_dir=args.cache_dir,
                        address=args.address, **kwargs)
    console.print(main_summary(summary))
    return 0


# -- entry point -------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kernelkit", description="kernelkit inference runtime")
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v: info logs, -vv: debug logs")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")
    p.add_argument("-V", "--version", action=_VersionAction, nargs=0,
                   help="print the versions of kernelkit and of each installed backend package, then exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="what to do (kernelkit COMMAND --help)")

    def device_opts(sp):
        sp.add_argument("--device", help="device to run on (cpu, gpu, ...)")
        sp.add_argument("--vendors", help="kernel vendors in preference order, comma separated")

    run = sub.add_parser("run", help="run a model (no MODEL: the bundled digits example)")
    run.add_argument("model", nargs="?", metavar="MODEL", help=".kkm, .onnx or deployment .yml")
    device_opts(run)
    run.add_argument("--layout", help="prefer kernels in this layout where some exist: NHWC, NCHW8c, NCHW16c")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input (repeatable)")
    run.add_argument("--benchmark", type=int, metavar="N",
                     help="time N runs after 3 warm-up runs (percentiles as kernelkit bench; example default 100)")
    run.add_argument("--threads", type=int, metavar="T", help="threads for the session")
    run.add_argument("--output-dir", metavar="DIR", help="save each output as DIR/<name>.npy")
    run.add_argument("--seed", type=int, default=0, help="seed of random inputs")
    run.add_argument("--validate", action="store_true", help="check a deployment against its validation data")
    run.set_defaults(func=cmd_run)

    info = sub.add_parser("info", help="describe a model")
    info.add_argument("model", metavar="MODEL", help=".kkm, .onnx or deployment .yml")
    device_opts(info)
    info.add_argument("--layout", help="prefer kernels in this layout where some exist: NHWC, NCHW8c, NCHW16c")
    info.add_argument("--dim", action="append", metavar="SYMBOL=INT", help="bind a symbolic dim (default 1)")
    info.add_argument("--json", nargs="?", const="-", metavar="FILE",
                      help="print the facts as JSON (to FILE if given, else instead of the tables)")
    info.set_defaults(func=cmd_info)

    ben = sub.add_parser("bench", help="benchmark a model: latency percentiles, profile, trace, onnxruntime")
    ben.add_argument("model", metavar="MODEL", help=".kkm, .onnx or deployment .yml")
    device_opts(ben)
    ben.add_argument("--threads", type=int, metavar="T", help="threads for the session (and for onnxruntime)")
    ben.add_argument("--shape", action="append", metavar="NAME=D,D,...",
                     help="the whole shape of an input (repeatable), e.g. x=1,3,224,224")
    ben.add_argument("--batch", type=int, metavar="N", help="the leading symbolic dim of every input (others: 1)")
    ben.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input (repeatable; else random)")
    ben.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    ben.add_argument("--runs", type=int, metavar="N", help=f"timed runs (default {DEFAULT_RUNS} unless --duration)")
    ben.add_argument("--duration", type=float, metavar="S",
                     help="time runs for S seconds (with --runs: whichever ends first)")
    ben.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed runs after the first (default 3)")
    ben.add_argument("--profile", action="store_true", help="per-node table of the timed runs, slowest first")
    ben.add_argument("--trace", metavar="FILE.json", help="write a Chrome/Perfetto trace of the timed runs")
    ben.add_argument("--compare", choices=["onnxruntime"], help="also run the .onnx MODEL through onnxruntime")
    ben.add_argument("--json", metavar="FILE", help="write every figure and the environment as JSON")
    ben.add_argument("--plot", metavar="FILE.png", help="per-op bars and latency histogram (needs matplotlib)")
    ben.set_defaults(func=cmd_bench)

    val = sub.add_parser("validate", help="compare a model's outputs with onnxruntime or the reference kernels")
    val.add_argument("model", metavar="MODEL", help=".onnx (or .kkm / deployment .yml with --against reference)")
    device_opts(val)
    val.add_argument("--against", choices=["onnxruntime", "reference"],
                     help="the oracle (default: onnxruntime for .onnx files, else reference)")
    val.add_argument("--threads", type=int, metavar="T", help="threads for the session")
    val.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input (repeatable; else random)")
    val.add_argument("--inputs", metavar="FILE.npz", help="inputs by name from one .npz")
    val.add_argument("--shape", action="append", metavar="NAME=D,D,...", help="the whole shape of an input")
    val.add_argument("--batch", type=int, metavar="N", help="the leading symbolic dim of every input (others: 1)")
    val.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    val.add_argument("--json", metavar="FILE", help="write the comparison as JSON")
    val.set_defaults(func=cmd_validate)

    bis = sub.add_parser("bisect", help="find the first node whose kernel disagrees with the reference; write a repro")
    bis.add_argument("model", metavar="MODEL", help=".kkm, .onnx or deployment .yml")
    device_opts(bis)
    bis.add_argument("--threads", type=int, metavar="T", help="threads for the session")
    bis.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input (repeatable; else random)")
    bis.add_argument("--inputs", metavar="FILE.npz", help="inputs by name from one .npz")
    bis.add_argument("--shape", action="append", metavar="NAME=D,D,...", help="the whole shape of an input")
    bis.add_argument("--batch", type=int, metavar="N", help="the leading symbolic dim of every input (others: 1)")
    bis.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    bis.add_argument("--repro", metavar="DIR", default="bisect-repro",
                     help="folder for the culprit's repro: node.kkm, inputs.npz, a pytest file (default bisect-repro)")
    bis.add_argument("--json", metavar="FILE", help="write every node's comparison as JSON")
    bis.set_defaults(func=cmd_bisect)

    gra = sub.add_parser("graph", help="draw the compiled graph (after passes) as DOT, SVG or PNG")
    gra.add_argument("model", metavar="MODEL", help=".kkm, .onnx or deployment .yml")
    device_opts(gra)
    gra.add_argument("-o", "--output", metavar="OUT.dot|.svg|.png",
                     help="output file (.svg/.png need Graphviz's dot on PATH); default: DOT on stdout")
    gra.add_argument("--shape", action="append", metavar="NAME=D,D,...", help="the whole shape of an input")
    gra.add_argument("--batch", type=int, metavar="N", help="the leading symbolic dim of every input (others: 1)")
    gra.add_argument("--no-passes", action="store_true", help="draw the graph as stored, without graph passes")
    gra.set_defaults(func=cmd_graph)

    kern = sub.add_parser("kernels", help="list registered kernels")
    kern.add_argument("--op", help="only this op (e.g. Conv, or domain::Op); an unknown op suggests close names")
    kern.add_argument("--device", help="only kernels for this device (cpu, gpu, ...)")
    kern.add_argument("--vendor", help="only this vendor's kernels (reference, numba, opencl, ...)")
    kern.add_argument("--dtype", help="only kernels for this dtype (float32, int64, ..., or * for any-dtype ones)")
    kern.add_argument("--json", nargs="?", const="-", metavar="FILE",
                      help="print the kernels as JSON (to FILE if given, else instead of the table)")
    kern.set_defaults(func=cmd_kernels)

    conv = sub.add_parser("convert", help="convert an ONNX model to kernelkit's .kkm file")
    conv.add_argument("model", metavar="MODEL.onnx", help="the ONNX file to convert")
    conv.add_argument("-o", "--output", metavar="OUT.kkm",
                      help="where to write the .kkm (default: MODEL.kkm); OUT.onnx with --quantize: the int8 ONNX only")
    conv.add_argument("--quantize", choices=("dynamic", "static"), help="int8 with onnxruntime's quantizer first")
    conv.add_argument("--calibration", metavar="DIR", help="--quantize static: folder of .npy/.npz input samples")
    conv.add_argument("--reduce-range", action="store_true", help="--quantize: 7-bit weights (AVX2 without VNNI)")
    conv.set_defaults(func=cmd_convert)

    batch = sub.add_parser("batch", help="run a model over a folder of .npy/.npz files or a Parquet file")
    batch.add_argument("model", metavar="MODEL", help=".kkm or .onnx model")
    batch.add_argument("--input", required=True, metavar="DIR_OR_PARQUET",
                       help="a folder of .npy/.npz files, or a .parquet file with one column per model input")
    batch.add_argument("--output", required=True, metavar="DIR", help="folder for the outputs (created)")
    batch.add_argument("--engine", choices=("local", "ray", "dask"), default="local",
                       help="local: a process pool here; ray/dask: a local cluster, or the one at --address")
    batch.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (default 1)")
    batch.add_argument("--threads", type=int, metavar="T",
                       help="threads per worker (default: this machine's CPUs divided between the workers)")
    batch.add_argument("--batch-size", type=int, default=32, metavar="B", help="Parquet rows per work item")
    batch.add_argument("--address", metavar="ADDR", help="an existing Ray or Dask cluster to use")
    batch.add_argument("--cache-dir", metavar="DIR", help="a kernel cache folder the workers share")
    device_opts(batch)
    batch.set_defaults(func=cmd_batch)
    for command in sub.choices.values():  # -q also after the command; SUPPRESS keeps an earlier -q
        if "--quiet" not in command._option_string_actions:
            command.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                                 help="no progress display on stderr")
    return p


def main(argv=None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 validation failed, 2 error)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help or --version (argparse already printed it)
        return int(exc.code or 0)
    except UsageError as exc:
        _error(exc.code, str(exc))
        return 2
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
    progress.set_quiet(args.quiet)
    console = _console()
    try:
        return args.func(args, console)
    except KernelkitError as exc:
        _error(exc.code, str(exc))
    except OSError as exc:
        _error("KK_IO", f"{exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}")
    except MemoryError as exc:  # the last resort: sizes are checked before allocating where known
        _error("KK_MEMORY", f"out of memory{': ' + str(exc)[:200] if str(exc) else ''}")
    except KeyboardInterrupt:
        _error("KK_INTERRUPTED", "interrupted")
        return 130
    return 2


def _error(code: str, message: str) -> None:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    err.print(Text(f"error[{code}]: {' '.join(message.splitlines())}", style="bold red"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

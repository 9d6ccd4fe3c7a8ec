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
import time
from collections import Counter
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .deploy import is_deployment, load_deployment
from .errors import InputError, KernelkitError, brief
from .limits import MAX_RANDOM_ELEMENTS, checked_count
from .untrusted import open_regular, read_npy
from .ir import Model, TensorSpec

log = logging.getLogger("kernelkit.cli")

EXAMPLE = ("examples_data", "digits")  # package data: digits.kkm, test.npz, digits.yml
EXAMPLE_RUNS = 100


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
    from .session import _load_model

    if is_deployment(path):
        dep = load_deployment(path)
        return dep.model(), dict(device=dep.device, vendors=dep.vendors, fallback=dep.fallback,
                                 threads=dep.threads, passes=dep.passes, options=dict(dep.options))
    return _load_model(path), {}


def _concrete(spec: TensorSpec, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(dims.get(d, 1) if isinstance(d, str) else d for d in spec.shape)


def _random_input(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    if checked_count(shape, MAX_RANDOM_ELEMENTS) is None:
        raise InputError(f"a random input of shape {brief(list(shape))} is over {MAX_RANDOM_ELEMENTS} elements; "
                         f"give it with --input NAME=FILE.npy")
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


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


def _latency_table(times: list[float], title: str) -> Table:
    ms = np.array(times) * 1e3
    table = Table(title=title)
    for col in ("runs", "mean ms", "p50 ms", "p90 ms", "min ms"):
        table.add_column(col, justify="right")
    table.add_row(str(len(ms)), f"{ms.mean():.3f}", f"{np.percentile(ms, 50):.3f}", f"{np.percentile(ms, 90):.3f}",
                  f"{ms.min():.3f}")
    return table


def _benchmark(console: Console, sess, feeds: dict, runs: int) -> list[float]:
    from rich.progress import Progress

    for _ in range(3):  # warm-up: first-call compilation, caches, allocator
        sess.run(None, feeds)
    times = []
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("benchmark", total=runs)
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            times.append(time.perf_counter() - t0)
            progress.advance(task)
    return times


# -- run ---------------------------------------------------------------------------------------
def _run_example(args, console: Console) -> int:
    from .session import Session

    with ExitStack() as stack:
        folder = resources.files("kernelkit").joinpath(*EXAMPLE)
        model_path = stack.enter_context(resources.as_file(folder / "digits.kkm"))
        data_path = stack.enter_context(resources.as_file(folder / "test.npz"))
        sess = Session(model_path, **_session_kwargs(args))
        with np.load(data_path, allow_pickle=False) as data:
            x, labels = data["x"], data["label"]
        [probs] = sess.run(None, {"x": x})
        accuracy = float(np.mean(probs.argmax(axis=1) == labels))
        runs = args.benchmark if args.benchmark is not None else EXAMPLE_RUNS
        times = _benchmark(console, sess, {"x": x[:1]}, runs) if runs > 0 else []
    table = Table(title="digits CNN example (scikit-learn 8x8 digits)", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("device / kernels", ", ".join(f"{d}/{v}" for d, v in sorted(set(sess.placement().values()))))
    table.add_row("held-out images", str(len(labels)))
    table.add_row("accuracy", f"{accuracy:.2%} ({int(round(accuracy * len(labels)))}/{len(labels)})")
    console.print(table)
    if times:
        console.print(_latency_table(times, "latency, batch 1"))
    return 0


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "output"


def _run_model(args, console: Console) -> int:
    from .session import Session

    model, settings = _open_model(args.model)
    settings.update(_session_kwargs(args))
    sess = Session(model, **settings)
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
            feeds[info.name] = _random_input(rng, _concrete(spec, {}), spec.dtype)
            console.print(f"input {info.name}: random {spec.dtype}{list(feeds[info.name].shape)} "
                          f"(symbolic dims set to 1)" if not spec.is_static else
                          f"input {info.name}: random {spec.dtype}{list(feeds[info.name].shape)}")
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
        console.print(_latency_table(_benchmark(console, sess, feeds, args.benchmark), f"latency of {sess.graph.name}"))
    return 0


def _validate(args, sess, console: Console) -> int:
    if not is_deployment(args.model):
        raise InputError("--validate needs a deployment file (.yml) with a 'validation' section")
    checks = load_deployment(args.model).validate(sess)
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
def _parse_dims(pairs) -> dict[str, int]:
    dims = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not value.isdigit():
            raise InputError(f"--dim {pair!r}: expected SYMBOL=INT, e.g. N=1")
        dims[name] = int(value)
    return dims


def _flops(graph) -> tuple[int, list[str], list[str]]:
    """Total FLOPs of ``graph`` from each op's ``flops(ctx)``; also the ops without one and the
    nodes whose count is unknown (symbolic)."""
    from .registry import get_schema, normalize_attrs
    from .shape import InferContext

    total, missing, unknown = 0, set(), []
    for node in graph.nodes:
        schema = get_schema(node.op, node.domain)
        if schema.flops is None:
            missing.add(node.op_id)
            continue
        specs = [graph.values[i].spec if i else None for i in node.inputs]
        consts = [graph.values[i].data if i else None for i in node.inputs]
        attrs = normalize_attrs(schema, node.attrs, f"node {node.name!r}")
        n = schema.flops(InferContext(node, specs, attrs, consts))
        if n is None:
            unknown.append(node.name)
        else:
            total += int(n)
    return total, sorted(missing), unknown


def cmd_info(args, console: Console) -> int:
    from .session import Session

    model, settings = _open_model(args.model)
    settings.update(_session_kwargs(args))
    graph = model.graph
    loaded_ops = Counter(n.op_id for n in graph.nodes)
    dims = _parse_dims(args.dim)
    declared = {n: graph.values[n].spec for n in graph.inputs + graph.outputs if graph.values[n].spec}
    symbols = sorted({d for i in graph.inputs for d in graph.values[i].spec.shape if isinstance(d, str)})
    for name in graph.inputs:  # bind symbolic dims so shapes (and FLOPs) are concrete
        spec = graph.values[name].spec
        graph.values[name].spec = TensorSpec(_concrete(spec, dims), spec.dtype, spec.layout)
    sess = Session(model, **settings)
    g = sess.graph

    console.print(Text(graph.name, style="bold") + Text(f"  producer {model.producer}, opsets {model.opsets}"))
    io_table = Table(title="inputs and outputs")
    for col in ("kind", "name", "shape", "dtype"):
        io_table.add_column(col)
    for kind, names in (("input", g.inputs), ("output", g.outputs)):
        for name in names:
            spec = declared.get(name) or g.values[name].spec
            io_table.add_row(kind, name, str(list(spec.shape)), spec.dtype)
    console.print(io_table)

    compiled_ops = Counter(n.op_id for n in g.nodes)
    op_table = Table(title="ops")
    for col in ("op", "nodes (file)", "nodes (after passes)"):
        op_table.add_column(col)
    for op in sorted(set(loaded_ops) | set(compiled_ops)):
        op_table.add_row(op, str(loaded_ops.get(op, 0)), str(compiled_ops.get(op, 0)))
    console.print(op_table)

    params = sum(int(np.size(v.data)) for v in graph.values.values() if v.data is not None)
    nbytes = sum(int(np.asarray(v.data).nbytes) for v in graph.values.values() if v.data is not None)
    total, missing, unknown = _flops(g)
    console.print(f"parameters: {params:,} ({nbytes / 1e6:.3f} MB)")
    bound = ", ".join(f"{s}={dims.get(s, 1)}" for s in symbols)
    console.print(f"FLOPs: {total:,}" + (f" (with {bound})" if bound else ""))
    if missing:
        console.print(f"  ops without a flops function count 0: {', '.join(missing)}")
    if unknown:
        console.print(f"  nodes with an unknown (symbolic) count: {', '.join(unknown[:10])}")
    fired = ", ".join(f"{k} x{v}" for k, v in sess.passes_fired.items()) or "none"
    console.print(f"passes fired: {fired}")

    placement = sess.placement()
    place = Counter(placement.values())
    ops_at: dict[tuple, set] = {}
    for node in g.nodes:
        ops_at.setdefault(placement[node.name], set()).add(node.op_id)
    vendors = list(sess.vendors) if sess.vendors else "any"
    p_table = Table(title=f"placement (device {sess.device_name}, vendors {vendors})")
    for col in ("device", "vendor", "nodes", "ops"):
        p_table.add_column(col)
    for (device, vendor), count in sorted(place.items()):
        p_table.add_row(device, vendor, str(count), ", ".join(sorted(ops_at[(device, vendor)])))
    console.print(p_table)
    for _, message in sess.fallbacks:
        console.print(Text("fallback: ", style="yellow") + Text(message))
    return 0


# -- kernels, convert --------------------------------------------------------------------------
def cmd_kernels(args, console: Console) -> int:
    from .registry import kernel_entry, kernels

    keys = kernels(args.op, args.device, args.vendor, args.dtype)
    table = Table(title=f"registered kernels ({len(keys)})")
    for col in ("op", "device", "vendor", "dtype", "priority", "implementation"):
        table.add_column(col)
    for key in keys:
        entry = kernel_entry(key)
        impl = f"{entry.impl.__module__}.{getattr(entry.impl, '__qualname__', entry.impl)}"
        table.add_row(*key, str(entry.priority), impl)
    console.print(table)
    return 0


def cmd_convert(args, console: Console) -> int:
    import hashlib

    from .io import load, save

    try:
        from kernelkit_converters.onnx import convert
    except ImportError as exc:
        raise MissingExtraError(
            f"kernelkit convert needs the converters extra (kernelkit-converters): "
            f"pip install 'kernelkit-workspace[converters]' from the checkout ({exc})") from exc
    src = Path(args.model)
    out = Path(args.output) if args.output else src.with_suffix(".kkm")
    if out.resolve() == src.resolve() or (out.exists() and src.exists() and os.path.samefile(out, src)):
        raise InputError(f"convert: output {out} is the input model {src}; choose another -o")
    model = convert(src)
    save(model, out)
    back = load(out)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    console.print(f"wrote {out}: {len(back.graph.nodes)} nodes, {len(back.graph.constants)} constants, "
                  f"{out.stat().st_size:,} bytes, sha256 {digest}")
    return 0


# -- entry point -------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kernelkit", description="kernelkit inference runtime")
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v: info logs, -vv: debug logs")
    sub = p.add_subparsers(dest="command", required=True)

    def device_opts(sp):
        sp.add_argument("--device", help="device to run on (cpu, gpu, ...)")
        sp.add_argument("--vendors", help="kernel vendors in preference order, comma separated")

    run = sub.add_parser("run", help="run a model (no MODEL: the bundled digits example)")
    run.add_argument("model", nargs="?", metavar="MODEL", help=".kkm, .onnx or deployment .yml")
    device_opts(run)
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input (repeatable)")
    run.add_argument("--benchmark", type=int, metavar="N", help="time N runs (mean/p50/p90)")
    run.add_argument("--threads", type=int, metavar="T")
    run.add_argument("--output-dir", metavar="DIR", help="save each output as DIR/<name>.npy")
    run.add_argument("--seed", type=int, default=0, help="seed of random inputs")
    run.add_argument("--validate", action="store_true", help="check a deployment against its validation data")
    run.set_defaults(func=cmd_run)

    info = sub.add_parser("info", help="describe a model")
    info.add_argument("model", metavar="MODEL")
    device_opts(info)
    info.add_argument("--dim", action="append", metavar="SYMBOL=INT", help="bind a symbolic dim (default 1)")
    info.set_defaults(func=cmd_info)

    kern = sub.add_parser("kernels", help="list registered kernels")
    kern.add_argument("--op")
    kern.add_argument("--device")
    kern.add_argument("--vendor")
    kern.add_argument("--dtype")
    kern.set_defaults(func=cmd_kernels)

    conv = sub.add_parser("convert", help="convert an ONNX model to kernelkit's .kkm file")
    conv.add_argument("model", metavar="MODEL.onnx")
    conv.add_argument("-o", "--output", metavar="OUT.kkm")
    conv.set_defaults(func=cmd_convert)
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
    console = _console()
    try:
        return args.func(args, console)
    except KernelkitError as exc:
        _error(exc.code, str(exc))
    except OSError as exc:
        _error("KK_IO", f"{exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}")
    except MemoryError as exc:  # the last resort: sizes are checked before allocating where known
        _error("KK_MEMORY", f"out of memory{': ' + brief(str(exc), 200) if str(exc) else ''}")
    except KeyboardInterrupt:
        _error("KK_INTERRUPTED", "interrupted")
        return 130
    return 2


def _error(code: str, message: str) -> None:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    err.print(Text(f"error[{code}]: {' '.join(message.splitlines())}", style="bold red"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""What the tools share: opening MODEL, binding symbolic dims, making inputs, comparing outputs,
per-node FLOPs and the description of the environment."""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from .. import progress
from ..errors import InputError, brief
from ..ir import Model, TensorSpec
from ..limits import MAX_RANDOM_ELEMENTS, checked_count
from ..testing import tolerance
from ..untrusted import read_npz


@dataclass
class Source:
    """MODEL opened: the model, the session settings a deployment file implies, and the ONNX file
    behind it (when there is one: onnxruntime can run that)."""

    model: Model
    settings: dict
    path: Path | None
    onnx_path: Path | None
    deployment: object | None = None


def open_model(model) -> Source:
    """A Model, or a path to a .kkm, .onnx or deployment .yml file."""
    from ..deploy import is_deployment, load_deployment
    from ..loaders import load_model

    if isinstance(model, Model):
        return Source(model.copy(), {}, None, None)
    path = Path(model)
    if is_deployment(path):
        dep = load_deployment(path)
        settings = dict(device=dep.device, vendors=dep.vendors, fallback=dep.fallback, threads=dep.threads,
                        passes=dep.passes, options=dict(dep.options))
        onnx_path = dep.model_path if dep.model_path.suffix.lower() == ".onnx" else None
        return Source(dep.model(), settings, path, onnx_path, dep)
    with progress.task(f"loading {path.name}"):  # an .onnx file is converted here
        loaded = load_model(path)
    return Source(loaded, {}, path, path if path.suffix.lower() == ".onnx" else None)


def session_settings(src: Source, options: dict | None = None, **overrides) -> dict:
    """The Session arguments for ``src``: its own settings (a deployment file's), then each of
    ``overrides`` that is not None (``vendors`` as a tuple), then ``options`` merged into its options."""
    settings = dict(src.settings)
    if overrides.get("vendors") is not None:
        overrides["vendors"] = tuple(overrides["vendors"])
    settings.update({k: v for k, v in overrides.items() if v is not None})
    settings["options"] = {**(settings.get("options") or {}), **(options or {})}
    return settings


def parse_shapes(pairs) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,224,224", ...]`` -> {"x": (1, 3, 224, 224)}."""
    shapes = {}
    for pair in pairs or []:
        name, sep, dims = pair.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise InputError(f"--shape {pair!r}: expected NAME=D,D,... with non-negative ints, e.g. x=1,3,224,224")
        shapes[name] = shape
    return shapes


def bind_inputs(model: Model, shapes: dict | None = None, batch: int | None = None,
                given: dict | None = None) -> dict[str, tuple]:
    """Make the model's input specs concrete, in place: ``shapes`` give whole shapes by input name
    (as do the arrays in ``given``), ``batch`` the leading symbolic dim of every other input; the
    remaining symbolic dims become 1. Returns the shapes used."""
    graph = model.graph
    shapes = {**{n: tuple(np.shape(a)) for n, a in (given or {}).items() if n in graph.inputs}, **(shapes or {})}
    unknown = sorted(set(shapes) - set(graph.inputs))
    if unknown:
        raise InputError(f"--shape {unknown}: model {graph.name!r} has inputs {graph.inputs}")
    if batch is not None and batch < 1:
        raise InputError(f"--batch must be >= 1, got {batch}")
    used = {}
    for name in graph.inputs:
        spec = graph.values[name].spec
        if name in shapes:
            shape = shapes[name]
            if len(shape) != spec.rank or any(isinstance(d, int) and d != s for d, s in zip(spec.shape, shape)):
                raise InputError(f"--shape {name}={','.join(map(str, shape))} does not fit the model's {spec}")
        else:
            shape = tuple(d if isinstance(d, int) else (batch if i == 0 and batch else 1)
                          for i, d in enumerate(spec.shape))
        graph.values[name].spec = TensorSpec(shape, spec.dtype, spec.layout)
        used[name] = shape
    return used


def random_input(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Normal floats, ints in [0, 10), coin-flip bools; at most ``limits.MAX_RANDOM_ELEMENTS``."""
    if checked_count(shape, MAX_RANDOM_ELEMENTS) is None:
        raise InputError(f"a random input of shape {brief(list(shape))} is over {MAX_RANDOM_ELEMENTS} elements; "
                         f"give it with --input NAME=FILE.npy")
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def make_feeds(model: Model, given: dict | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """``given`` arrays plus random ones (of the model's now concrete input specs) for the rest."""
    graph = model.graph
    feeds = dict(given or {})
    unknown = sorted(set(feeds) - set(graph.inputs))
    if unknown:
        raise InputError(f"inputs {unknown}: model {graph.name!r} has inputs {graph.inputs}")
    rng = np.random.default_rng(seed)
    for name in graph.inputs:
        if name not in feeds:
            spec = graph.values[name].spec
            feeds[name] = random_input(rng, tuple(d if isinstance(d, int) else 1 for d in spec.shape), spec.dtype)
    return feeds


def load_inputs(path) -> dict[str, np.ndarray]:
    """An .npz of named inputs (no pickles)."""
    try:  # member headers checked against their data before allocating; FIFOs refused
        return read_npz(path, str(path))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read inputs: {exc}") from exc


# -- comparison ------------------------------------------------------------------------------------
@dataclass
class Comparison:
    """One output (or value) compared with its expected array, judged by the dtype's tolerance the
    way ``kernelkit.testing.assert_close`` judges it (atol scaled by max|expected| above 1)."""

    name: str
    dtype: str
    shape: tuple
    cosine: float
    max_abs: float
    max_rel: float
    rtol: float
    atol: float
    passed: bool

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "cosine": self.cosine,
                "max_abs_error": self.max_abs, "max_rel_error": self.max_rel, "rtol": self.rtol,
                "atol": self.atol, "passed": self.passed}


def compare(name: str, actual, expected, tolerances: dict | None = None) -> Comparison:
    """``tolerances`` (dtype -> (rtol, atol)) overrides TOLERANCES, e.g. a deployment file's."""
    from ..testing import cosine

    actual, expected = np.asarray(actual), np.asarray(expected)
    rtol, atol = (tolerances or {}).get(expected.dtype.name) or tolerance(expected.dtype)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Comparison(name, expected.dtype.name, expected.shape, 0.0, float("inf"), float("inf"),
                          rtol, atol, False)
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    finite = np.isfinite(e)
    scale = float(np.max(np.abs(e[finite]), initial=0.0))
    diff = np.abs(a - e)
    diff[np.isnan(a) & np.isnan(e)] = 0.0
    diff[np.isinf(a) & (a == e)] = 0.0
    max_abs = float(np.max(diff, initial=0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(diff == 0, 0.0, diff / np.abs(e))
    max_rel = float(np.max(rel, initial=0.0))
    if rtol == 0 and atol == 0:
        passed = bool(np.array_equal(actual, expected, equal_nan=actual.dtype.kind == "f"))
    else:
        passed = bool(np.allclose(actual, expected, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True))
    cos = cosine(np.nan_to_num(a), np.nan_to_num(e)) if actual.size else 1.0
    return Comparison(name, expected.dtype.name, expected.shape, cos, max_abs, max_rel, rtol, atol, passed)


# -- FLOPs -----------------------------------------------------------------------------------------
def node_flops(graph) -> dict[str, int | None]:
    """FLOPs of each node from its op's ``flops(ctx)`` (a multiply-add counts 2); None where the
    op has no flops function or the count depends on an unbound symbol."""
    from ..registry import get_schema, normalize_attrs
    from ..shape import InferContext

    out = {}
    for node in graph.nodes:
        schema = get_schema(node.op, node.domain)
        if schema.flops is None:
            out[node.name] = None
            continue
        specs = [graph.values[i].spec if i else None for i in node.inputs]
        consts = [graph.values[i].data if i else None for i in node.inputs]
        attrs = normalize_attrs(schema, node.attrs, f"node {node.name!r}")
        n = schema.flops(InferContext(node, specs, attrs, consts))
        out[node.name] = None if n is None else int(n)
    return out


# -- environment -----------------------------------------------------------------------------------
def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[dict]:
    """OpenCL devices (name, platform, driver) when pyopencl is installed and finds any."""
    try:
        import pyopencl as cl

        return [{"platform": p.name, "name": d.name.strip(), "driver": d.driver_version,
                 "type": cl.device_type.to_string(d.type)}
                for p in cl.get_platforms() for d in p.get_devices()]
    except Exception:  # noqa: BLE001 - no OpenCL, no ICD, a broken driver: report none
        return []


def _cache_state() -> dict:
    """Each loaded backend's ``cache_info()`` (its package's top-level function, when it has one),
    by backend name: core names no backend package."""
    from importlib.metadata import entry_points

    from ..backends import GROUP, load_backends

    state = {}
    for name, status in load_backends().items():
        if status != "ok":
            continue
        for ep in entry_points(group=GROUP, name=name):
            module = sys.modules.get(ep.module.split(":")[0])
            info = getattr(module, "cache_info", None)
            if callable(info):
                try:
                    state[name] = info()
                except Exception as exc:  # noqa: BLE001 - a report, not a reason to fail the bench
                    state[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return state


def environment(sess=None, gpus: bool | None = None) -> dict:
    """Versions, CPU and GPU names, drivers, threads, cache state and (given a session) its
    placement, kernel keys and memory plan."""
    import kernelkit

    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {"kernelkit": kernelkit.__version__,
                     **{d: _version(d) for d in ("numpy", "numba", "pyopencl", "onnx", "onnxruntime",
                                                   "kernelkit-numba", "kernelkit-opencl", "kernelkit-converters")}},
        "cpu": {"name": cpu_name(), "cores": os.cpu_count()},
        "cache": _cache_state(),
    }
    uses_gpu = sess is not None and any(name != "cpu" for name in sess.devices())
    if gpus if gpus is not None else uses_gpu:
        env["gpus"] = _gpus()
    if sess is not None:
        env["threads"] = sess.threads
        env["device"] = sess.device_name
        env["vendors"] = list(sess.vendors) if sess.vendors else None
        env["devices"] = sess.devices()
        env["kernels"] = session_kernels(sess)
        memory = getattr(sess, "memory", None)  # Session.memory(): the arena plan, when it exists
        if callable(memory):
            try:
                env["memory"] = _jsonable(memory())
            except Exception as exc:  # noqa: BLE001 - a report must not fail on a diagnostic
                env["memory"] = {"error": f"{type(exc).__name__}: {exc}"}
    return env


def session_kernels(sess) -> list[dict]:
    """Node -> kernel key (op, device, vendor, dtype) of each node of a session, in run order."""
    rows = {r["node"]: r for r in sess.profile()}
    return [{"node": n.name, "op": rows[n.name]["op"], "device": rows[n.name]["device"],
             "vendor": rows[n.name]["vendor"], "dtype": rows[n.name]["dtype"]} for n in sess.graph.nodes]


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if hasattr(obj, "__dict__"):
        return _jsonable(vars(obj))
    return str(obj)

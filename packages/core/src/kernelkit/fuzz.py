"""Structured mutation fuzzing of every reader of untrusted files (see docs/robustness.md).

Four targets, each a valid seed file mutated by hypothesis-chosen edits that keep most of the
structure, so that mutations get past the first parse:

- ``kkm``: a saved ``.kkm``; edits to its JSON tree (replace, delete, duplicate a value; huge and
  negative ints, symbols, wrong types) or byte flips, with the header and the JSON checksum
  recomputed so the loader's structural checks, not the checksum, meet the damage.
- ``onnx``: a small ONNX model (Conv, Softmax, Reshape, an initializer, an external-data tensor);
  edits to any protobuf field (ints at the int64 limits, non-UTF-8 strings, extra repeated items)
  or byte flips of the serialized model, converted with ``check`` on or off.
- ``deploy``: a deployment YAML; edits to its tree and to its text (anchors, aliases, tags).
- ``custom``: the custom-kernel XML and YAML configs of examples/custom_opencl, text edits, read
  with the OpenCL package's custom-layer reader (no device needed; readers come from the
  ``kernelkit.fuzz`` entry-point group).

A case passes when the reader returns or raises a ``KernelkitError``; anything else is "untyped".
``tests`` run each target for a few seconds in-process (packages/core/tests/test_fuzz.py). The long
run executes each case in a worker process with a per-case timeout and an address-space cap
(``resource.setrlimit`` in the child) and reports inputs, typed errors, untyped, hangs and peak RSS::

    python -m kernelkit.fuzz --seconds 600            # every target, 10 minutes each
    python -m kernelkit.fuzz --target kkm --seconds 60 --save-dir fuzz-failures

hypothesis is a test dependency; this module needs it only when fuzzing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import tempfile
import time
import traceback
from pathlib import Path

TARGETS = ("kkm", "onnx", "deploy", "custom")
EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "custom_opencl"


# -- outcome of one case ----------------------------------------------------------------------------
def classify(fn, *args) -> tuple[str, str]:
    """("ok" | "typed" | "untyped", detail) for ``fn(*args)``."""
    from .errors import KernelkitError

    try:
        fn(*args)
    except KernelkitError as exc:
        return "typed", type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return "untyped", f"{type(exc).__name__}: {str(exc)[:160]} ({Path(frame.filename).name}:{frame.lineno})"
    return "ok", ""


# -- seeds -------------------------------------------------------------------------------------------
def _seed_model():
    import numpy as np

    from .builder import GraphBuilder

    g = GraphBuilder("seed")
    x = g.input("x", ("N", 4), "float32")
    w = g.constant(np.arange(12, dtype=np.float32).reshape(3, 4), name="w")
    y = g.op("Gemm", x, w, transB=1, alpha=0.5, name="gemm")
    g.output(g.op("Softmax", g.op("LeakyRelu", y, alpha=0.1), axis=-1, name="y"))
    return g.build()


class Workspace:
    """A temporary folder holding every target's seed files; reused by all cases of a run."""

    def __init__(self, folder: Path, examples: Path | None = None):
        """``examples``: the checkout's examples/custom_opencl (the custom target's seeds); by default
        the one beside this source tree, found when kernelkit runs from a checkout."""
        from . import io

        examples = Path(examples) if examples is not None else EXAMPLES

        self.folder = folder
        (folder / "m.kkm").parent.mkdir(parents=True, exist_ok=True)
        io.save(_seed_model(), folder / "m.kkm")
        self.kkm = (folder / "m.kkm").read_bytes()
        self.deploy = ("name: seed\nmodel: m.kkm\ndevice: cpu\nvendors: [reference]\nfallback: true\n"
                       "threads: 2\npasses: true\noptions: {fold_max_bytes: 1024}\n"
                       "inputs:\n  - {name: x, shape: [N, 4], dtype: float32}\n")
        self.onnx = None
        self.custom = {}
        if examples.is_dir():
            for name in ("leaky_relu.xml", "leaky_relu.yml", "leaky_relu.cl"):
                (folder / name).write_bytes((examples / name).read_bytes())
            self.custom = {s: (examples / f"leaky_relu{s}").read_text() for s in (".xml", ".yml")}

    def onnx_seed(self) -> bytes:
        if self.onnx is None:
            self.onnx = _onnx_seed(self.folder)
        return self.onnx


def _onnx_seed(folder: Path) -> bytes:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    ext = TensorProto(name="e", data_type=TensorProto.FLOAT, dims=[2])
    ext.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "e.bin"), ("offset", "0"), ("length", "8")):
        ext.external_data.add(key=key, value=value)
    (folder / "e.bin").write_bytes(np.array([1, 2], np.float32).tobytes())
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("Softmax", ["r"], ["s"], axis=1),
             helper.make_node("Concat", ["s", "e2"], ["y"], axis=1),
             ]
    nodes.insert(3, helper.make_node("Unsqueeze", ["e", "axes"], ["e2"]))
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 34])
    graph = helper.make_graph(nodes, "seed", [x], [y], [w, shape, ext, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


# -- mutations (hypothesis strategies) ----------------------------------------------------------------
def _strategies():
    from hypothesis import strategies as st

    ints = st.one_of(st.integers(-3, 70), st.sampled_from([-1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64,
                                                           2**70, -2**63]))
    scalars = st.one_of(st.none(), st.booleans(), ints, st.floats(allow_nan=True), st.text(max_size=8),
                        st.sampled_from(["N", "", "nan", "inf", "../x", "/etc/passwd", "m.kkm", "\x00",
                                         "float32", "int64", "tensor", "ints"]))
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
    return st, ints, values


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def mutate_tree(draw, doc, rounds: int = 3):
    """Apply 1..rounds structural edits to a JSON-like tree (in place) and return it."""
    st, ints, values = _strategies()
    for _ in range(draw(st.integers(1, rounds))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = draw(st.sampled_from(["replace", "replace", "int", "delete", "duplicate", "wrap"]))
        if op == "replace":
            parent[key] = draw(values)
        elif op == "int":
            parent[key] = draw(ints)
        elif op == "delete":
            del parent[key]
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, parent[key])
        elif op == "wrap":
            parent[key] = [parent[key]]
    return doc


def mutate_bytes(draw, raw: bytes, start: int = 0) -> bytes:
    st, _, _ = _strategies()
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        if len(data) <= start:
            break
        pos = draw(st.integers(start, len(data) - 1))
        data[pos] = draw(st.integers(0, 255))
    return bytes(data)


def mutate_text(draw, text: str) -> str:
    st, _, _ = _strategies()
    pieces = ["&a [*a, *a]", "*a", "!!binary AA==", "!!python/object:os.system", "\x00", "\uffff", "'", '"',
              "<", ">", "&", "]]>", "<!ENTITY x \"y\">", "&x;", "\n", "   ", "9" * 40, "-1", "{", "}", ":",
              "[", "]", "#include \"/etc/passwd\"", "B*F*Y*X*99999999999", "1e999", "0x7fffffff"]
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.sampled_from(pieces) | st.text(max_size=6))
        if op == "insert":
            text = text[:pos] + piece + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 12)):]
        else:
            text = text[:pos] + piece + text[pos + len(piece):]
    return text


# -- targets: draw an input (hypothesis), then run it -------------------------------------------------
_HEADER = struct.Struct("<8sIIQQQ32s")


def _kkm_with_json(raw: bytes, text: bytes) -> bytes:
    header = _HEADER.unpack_from(raw, 0)
    blob = raw[header[4]:header[4] + header[5]]
    offset = -(-(_HEADER.size + len(text)) // 64) * 64
    head = _HEADER.pack(header[0], header[1], header[2], len(text), offset, len(blob), hashlib.sha256(text).digest())
    return head + text + b"\0" * (offset - _HEADER.size - len(text)) + blob


def draw_kkm(draw, ws: Workspace) -> bytes:
    from hypothesis import strategies as st

    raw = ws.kkm
    header = _HEADER.unpack_from(raw, 0)
    if draw(st.integers(0, 4)) == 0:
        return mutate_bytes(draw, raw)
    doc = json.loads(raw[_HEADER.size:_HEADER.size + header[3]])
    return _kkm_with_json(raw, json.dumps(mutate_tree(draw, doc), allow_nan=True).encode())


def run_kkm(payload: bytes, ws: Workspace):
    from . import io

    path = ws.folder / "case.kkm"
    path.write_bytes(payload)
    io.load(path)


def _proto_fields(message, prefix=()):
    """Every (message, field descriptor, index or None) reachable in ``message``."""
    for field, value in message.ListFields():
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        items = list(value) if repeated else [value]
        yield message, field, None
        for i, item in enumerate(items):
            if field.type == field.TYPE_MESSAGE:
                yield from _proto_fields(item, prefix + (field.name, i))


def draw_onnx(draw, ws: Workspace) -> bytes:
    from hypothesis import strategies as st
    from onnx import ModelProto

    raw = ws.onnx_seed()
    if draw(st.integers(0, 5)) == 0:
        return mutate_bytes(draw, raw)
    model = ModelProto()
    model.ParseFromString(raw)
    _, ints, _ = _strategies()
    for _ in range(draw(st.integers(1, 3))):
        message, field, _ = draw(st.sampled_from(list(_proto_fields(model))))
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        container = getattr(message, field.name)
        try:
            if field.type == field.TYPE_MESSAGE:
                if repeated and len(container) and draw(st.booleans()):
                    container.add().CopyFrom(container[draw(st.integers(0, len(container) - 1))])
                elif repeated and len(container):
                    del container[draw(st.integers(0, len(container) - 1))]
                continue
            if field.type in (field.TYPE_STRING, field.TYPE_BYTES):
                value = draw(st.sampled_from([b"\xff\xfe", b"", b"../../etc/passwd", b"x" * 3, b"N", b"e.bin",
                                              b"/dev/zero", b"axis", b"\x00"]) | st.binary(max_size=6))
                if field.type == field.TYPE_STRING:
                    value = value.decode("latin-1") if draw(st.booleans()) else value
            elif field.type in (field.TYPE_FLOAT, field.TYPE_DOUBLE):
                value = draw(st.floats(width=32))
            else:
                value = draw(ints)
            if repeated:
                if len(container) and draw(st.booleans()):
                    container[draw(st.integers(0, len(container) - 1))] = value
                else:
                    container.append(value)
            else:
                setattr(message, field.name, value)
        except (TypeError, ValueError, OverflowError):  # protobuf refuses the value itself
            continue
    return model.SerializeToString()


def _reader(name: str):
    """The parser a fuzz target drives, from the ``kernelkit.fuzz`` entry-point group (the packages
    that own the formats declare them; core names none of them)."""
    from importlib.metadata import entry_points

    found = list(entry_points(group="kernelkit.fuzz", name=name))
    if not found:  # not a KernelkitError: a run without its reader must fail loudly, not pass every case
        raise RuntimeError(f"no package declares the fuzz target {name!r} (entry-point group 'kernelkit.fuzz')")
    return found[0].load()


def run_onnx(payload: bytes, ws: Workspace, check: bool = True):
    convert = _reader("onnx")
    convert(payload[1:], base_dir=ws.folder, check=payload[:1] == b"c")


def draw_deploy(draw, ws: Workspace) -> bytes:
    import yaml
    from hypothesis import strategies as st

    if draw(st.integers(0, 2)) == 0:
        return mutate_text(draw, ws.deploy).encode("utf-8", "surrogatepass")
    doc = mutate_tree(draw, yaml.safe_load(ws.deploy))
    try:
        return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
    except yaml.YAMLError:
        return ws.deploy.encode()


def run_deploy(payload: bytes, ws: Workspace):
    from .deploy import load_deployment

    path = ws.folder / "case.yml"
    path.write_bytes(payload)
    load_deployment(path)


def draw_custom(draw, ws: Workspace) -> bytes:
    import yaml
    from hypothesis import strategies as st

    suffix = draw(st.sampled_from([".xml", ".yml"]))
    seed = ws.custom[suffix]
    if suffix == ".yml" and draw(st.booleans()):
        doc = mutate_tree(draw, yaml.safe_load(seed))
        try:
            text = yaml.safe_dump(doc, allow_unicode=True)
        except yaml.YAMLError:
            text = seed
    else:
        text = mutate_text(draw, seed)
    return suffix.encode() + b"\n" + text.encode("utf-8", "surrogatepass")


def run_custom(payload: bytes, ws: Workspace):
    read_config = _reader("custom")
    suffix, _, text = payload.partition(b"\n")
    path = ws.folder / f"case{suffix.decode()}"
    path.write_bytes(text)
    read_config(path)


def draw_case(draw, target: str, ws: Workspace) -> bytes:
    from hypothesis import strategies as st

    if target == "kkm":
        return draw_kkm(draw, ws)
    if target == "onnx":
        return (b"c" if draw(st.booleans()) else b"-") + draw_onnx(draw, ws)
    if target == "deploy":
        return draw_deploy(draw, ws)
    return draw_custom(draw, ws)


RUNNERS = {"kkm": run_kkm, "onnx": run_onnx, "deploy": run_deploy, "custom": run_custom}


def run_case(target: str, payload: bytes, ws: Workspace) -> tuple[str, str]:
    import warnings

    import numpy as np

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return classify(RUNNERS[target], payload, ws)


# -- the long run: a worker process per target, per-case timeout, address-space cap ----------------------
def _worker(conn, folder: str, mem_limit: int) -> None:
    import resource

    if mem_limit:
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
    ws = Workspace(Path(folder))
    conn.send(("ready", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        target, payload = msg
        kind, detail = run_case(target, payload, ws)
        conn.send((kind, detail, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


class Worker:
    def __init__(self, folder: Path, mem_limit: int):
        import multiprocessing as mp

        self.ctx = mp.get_context("spawn")
        self.folder, self.mem_limit = folder, mem_limit
        self.start()

    def start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, str(self.folder), self.mem_limit), daemon=True)
        self.proc.start()
        if not self.conn.poll(120):
            raise RuntimeError("fuzz worker did not start")
        self.base_rss = self.conn.recv()[1] * 1024

    def stop(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()

    def case(self, target: str, payload: bytes, timeout: float) -> tuple[str, str, int]:
        try:
            self.conn.send((target, payload))
            if self.conn.poll(timeout):
                kind, detail, rss_kb = self.conn.recv()
                return kind, detail, rss_kb * 1024
            outcome = ("hang", f"no answer in {timeout} s", 0)
        except (EOFError, OSError, BrokenPipeError):
            outcome = ("crash", f"worker died (exit {self.proc.exitcode})", 0)
        self.stop()
        self.start()
        return outcome


def fuzz_target(target: str, seconds: float, timeout: float, mem_limit: int, rss_limit: int,
                save_dir: Path | None, seed: int = 0) -> dict:
    """Fuzz ``target`` for ``seconds`` in a worker process; returns the figures."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import FlakyStrategyDefinition

    folder = Path(tempfile.mkdtemp(prefix=f"kk-fuzz-{target}-"))
    ws = Workspace(folder)
    worker = Worker(folder, mem_limit)
    stats = {"target": target, "inputs": 0, "ok": 0, "typed": 0, "untyped": 0, "hangs": 0, "crashes": 0,
             "over_rss": 0, "peak_rss_mb": 0.0, "seconds": 0.0, "failures": []}
    deadline = time.monotonic() + seconds
    start = time.monotonic()

    @settings(max_examples=200, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def batch(data):
        if time.monotonic() > deadline:
            return  # draws nothing: hypothesis ends the batch quickly
        payload = draw_case(data.draw, target, ws)
        kind, detail, rss = worker.case(target, payload, timeout)
        stats["inputs"] += 1
        stats["peak_rss_mb"] = max(stats["peak_rss_mb"], rss / 2**20)
        if rss > rss_limit:
            worker.stop()
            worker.start()  # a fresh peak for the next cases
            kind, detail = "over_rss", f"{rss / 2**20:.0f} MiB"
        stats[{"hang": "hangs", "crash": "crashes"}.get(kind, kind)] += 1
        if kind not in ("ok", "typed"):
            stats["failures"].append(f"{kind}: {detail}")
            if save_dir is not None:
                save_dir.mkdir(parents=True, exist_ok=True)
                name = hashlib.sha256(payload).hexdigest()[:16]
                (save_dir / f"{target}-{name}.bin").write_bytes(payload)

    try:
        while time.monotonic() < deadline:
            try:
                batch()
            except FlakyStrategyDefinition:  # the deadline cut a case short: hypothesis notices
                if time.monotonic() < deadline:
                    raise
    finally:
        if worker.proc.is_alive():
            worker.conn.send(None)
        worker.stop()
    stats["seconds"] = round(time.monotonic() - start, 1)
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernelkit.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=TARGETS + ("all",), default="all")
    p.add_argument("--seconds", type=float, default=600, help="per target (default 600 = 10 minutes)")
    p.add_argument("--timeout", type=float, default=10, help="per case, seconds (a case over it is a hang)")
    p.add_argument("--mem-limit-mb", type=int, default=4096, help="address-space cap of the worker (setrlimit)")
    p.add_argument("--rss-limit-mb", type=int, default=1024, help="a case whose worker passes this RSS counts")
    p.add_argument("--save-dir", type=Path, help="write every failing input here")
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = p.parse_args(argv)
    results = []
    for target in TARGETS if args.target == "all" else (args.target,):
        stats = fuzz_target(target, args.seconds, args.timeout, args.mem_limit_mb * 2**20,
                            args.rss_limit_mb * 2**20, args.save_dir)
        results.append(stats)
        print(f"{target}: {stats['inputs']} inputs in {stats['seconds']} s, {stats['ok']} ok, {stats['typed']} typed, "
              f"{stats['untyped']} untyped, {stats['hangs']} hangs, {stats['crashes']} crashes, "
              f"{stats['over_rss']} over RSS limit, peak RSS {stats['peak_rss_mb']:.0f} MiB", flush=True)
        for line in sorted(set(stats["failures"]))[:20]:
            print("   ", line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print("\n| target | inputs | ok | typed errors | untyped | hangs | crashes | peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for s in results:
        print(f"| {s['target']} | {s['inputs']} | {s['ok']} | {s['typed']} | {s['untyped']} | {s['hangs']} | "
              f"{s['crashes']} | {s['peak_rss_mb']:.0f} MiB |")
    return 1 if any(s["untyped"] or s["hangs"] or s["crashes"] or s["over_rss"] for s in results) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

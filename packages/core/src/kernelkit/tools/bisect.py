"""``kernelkit bisect``: find the first node whose kernel leaves the tolerance, and write a repro.

The model is compiled for the target (device, vendors): that fixes the graph after passes and the
kernel of every node. The NumPy reference kernels then compute every value of that graph. Each node
is run alone through its target kernel on the reference's inputs, so an error is pinned on one
kernel instead of spreading down the graph; the first node (in run order) whose outputs leave the
dtype tolerance is the culprit. Its repro folder holds the node as a one-node ``node.kkm``, its
inputs as ``inputs.npz`` and a pytest file that fails until the kernel is fixed.

    from kernelkit.tools import bisect
    result = bisect("model.kkm", device="gpu", repro_dir="repro")
    result.culprit.key, result.culprit.activation, result.repro
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import progress
from ..errors import KernelkitError
from ..ir import Graph, Model, Node
from ._common import Comparison, bind_inputs, compare, make_feeds, open_model, session_kernels, session_settings

REFERENCE = ("reference",)


@dataclass
class NodeCheck:
    """One node run alone through its target kernel on the reference's inputs."""

    node: str
    op: str
    key: tuple  # (op, device, vendor, dtype)
    activation: str | None = None
    layout: list[str] = field(default_factory=list)  # layout changes and device transfers at this node
    outputs: list[Comparison] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed for c in self.outputs)

    def to_json(self) -> dict:
        return {"node": self.node, "op": self.op, "key": list(self.key), "activation": self.activation,
                "layout": self.layout, "passed": self.passed, "error": self.error,
                "outputs": [c.to_json() for c in self.outputs]}


@dataclass
class BisectResult:
    model: str
    device: str
    vendors: list | None
    checks: list[NodeCheck]
    outputs: list[Comparison]  # the whole model, target vs reference (empty if the target run failed)
    repro: Path | None = None
    run_error: str | None = None  # why the target's whole-model run failed, if it did
    passes: list[Comparison] = field(default_factory=list)  # reference: graph as stored vs after passes

    @property
    def failing(self) -> list[NodeCheck]:
        return [c for c in self.checks if not c.passed]

    @property
    def culprit(self) -> NodeCheck | None:
        """The first node, in run order, whose kernel leaves the tolerance (None: all agree)."""
        bad = self.failing
        return bad[0] if bad else None

    def to_json(self) -> dict:
        return {"model": self.model, "device": self.device, "vendors": self.vendors, "run_error": self.run_error,
                "culprit": self.culprit.to_json() if self.culprit else None,
                "repro": str(self.repro) if self.repro else None,
                "passes": [c.to_json() for c in self.passes],
                "outputs": [c.to_json() for c in self.outputs], "nodes": [c.to_json() for c in self.checks]}


def _reference_values(graph: Graph, feeds: dict) -> dict[str, np.ndarray]:
    """Every value of ``graph`` (after passes) computed by the reference kernels."""
    from ..session import Session

    exposed = graph.copy()
    exposed.outputs = list(dict.fromkeys(o for n in graph.nodes for o in n.outputs if o))
    sess = Session(Model(exposed), device="cpu", vendors=REFERENCE, passes=False)
    values = dict(zip(exposed.outputs, sess.run(None, feeds)))
    values.update(feeds)
    values.update({n: np.asarray(v.data) for n, v in graph.values.items() if v.data is not None})  # folded
    return values


def node_model(graph: Graph, node: Node, values: dict) -> tuple[Model, list[np.ndarray]]:
    """``node`` alone as a Model: its constants kept, its other inputs made graph inputs (shaped
    like ``values``); returns the model and those inputs' arrays, in graph-input order."""
    from ..builder import GraphBuilder

    g = GraphBuilder(f"bisect_{node.name}")
    made: dict[str, object] = {}
    arrays = []
    args = []
    for name in node.inputs:
        if not name:
            args.append(None)
        elif name in made:
            args.append(made[name])
        elif graph.values[name].data is not None:
            made[name] = g.constant(graph.values[name].data, name=name)
            args.append(made[name])
        else:
            arr = np.asarray(values[name])
            made[name] = g.input(name, arr.shape, arr.dtype.name)
            arrays.append(arr)
            args.append(made[name])
    out = g.op(node.op, *args, domain=node.domain, name=node.name, outputs=len(node.outputs), **node.attrs)
    g.output(*(out if isinstance(out, tuple) else (out,)))
    return g.build(), arrays


def _layout_notes(graph: Graph, node: Node, placement: dict) -> list[str]:
    notes = []
    producers = graph.producers()
    for name in node.inputs:
        if not name:
            continue
        before = producers.get(name)
        where = placement.get(before.name, ("cpu", ""))[0] if before is not None else "cpu"
        if where != placement[node.name][0]:
            notes.append(f"input {name!r} moves {where} -> {placement[node.name][0]}")
    ins = {graph.values[i].spec.layout for i in node.inputs if i and graph.values[i].spec}
    outs = {graph.values[o].spec.layout for o in node.outputs if o and graph.values[o].spec}
    if ins != outs and (ins | outs) - {None}:
        notes.append(f"layout {sorted(map(str, ins))} -> {sorted(map(str, outs))}")
    if re.search(r"reorder|layout", node.op, re.IGNORECASE):
        notes.append(f"{node.op_id} is a reorder node")
    return notes


def bisect(model, *, device: str | None = None, vendors=None, threads: int | None = None, shapes=None,
           batch: int | None = None, inputs: dict | None = None, seed: int = 0, repro_dir=None,
           options: dict | None = None) -> BisectResult:
    """Check every node of ``model`` compiled for ``device``/``vendors`` against the reference
    kernels (see the module doc). With ``repro_dir``, writes the culprit's repro folder there."""
    from ..session import Session

    src = open_model(model)
    bind_inputs(src.model, shapes, batch, inputs)
    feeds = make_feeds(src.model, inputs, seed)
    settings = session_settings(src, options, device=device, vendors=vendors, threads=threads)
    with progress.task("bisect: compiling the target and the reference"):
        target = Session(src.model, **settings)
        graph = target.graph
        try:
            got, run_error = target.run(None, feeds), None
        except KernelkitError as exc:  # a crashing kernel is what bisect is for: find it below
            got, run_error = [], f"{type(exc).__name__}: {exc}"
        values = _reference_values(graph, feeds)
        as_stored = Session(src.model, device="cpu", vendors=REFERENCE, passes=False)
        stored = dict(zip(as_stored.graph.outputs, as_stored.run(None, feeds)))
    keys = {k["node"]: (k["op"], k["device"], k["vendor"], k["dtype"]) for k in session_kernels(target)}
    placement = target.placement()
    result = BisectResult(str(src.path) if src.path else graph.name, target.device_name,
                          list(target.vendors) if target.vendors else None, [],
                          [compare(n, a, values[n]) for n, a in zip(graph.outputs, got)], run_error=run_error,
                          passes=[compare(n, values[n], stored[n]) for n in graph.outputs if n in stored])
    with progress.task("bisect: node by node", total=len(graph.nodes)) as advance:
        for node in graph.nodes:
            result.checks.append(_check_node(graph, node, keys[node.name], values, placement, target, settings))
            advance()
    culprit = result.culprit
    if culprit is not None and repro_dir is not None:
        node = next(n for n in graph.nodes if n.name == culprit.node)
        result.repro = write_repro(Path(repro_dir), graph, node, values, culprit)
    return result


def _check_node(graph, node, key, values, placement, target, settings) -> NodeCheck:
    from ..session import Session

    check = NodeCheck(node.name, node.op_id, key, node.attrs.get("activation") or None,
                      _layout_notes(graph, node, placement))
    try:
        single, arrays = node_model(graph, node, values)
        sess = Session(single, device=key[1], vendors=(key[2],), fallback=False, passes=False,
                       threads=target.threads, options=settings["options"])
        outs = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})
    except KernelkitError as exc:
        check.error = f"{type(exc).__name__}: {exc}"
        return check
    check.outputs = [compare(name, out, values[name]) for name, out in zip(node.outputs, outs) if name]
    return check


_TEST = '''"""Repro written by ``kernelkit bisect``: node {node!r} ({op}) run by kernel {key}
{why}. This test fails until that kernel is fixed (or no longer chosen).

    pytest {folder}
"""
from pathlib import Path

import kernelkit as kk
import numpy as np
from kernelkit.testing import assert_close

HERE = Path(__file__).parent
DEVICE = {device!r}
VENDORS = {vendors!r}


def test_{func}_matches_reference():
    model = kk.load(HERE / "node.kkm")
    reference = kk.Session(model, device="cpu", vendors=["reference"], passes=False)
    with np.load(HERE / "inputs.npz", allow_pickle=False) as data:
        feeds = {{info.name: data[f"in{{i}}"] for i, info in enumerate(reference.get_inputs())}}
    want = reference.run(None, feeds)
    got = kk.Session(model, device=DEVICE, vendors=VENDORS, passes=False).run(None, feeds)
    for info, actual, expected in zip(reference.get_outputs(), got, want):
        assert_close(actual, expected, err_msg=f"output {{info.name}} of node {node!r}:")
'''


def write_repro(folder: Path, graph: Graph, node: Node, values: dict, check: NodeCheck) -> Path:
    """The repro folder of ``node``: node.kkm, inputs.npz (in0, in1... in graph-input order),
    report.json and test_<node>.py."""
    from ..io import save

    folder.mkdir(parents=True, exist_ok=True)
    single, arrays = node_model(graph, node, values)
    save(single, folder / "node.kkm")
    np.savez(folder / "inputs.npz", **{f"in{i}": a for i, a in enumerate(arrays)})
    (folder / "report.json").write_text(json.dumps(check.to_json(), indent=2) + "\n", encoding="utf-8")
    func = re.sub(r"\W", "_", node.name).strip("_").lower() or "node"
    worst = max(check.outputs, key=lambda c: c.max_abs, default=None)
    why = (f"raised {check.error}" if check.error else
           f"leaves the tolerance: max abs error {worst.max_abs:.3g}, cosine {worst.cosine:.6f}")
    if check.activation:
        why += f"; fused activation {check.activation}"
    text = _TEST.format(node=node.name, op=node.op_id, key=tuple(check.key), why=why, folder=folder,
                        device=check.key[1], vendors=[check.key[2]], func=func)
    (folder / f"test_{func}.py").write_text(text, encoding="utf-8")
    return folder


def render(result: BisectResult, console) -> None:
    from rich.table import Table
    from rich.text import Text

    vendors = ",".join(result.vendors) if result.vendors else "any"
    table = Table(title=f"bisect {result.model}: {result.device}/{vendors} vs reference, node by node")
    for col in ("#", "node", "op", "kernel (device, vendor, dtype)", "fused", "max abs error", "cosine", "result"):
        table.add_column(col, no_wrap=col != "node")
    for i, c in enumerate(result.checks):
        worst = max(c.outputs, key=lambda o: o.max_abs, default=None)
        table.add_row(str(i), c.node, c.op, ", ".join(c.key[1:]), c.activation or "",
                      f"{worst.max_abs:.3g}" if worst else "-", f"{worst.cosine:.7f}" if worst else "-",
                      Text("ok", style="green") if c.passed else Text("FAIL", style="bold red"))
    console.print(table)
    if result.run_error:
        console.print(Text(f"the whole-model run failed: {result.run_error}", style="red"))
    changed = [c.name for c in result.passes if not c.passed]
    console.print(Text(f"graph passes change output(s) {changed} (reference kernels, stored graph vs after passes)",
                       style="bold red") if changed else
                  "graph passes: the reference kernels give the same outputs before and after them")
    for o in result.outputs:
        console.print(f"model output {o.name}: max abs error {o.max_abs:.3g}, cosine {o.cosine:.7f} "
                      f"({'within' if o.passed else 'outside'} tolerance)")
    c = result.culprit
    if c is None:
        console.print(Text(f"all {len(result.checks)} nodes agree with the reference kernels", style="green"))
        return
    console.print(Text(f"first node out of tolerance: {c.node!r} ({c.op}), kernel {tuple(c.key)}", style="bold red"))
    if c.error:
        console.print(f"  error: {c.error}")
    if c.activation:
        console.print(f"  fused activation: {c.activation}")
    for note in c.layout:
        console.print(f"  {note}")
    if len(result.failing) > 1:
        console.print(f"  also failing: {', '.join(x.node for x in result.failing[1:])}")
    if result.repro:
        console.print(f"  repro: {result.repro} (pytest {result.repro})")

"""``kernelkit graph``: the graph a Session runs (after passes) as Graphviz DOT, or SVG/PNG through
Graphviz's ``dot`` when it is on PATH. Nodes are coloured by (device, vendor); nodes with a fused
activation have a double border and name it; reorder nodes (layout changes) are hexagons; edges carry
the value's dtype and shape, and are dashed red where the session copies the value between devices.

    from kernelkit.tools import graph
    dot_text = graph("model.kkm", "model.svg", device="gpu")
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..errors import KernelkitError
from ._common import bind_inputs, open_model, session_settings

FORMATS = {".dot": None, ".gv": None, ".svg": "svg", ".png": "png"}
# fill colours per vendor (then per device), light enough for black text
PALETTE = ["#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7", "#bebada", "#80b1d3",
           "#fccde5"]
VENDOR_COLOURS = {"reference": "#d9d9d9", "numba": "#a6cee3", "opencl": "#b2df8a", "stub": "#ffffff"}


class GraphvizError(KernelkitError):
    """Graphviz's ``dot`` is missing or failed."""

    code = "KK_GRAPHVIZ"


def _q(text) -> str:
    """A DOT double-quoted string."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _is_reorder(graph, node) -> bool:
    if re.search(r"reorder|layout", node.op, re.IGNORECASE):
        return True
    ins = {graph.values[i].spec.layout for i in node.inputs if i and graph.values[i].spec}
    outs = {graph.values[o].spec.layout for o in node.outputs if o and graph.values[o].spec}
    return ins != outs and bool((ins | outs) - {None})


def to_dot(sess) -> str:
    """DOT text of ``sess.graph`` with ``sess``'s placement."""
    graph = sess.graph
    placement = sess.placement()
    colours: dict[tuple, str] = {}
    for where in sorted(set(placement.values())):
        free = [c for c in [VENDOR_COLOURS.get(where[1])] + PALETTE if c and c not in colours.values()]
        colours[where] = free[0] if free else PALETTE[len(colours) % len(PALETTE)]
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8, color="#555555"];']
    ids = {}
    for i, name in enumerate(graph.inputs):
        ids[name] = f"in{i}"
        lines.append(f"  in{i} [label={_q(f'input {name}')}, shape=ellipse, fillcolor=\"#ffffff\"];")
    for i, node in enumerate(graph.nodes):
        nid = f"n{i}"
        for out in node.outputs:
            if out:
                ids[out] = nid
        device, vendor = placement[node.name]
        label = f"{node.name}\n{node.op_id}\n{device}/{vendor}"
        attrs = [f"fillcolor={_q(colours[(device, vendor)])}"]
        activation = node.attrs.get("activation")
        if activation:
            label += f"\nfused: {activation}"
            attrs.append("peripheries=2")
        if _is_reorder(graph, node):
            label += "\nreorder"
            attrs.append("shape=hexagon")
        lines.append(f"  {nid} [label={_q(label)}, {', '.join(attrs)}];")
    for i, name in enumerate(graph.outputs):
        lines.append(f"  out{i} [label={_q(f'output {name}')}, shape=ellipse, fillcolor=\"#ffffff\"];")
    producer_device = {o: placement[n.name][0] for n in graph.nodes for o in n.outputs if o}
    for i, node in enumerate(graph.nodes):
        here = placement[node.name][0]
        for name in dict.fromkeys(n for n in node.inputs if n and n in ids):
            there = producer_device.get(name, "cpu")  # graph inputs start on the host
            label = str(graph.values[name].spec or "")
            if there != here:  # a host<->device copy the session adds
                lines.append(f"  {ids[name]} -> n{i} [label={_q(f'{label}  copy {there}->{here}')}, "
                             f'style=dashed, color="#d62728"];')
            else:
                lines.append(f"  {ids[name]} -> n{i} [label={_q(label)}];")
    for i, name in enumerate(graph.outputs):
        if name in ids:
            lines.append(f"  {ids[name]} -> out{i} [label={_q(graph.values[name].spec or '')}];")
    lines.append("  subgraph cluster_legend {")
    lines.append('    label="device/vendor"; fontname="Helvetica"; fontsize=10; style=dashed;')
    for j, ((device, vendor), colour) in enumerate(colours.items()):
        lines.append(f"    legend{j} [label={_q(f'{device}/{vendor}')}, fillcolor={_q(colour)}];")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_dot(dot_text: str, fmt: str, output) -> None:
    """``dot -T<fmt>`` of ``dot_text`` into ``output``."""
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizError(f"writing {output} needs Graphviz's 'dot' on PATH (apt-get install graphviz, "
                            f"brew install graphviz); a .dot output needs nothing")
    done = subprocess.run([exe, f"-T{fmt}", "-o", str(output)], input=dot_text.encode(), capture_output=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise GraphvizError(f"dot -T{fmt} failed for {output}: {done.stderr.decode(errors='replace').strip()}")


def graph(model, output=None, *, device: str | None = None, vendors=None, shapes=None, batch: int | None = None,
          passes=None, options: dict | None = None) -> str:
    """The DOT text of ``model`` compiled for ``device``/``vendors`` (after ``passes``: None the
    defaults, False none); written to ``output`` when given: .dot/.gv as is, .svg/.png via ``dot``."""
    from ..errors import InputError
    from ..session import Session

    fmt = None
    if output is not None:
        suffix = Path(output).suffix.lower()
        if suffix not in FORMATS:
            raise InputError(f"-o {output}: the suffix must be one of {sorted(FORMATS)}")
        fmt = FORMATS[suffix]
    src = open_model(model)
    bind_inputs(src.model, shapes, batch)
    settings = session_settings(src, options, device=device, vendors=vendors, passes=passes)
    sess = Session(src.model, **settings)
    text = to_dot(sess)
    if output is not None:
        if fmt is None:
            Path(output).write_text(text, encoding="utf-8")
        else:
            render_dot(text, fmt, output)
    return text

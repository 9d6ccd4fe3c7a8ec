"""``kernelkit info`` and ``kernelkit kernels`` as data (what ``--json`` prints)."""
from __future__ import annotations

import difflib
import warnings
from collections import Counter

import numpy as np

from ..errors import FallbackWarning, InputError
from ..ir import TensorSpec
from ._common import node_flops, open_model, session_settings


class UnknownOpError(InputError):
    """``kernels --op`` names an op that no kernel is registered for."""


def parse_dims(pairs) -> dict[str, int]:
    dims = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not value.isdigit():
            raise InputError(f"--dim {pair!r}: expected SYMBOL=INT, e.g. N=1")
        dims[name] = int(value)
    return dims


def info(model, *, device: str | None = None, vendors=None, dims: dict | None = None, threads=None,
         layout: str | None = None) -> dict:
    """Facts about ``model``: inputs/outputs as declared, ops before and after passes, parameters,
    FLOPs (symbolic dims bound by ``dims``, else 1), passes fired, placement, layouts (``layout``:
    the session option, e.g. "NHWC") and fallbacks."""
    from ..session import Session

    src = open_model(model)
    graph = src.model.graph
    dims = dict(dims or {})
    loaded_ops = Counter(n.op_id for n in graph.nodes)
    declared = {n: graph.values[n].spec for n in graph.inputs + graph.outputs if graph.values[n].spec}
    symbols = sorted({d for i in graph.inputs for d in graph.values[i].spec.shape if isinstance(d, str)})
    for name in graph.inputs:  # bind symbolic dims so shapes (and FLOPs) are concrete
        spec = graph.values[name].spec
        shape = tuple(dims.get(d, 1) if isinstance(d, str) else d for d in spec.shape)
        graph.values[name].spec = TensorSpec(shape, spec.dtype, spec.layout)
    settings = session_settings(src, {"layout": layout} if layout else None, device=device, vendors=vendors,
                                threads=threads)
    with warnings.catch_warnings():  # fallbacks are reported in the facts
        warnings.simplefilter("ignore", FallbackWarning)
        sess = Session(src.model, **settings)
    g = sess.graph
    flops = node_flops(g)
    missing = sorted({n.op_id for n in g.nodes if flops[n.name] is None and _no_flops_fn(n)})
    unknown = [n.name for n in g.nodes if flops[n.name] is None and not _no_flops_fn(n)]
    placement = sess.placement()
    ops_at: dict[tuple, set] = {}
    for node in g.nodes:
        ops_at.setdefault(placement[node.name], set()).add(node.op_id)
    compiled_ops = Counter(n.op_id for n in g.nodes)
    io = [{"kind": kind, "name": name, "shape": list((declared.get(name) or g.values[name].spec).shape),
           "dtype": (declared.get(name) or g.values[name].spec).dtype}
          for kind, names in (("input", g.inputs), ("output", g.outputs)) for name in names]
    return {
        "name": graph.name, "producer": src.model.producer, "opsets": src.model.opsets, "io": io,
        "ops": {op: {"file": loaded_ops.get(op, 0), "after_passes": compiled_ops.get(op, 0)}
                for op in sorted(set(loaded_ops) | set(compiled_ops))},
        "parameters": sum(int(np.size(v.data)) for v in graph.values.values() if v.data is not None),
        "parameter_bytes": sum(int(np.asarray(v.data).nbytes) for v in graph.values.values() if v.data is not None),
        "flops": sum(f for f in flops.values() if f is not None), "dims": {s: dims.get(s, 1) for s in symbols},
        "ops_without_flops": missing, "nodes_with_unknown_flops": unknown,
        "passes_fired": dict(sess.passes_fired), "device": sess.device_name,
        "vendors": list(sess.vendors) if sess.vendors else None,
        "placement": [{"device": d, "vendor": v, "nodes": n, "ops": sorted(ops_at[(d, v)])}
                      for (d, v), n in sorted(Counter(placement.values()).items())],
        "layouts": dict(sorted(Counter(lay for lay in sess.layouts().values() if lay).items())),
        "reorders": sum(1 for n in g.nodes if n.op_id == "LayoutReorder"),
        "fallbacks": _fallbacks(sess),
        "memory": _memory(sess),
    }


def _fallbacks(sess) -> list[dict]:
    """Session.fallbacks(): node, op, device, vendor, reason, copies (older sessions: a list)."""
    fb = sess.fallbacks
    if callable(fb):
        return list(fb())
    return [{"node": node, "op": "", "device": "", "vendor": "", "reason": msg, "copies": []} for node, msg in fb]


def _memory(sess) -> dict | None:
    memory = getattr(sess, "memory", None)  # Session.memory(): the arena plan, when it exists
    return memory() if callable(memory) else None


def _no_flops_fn(node) -> bool:
    from ..registry import get_schema

    return get_schema(node.op, node.domain).flops is None


def kernel_list(op=None, device=None, vendor=None, dtype=None) -> list[dict]:
    """Registered kernels (after loading the installed backends) matching the filters. An ``op``
    without any kernel raises UnknownOpError naming the closest registered ops."""
    from ..registry import kernel_entry, kernels

    if op is not None:
        known = sorted({k.op for k in kernels()})
        if op not in known:
            same = [k for k in known if k.lower() == op.lower()]  # a case slip first, then look-alikes
            close = list(dict.fromkeys(same + difflib.get_close_matches(op, known, n=5, cutoff=0.6)))[:5]
            hint = f"; did you mean {', '.join(close)}?" if close else f"; kernelkit kernels lists all {len(known)} ops"
            raise UnknownOpError(f"--op {op!r}: no kernel is registered for this op{hint}")
    rows = []
    for key in kernels(op, device, vendor, dtype):
        entry = kernel_entry(key)
        rows.append({"op": key.op, "device": key.device, "vendor": key.vendor, "dtype": key.dtype,
                     "layout": key.layout, "priority": entry.priority,
                     "implementation": f"{entry.impl.__module__}.{getattr(entry.impl, '__qualname__', entry.impl)}"})
    return rows

"""The pass manager: graph rewrites registered by name and position, run by one driver.

    @register_pass("my_fusion", after="fold_constants")
    def my_fusion(graph, ctx) -> int:   # returns how many rewrites it made
        ...

Built-in passes are registered by ``kernelkit.passes.builtin``; converters and plugins register
theirs the same way (as MindSpore Lite's REG_PASS / REG_SCHEDULED_PASS do).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, RegistryError
from ..ir import Graph

log = logging.getLogger("kernelkit.passes")


@dataclass
class PassContext:
    """What a pass may consult besides the graph."""

    device: str = "cpu"
    vendors: tuple[str, ...] | None = None
    options: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # human-readable remarks a pass wants shown
    scope: Any = None  # the session's registry.KernelScope: kernels only this session sees


@dataclass
class Pass:
    name: str
    fn: Callable[[Graph, PassContext], int]
    doc: str = ""
    default: bool = True  # part of the default pipeline
    final: bool = False  # runs once, after the others reach their fixed point (e.g. the layout pass)


_PASSES: list[Pass] = []


def register_pass(name: str, fn: Callable | None = None, *, before: str | None = None,
                  after: str | None = None, default: bool = True, override: bool = False, final: bool = False):
    """Register a graph pass at a position (before/after another pass, else last). Usable as a
    decorator. ``fn(graph, ctx) -> int`` rewrites ``graph`` in place and returns a rewrite count.
    A ``final`` pass runs once, after the other passes have reached their fixed point: a lowering
    that the graph rewrites must not see again (the layout pass re-lays weights)."""

    def decorate(f):
        names = [p.name for p in _PASSES]
        if name in names:
            if not override:
                raise RegistryError(f"pass {name!r} is already registered; pass override=True to replace it")
            _PASSES.pop(names.index(name))
            names.remove(name)
        entry = Pass(name, f, (f.__doc__ or "").strip().split("\n")[0], default, final)
        anchor = before or after
        if anchor is not None and anchor not in names:
            raise RegistryError(f"pass {name!r}: anchor pass {anchor!r} is not registered; known: {names}")
        if before is not None:
            _PASSES.insert(names.index(before), entry)
        elif after is not None:
            _PASSES.insert(names.index(after) + 1, entry)
        else:
            _PASSES.append(entry)
        return f

    return decorate(fn) if fn is not None else decorate


def passes() -> list[Pass]:
    """All registered passes in pipeline order."""
    return list(_PASSES)


def run_passes(graph: Graph, selection: Iterable[str] | bool | None = None,
               ctx: PassContext | None = None, max_rounds: int = 4) -> dict[str, int]:
    """Run the pipeline to a fixed point (at most ``max_rounds``); returns rewrites per pass.

    ``selection``: None or True runs the default pipeline, False or [] none, a list of names runs
    those passes in pipeline order (unknown names are a ConfigError).
    """
    ctx = ctx or PassContext()
    if selection is None or selection is True:
        chosen = [p for p in _PASSES if p.default]
    elif selection is False:
        chosen = []
    else:
        wanted = list(selection)
        known = {p.name for p in _PASSES}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ConfigError(f"unknown pass(es) {unknown}; registered: {sorted(known)}")
        chosen = [p for p in _PASSES if p.name in wanted]
    fired: dict[str, int] = {}
    for _ in range(max_rounds):
        changed = 0
        for p in (p for p in chosen if not p.final):
            n = int(p.fn(graph, ctx) or 0)
            if n:
                fired[p.name] = fired.get(p.name, 0) + n
                log.debug("pass %s rewrote %d place(s)", p.name, n)
            changed += n
        if not changed:
            break
    for p in (p for p in chosen if p.final):
        n = int(p.fn(graph, ctx) or 0)
        if n:
            fired[p.name] = n
            log.debug("pass %s rewrote %d place(s)", p.name, n)
    return fired


# registers the built-in passes in pipeline order (quantized: fuse_qdq, before fuse_activation;
# layouts: the layout pass, final: it runs once, after the others reach their fixed point;
# attention: fuse_attention, after fuse_activation; gelu: fuse_gelu, before fuse_activation; silu:
# fuse_silu, before fuse_activation;
# qmerge: merge_dynamic_matmul, after fuse_qdq, and fuse_dynamic_relu after it)
from . import attention, builtin, gelu, layouts, matmul_bias, qmerge, quantized, silu  # noqa: E402,F401

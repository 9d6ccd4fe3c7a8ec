"""Each node's time outside its compiled calls, at one and at two threads (issue 11, session 16; docs/numba.md,
"ResNet-50's time outside the kernels at one and two threads"): a one-thread and a two-thread session of one model in
one process, their runs interleaved round by round (``_timing.node_ms_rounds_interleaved``, the order rotated, the
pairs' helper woken before each two-thread run as nodes_ab2t.py does), every compiled call a node's Python makes on the
calling thread timed by a wrapper put in its place after the warm-up runs:

- **compute**: the Numba-compiled calls (a dispatcher or its compiled entry point) the node's call path makes on the
  caller: the drivers at one thread; at two threads the pair's caller side (its half and its wait for the helper's),
  the pool's shards the caller runs;
- **prep**: those of them that only lay out the input for the job (``pad`` / ``subsample`` / ``transform`` /
  ``copy`` in the name: fdirect's pad, cpair's subsample, Winograd's input transform where the caller calls it);
- **outside** = the node's profiled time (the executor's step, from its runner's call to its return) less its
  compiled calls' time, less each wrapped call's own overhead (calibrated on a no-op dispatcher): the node's Python
  (the executor step, the Conv kernel's call path, conv_serial's bound call, ``_paired``, the pair's ``__call__``),
  NumPy copies (the 1x1/2 layers' ``np.copyto`` subsample), any wait in Python, and BLAS (the one-thread F(4x4)
  layers of 64 channels multiply through np.matmul: their "outside" is mostly that product; a node whose compute
  the walk does not reach shows an outside near its node time: read those rows as not decomposed);
- the arena's work per run: the run's wall time less the sum of its nodes'.

Per node the best run of each session's outside time (and its median), then per kind (nodes_ab's labels) the sums::

    taskset -c 0,1 python benchmarks/outside_time.py resnet50 [runs=12] [LABEL=SPEC ...] [--nodes] [--no-backoff]

Each ``LABEL=SPEC`` adds a two-thread session built under SPEC (``nodes_ab.variant_session``). ``--nodes``: the
per-node table too; ``--no-backoff``: the pairs and the pool never back off (a shared dev box). A wrapped call costs
~1.4 us on the AMD dev box (subtracted); a node makes 1-4 compiled calls.
"""
from __future__ import annotations

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodes_ab import kernelkit, load, variant_session  # noqa: E402, I001 (sets the environment)
from nodes_ab2t import _Woken  # noqa: E402
from _timing import node_ms_rounds_interleaved  # noqa: E402

import numpy as np  # noqa: E402

_PREP = ("pad", "subsample", "transform", "copy")


class _Clock:
    """Per node of the run being timed: [compute s, prep s, calls] on the thread ``ident``."""

    def __init__(self):
        self.ident = None
        self.rows: dict = {}


_clock = _Clock()


def _node():
    from kernelkit.devices import profiled_node

    return profiled_node.get()


class _Timed:
    """A compiled callable's stand-in: the call timed onto the current node where it runs on the timed thread."""

    __slots__ = ("fn", "prep", "__wrapped__")

    def __init__(self, fn, name: str):
        self.fn = fn
        self.prep = any(p in name.lower() for p in _PREP)
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        c = _clock
        if c.ident != threading.get_ident():
            return self.fn(*args, **kwargs)
        t0 = time.perf_counter()
        r = self.fn(*args, **kwargs)
        dt = time.perf_counter() - t0
        row = c.rows.setdefault(_node(), [0.0, 0.0, 0])
        row[0] += dt
        if self.prep:
            row[1] += dt
        row[2] += 1
        return r

    def __getattr__(self, name):
        return getattr(self.fn, name)


def _compiled(obj) -> bool:
    from numba.core.dispatcher import Dispatcher

    if isinstance(obj, Dispatcher):
        return True
    # a compiled entry point (qgemm._entry): numba's CPython wrapper of one signature
    owner = type(getattr(obj, "__self__", None)).__name__
    return type(obj).__name__ == "builtin_function_or_method" and owner == "_Closure"


def _name(obj) -> str:
    return getattr(obj, "__name__", None) or getattr(getattr(obj, "py_func", None), "__name__", "") or repr(obj)


def wrap(roots: list) -> int:
    """Put ``_Timed`` in place of every compiled callable reachable from ``roots`` through closures, bound methods,
    kernelkit objects' attributes and containers, and in every kernelkit_numba module's globals and their dicts
    (the drivers built once per key); the count. After the warm-up runs only: a function compiled later that
    calls one of them would find the stand-in."""
    import types

    count = [0]
    seen: set = set()

    def swap(obj):
        if isinstance(obj, _Timed):
            return None
        if _compiled(obj):
            count[0] += 1
            return _Timed(obj, _name(obj))
        return None

    def walk(obj, depth):
        if depth > 8 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            for cell in obj.__closure__ or ():
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                new = swap(v)
                if new is not None:
                    cell.cell_contents = new
                else:
                    walk(v, depth + 1)
            return
        if isinstance(obj, types.MethodType):
            walk(obj.__func__, depth + 1)
            walk(obj.__self__, depth + 1)
            return
        if isinstance(obj, (list, tuple)):
            for k, v in enumerate(obj):
                new = swap(v)
                if new is not None and isinstance(obj, list):
                    obj[k] = new
                else:
                    walk(v, depth + 1)
            return
        if isinstance(obj, dict):
            for k, v in list(obj.items()):
                new = swap(v)
                if new is not None:
                    obj[k] = new
                else:
                    walk(v, depth + 1)
            return
        mod = getattr(type(obj), "__module__", "") or ""
        if mod.startswith("kernelkit") and hasattr(obj, "__dict__") and not isinstance(obj, type):
            walk(obj.__dict__, depth + 1)
        if mod.startswith("kernelkit") and hasattr(type(obj), "__slots__"):
            for s in type(obj).__slots__:
                if hasattr(obj, s):
                    v = getattr(obj, s)
                    new = swap(v)
                    if new is not None:
                        setattr(obj, s, new)
                    else:
                        walk(v, depth + 1)

    for root in roots:
        walk(root, 0)
    for name, mod in list(sys.modules.items()):
        if name.startswith("kernelkit_numba") and mod is not None:
            for attr, v in list(vars(mod).items()):
                new = swap(v)
                if new is not None:
                    setattr(mod, attr, new)
                elif isinstance(v, dict):  # the drivers' caches (ftile._built: a factory's dispatcher per key)
                    for k, d in list(v.items()):
                        new = swap(d)
                        if new is not None:
                            v[k] = new
    return count[0]


def overhead_s() -> float:
    """A ``_Timed`` call's own cost on the timed thread less the bare call's (a no-op dispatcher), seconds."""
    import numba

    @numba.njit(cache=False)
    def noop(a):
        return a

    noop(1)
    t = _Timed(noop, "noop")
    _clock.ident = threading.get_ident()
    best = [np.inf, np.inf]
    for _ in range(20):
        for k, f in enumerate((noop, t)):
            t0 = time.perf_counter()
            for _ in range(2000):
                f(1)
            best[k] = min(best[k], (time.perf_counter() - t0) / 2000)
    _clock.rows.clear()
    _clock.ident = None
    # the wrapper's cost less what it timed itself (its own perf_counter pair lands on the node as compute)
    return max(best[1] - best[0], 0.0)


class _Timing:
    """A session whose runs put each node's compiled calls on ``_clock`` (the node the executor's profile names,
    ``devices.profiled_node``) and keep, per run, node -> [compute s, prep s, calls] and the run's wall ms."""

    def __init__(self, sess):
        self.sess = sess
        self.runs: list = []
        self.walls: list = []

    def run(self, *args, **kwargs):
        _clock.ident, _clock.rows = threading.get_ident(), {}
        t0 = time.perf_counter()
        try:
            return self.sess.run(*args, **kwargs)
        finally:
            self.walls.append((time.perf_counter() - t0) * 1e3)
            self.runs.append(_clock.rows)
            _clock.ident = None

    def __getattr__(self, name):
        return getattr(self.sess, name)


def main(argv: list[str]) -> int:
    nodes_table = "--nodes" in argv
    if "--no-backoff" in argv:  # (pair_halves.py's: the dev box's shared cores back the pairs off)
        from kernelkit_numba import shards
        from kernelkit_numba.kernels import pairs

        shards.POOL.backoff = False
        pairs.PairServer._back_off = lambda self, seconds=0.0: None
    argv = [a for a in argv if a not in ("--nodes", "--no-backoff")]
    name = argv[0] if argv else "resnet50"
    runs = int(argv[1]) if len(argv) > 1 else 12
    variants = [a.split("=", 1) for a in argv[2:]]
    kinds, model, feed = load(name)
    labels = ["numba1", "numba"] + [v[0] for v in variants]
    base = [kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True),
            kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True)]
    base += [variant_session(model, feed, spec, 2) for _, spec in variants]
    for s in base:
        for _ in range(8):
            s.run(None, feed)  # (compiled, bound and settled before any wrapper goes in)
    over = overhead_s()
    timing = [_Timing(s) for s in base]  # (the two-thread sessions' wake before each run outside the timed run)
    sessions = [t if i == 0 else _Woken(t) for i, t in enumerate(timing)]
    roots = [r for s in base for r in s._executor.runners]
    for s in base:
        for step in s._executor.plan.steps:
            roots += [step.call, step.direct()[0] if getattr(step, "direct", None) else None]
    wrapped = wrap(roots)
    from kernelkit_numba.kernels import cpair

    stats = dict(cpair.server().stats)
    per = node_ms_rounds_interleaved(sessions, feed, runs, True)
    stats = {k: v - stats.get(k, 0) for k, v in cpair.server().stats.items() if v != stats.get(k, 0)}
    from pair_halves import _group

    group = _group(kinds, base[1])
    # per session, node -> per round [node ms, compute ms, prep ms, outside ms]; the timed runs are the last `runs`
    table: list = []
    arena: list = []
    for i, s in enumerate(timing):
        timed = s.runs[-runs:]
        rows: dict = {}
        for r in range(runs):
            for node, ms in per[i].items():
                c, p, n = timed[r].get(node, (0.0, 0.0, 0))
                out = ms[r] - c * 1e3 - n * over * 1e3
                rows.setdefault(node, []).append((ms[r], c * 1e3, p * 1e3, out))
        table.append(rows)
        arena.append([w - sum(per[i][node][r] for node in per[i]) for r, w in enumerate(s.walls[-runs:])])
    print(f"## {name}: time outside the compiled calls per node, {runs} rounds, sessions in turn (order rotated); "
          f"{wrapped} compiled callables wrapped, {over * 1e6:.2f} us a wrapped call subtracted; the pairs' "
          f"server over all runs (warm-up included): {stats}")
    print()
    print("| kind | nodes | " + " | ".join(f"{lb} node | {lb} outside (best) | {lb} outside (median) | {lb} prep"
                                            for lb in labels) + " |")
    print("|---|---:|" + "---:|" * (4 * len(labels)))
    kinds_rows: dict = {}
    for node, kind in group.items():
        if any(node not in t for t in table):
            continue
        row = kinds_rows.setdefault(kind, [0, [[0.0] * 4 for _ in labels]])
        row[0] += 1
        for i, t in enumerate(table):
            vals = np.array(t[node])
            row[1][i][0] += vals[:, 0].min()
            row[1][i][1] += vals[:, 3].min()
            row[1][i][2] += float(np.median(vals[:, 3]))
            row[1][i][3] += float(np.median(vals[:, 2]))
    total = [[0.0] * 4 for _ in labels]
    for kind, (n, sums) in sorted(kinds_rows.items(), key=lambda kv: -kv[1][1][1][0]):
        print(f"| {kind} | {n} | " + " | ".join(" | ".join(f"{v:.3f}" for v in s) for s in sums) + " |")
        total = [[a + b for a, b in zip(t, s)] for t, s in zip(total, sums)]
    print("| **sum** | | " + " | ".join(" | ".join(f"{v:.3f}" for v in s) for s in total) + " |")
    print()
    print("| session | run ms (median) | arena and between nodes ms (median) | nodes' outside (median sum) |")
    print("|---|---:|---:|---:|")
    for i, lb in enumerate(labels):
        walls = timing[i].walls[-runs:]
        outs = [sum(table[i][node][r][3] for node in table[i]) for r in range(runs)]
        print(f"| {lb} | {np.median(walls):.2f} | {np.median(arena[i]):.3f} | {np.median(outs):.3f} |")
    if nodes_table:
        print()
        print("| node | kind | " + " | ".join(f"{lb} node | {lb} outside | {lb} calls" for lb in labels) + " |")
        print("|---|---|" + "---:|" * (3 * len(labels)))
        for node, kind in group.items():
            if any(node not in t for t in table):
                continue
            cells = []
            for i, t in enumerate(table):
                vals = np.array(t[node])
                calls = timing[i].runs[-1].get(node, (0, 0, 0))[2]
                cells.append(f"{vals[:, 0].min():.3f} | {vals[:, 3].min():.3f} | {calls}")
            print(f"| {node} | {kind} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

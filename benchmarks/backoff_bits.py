"""A two-thread session's bits across a back-off of the shard pool (issue 11, session 18; docs/numba.md, "The first
run's bits at two threads"; ``kernelkit_numba.config.KEEP_BUDGET``). Per model, one process, eager start:

- the maximum absolute difference from the reference of a one-thread session's run, of a two-thread session's runs
  never backed off (``shards.POOL.backoff`` False), backed off (``POOL.backed_off`` True) and backed off with
  KEEP_BUDGET, and which of them equal each other bit for bit;
- with ``--nodes``: the nodes whose output differs backed off (KEEP_BUDGET off) from the run never backed off, each
  node on the same inputs (after each node the never-backed-off run's values are written back for the nodes after).

    python benchmarks/backoff_bits.py [models=resnet50,resnet18,mobilenet_v2,transformer] [--nodes]

Nothing is timed. A first run that paired until the pool backed off mid-run (a loaded machine) is a mix of the
two-thread and one-thread bits; this script sets each state for a whole run instead.
"""
from __future__ import annotations

import collections
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
import zoo  # noqa: E402
from kernelkit.executor import Executor  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_numba import config, shards  # noqa: E402

_walk = Executor._walk
_state: dict = {"mode": None, "saved": {}, "diff": []}


def _walk_kept(self, runners, env):
    """Executor._walk that saves every node's output ("save") or compares it with the saved one and writes the saved
    one back ("cmp")."""
    mode, saved, diff = _state["mode"], _state["saved"], _state["diff"]
    if mode is None:
        return _walk(self, runners, env)
    for i, run in enumerate(runners):
        run(env)
        step = self.plan.steps[i]
        for o in step.output_slots:
            if o is None or not isinstance(env[o], np.ndarray):
                continue
            if mode == "save":
                saved[(i, o)] = env[o].copy()
                continue
            want = saved[(i, o)]
            if not np.array_equal(env[o], want):
                shapes = tuple(None if s is None else tuple(env[s].shape) for s in step.input_slots[:2])
                diff.append((step.op, shapes, float(np.abs(env[o] - want).max())))
                env[o][...] = want


def check(name: str, nodes: bool) -> None:
    proto = {**zoo.MODELS, **zoo.EXTRA}[name]()
    model, feed = convert(proto.SerializeToString()), zoo.feed(proto, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernelkit.FallbackWarning)
        ref = kernelkit.Session(model, vendors=["reference"], threads=1).run(None, feed)[0]
        one = kernelkit.Session(model, vendors=["numba", "reference"], threads=1).run(None, feed)[0]
        sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=2)
    pool, was = shards.POOL, config.KEEP_BUDGET
    pool.reset()
    pool.backoff = False
    try:
        config.KEEP_BUDGET = False
        steady = [sess.run(None, feed)[0] for _ in range(3)]
        pool.backed_off = lambda: True
        held = [sess.run(None, feed)[0] for _ in range(2)]
        config.KEEP_BUDGET = True
        kept = [sess.run(None, feed)[0] for _ in range(2)]
        if nodes:
            config.KEEP_BUDGET = False
            del pool.backed_off
            Executor._walk = _walk_kept
            _state.update(mode="save", saved={}, diff=[])
            sess.run(None, feed)
            pool.backed_off = lambda: True
            _state["mode"] = "cmp"
            sess.run(None, feed)
    finally:
        Executor._walk, _state["mode"] = _walk, None
        pool.__dict__.pop("backed_off", None)
        pool.backoff = True
        pool.reset()
        config.KEEP_BUDGET = was

    def err(x):
        return f"{np.abs(x - ref).max():.3e}"

    def same(xs, y):
        return all(np.array_equal(x, y) for x in xs)

    print(f"{name}: one thread {err(one)}; two threads never backed off {err(steady[0])} (runs equal: "
          f"{same(steady, steady[0])}), backed off {err(held[0])} (= one thread: {same(held, one)}, = never backed "
          f"off: {same(held, steady[0])}), backed off with KEEP_BUDGET {err(kept[0])} (= never backed off: "
          f"{same(kept, steady[0])})", flush=True)
    if nodes:
        diff = _state["diff"]
        print(f"  {len(diff)} of {len(_state['saved'])} node outputs differ backed off, each on the same inputs")
        kinds = collections.defaultdict(list)
        for op, shapes, d in diff:
            kinds[(op, shapes)].append(d)
        for (op, shapes), ds in kinds.items():
            print(f"    {len(ds)} x {op} {shapes}: at most {max(ds):.2e}")


def main(argv: list[str]) -> None:
    nodes = "--nodes" in argv
    args = [a for a in argv if a != "--nodes"]
    names = args[0].split(",") if args else ["resnet50", "resnet18", "mobilenet_v2", "transformer"]
    for name in names:
        check(name, nodes)


if __name__ == "__main__":
    main(sys.argv[1:])

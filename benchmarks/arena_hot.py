"""The hot memory plan (issue 11, session 12; ``kernelkit.memory.HOT``) on the ten benchmark models:
the arena with and without it, and how cold the writers' destinations are (``memory.write_cost``:
bytes written, each weighted by how long ago its region was last used, in units of
``HOT_CACHE_BYTES`` touched, 1 at most: about the bytes written into memory not used within the last
L2's worth of traffic), and the planning time.

    python benchmarks/arena_hot.py [models=all] [vendor=numba]
    python benchmarks/arena_hot.py bert numba Add,Concat     # also each such node's destination age

The sessions run once (one thread, batch 1) to make the plan for the input shapes; nothing is timed
but ``plan_memory`` itself (best of 3).
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
import zoo  # noqa: E402
from kernelkit import memory  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402


def plan_of(name: str, vendor: str):
    proto = {**zoo.MODELS, **zoo.EXTRA}[name]()
    model, feed = convert(proto.SerializeToString()), zoo.feed(proto, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernelkit.FallbackWarning)
        sess = kernelkit.Session(model, vendors=[vendor, "reference"], threads=1)
    sess.run(None, feed)
    ex = sess._executor
    key = None if sess.plan.static else tuple(tuple(v.shape) for v in feed.values())
    specs, scratch = ex._concrete(key)
    return ex.plan, specs, scratch


def node_ages(plan, mem) -> dict[int, float]:
    """Step index -> the age of its output's destination when it writes it (``_History.cost`` per
    byte: 0 just used, 1 long ago, ``HOT_GROW`` never); an in-place step's is 0."""
    hist, age = memory._History(mem.clock), {}
    for b in memory._chronological(mem.blocks):
        age[b.start, b.offset] = hist.cost(b.offset, b.nbytes, b.start) / b.nbytes
        hist.mark(b.offset, b.nbytes, b.end)
    out = {}
    for i, step in enumerate(plan.steps):
        o = next((s for s in step.output_slots if s is not None), None)
        if o in mem.placed:
            out[i] = 0.0 if i in mem.inplace else age.get((i, mem.placed[o][0]), float("nan"))
    return out


def main(argv: list[str]) -> None:
    names = argv[0].split(",") if argv and argv[0] != "all" else [*zoo.MODELS, *zoo.EXTRA]
    vendor = argv[1] if len(argv) > 1 else "numba"
    ops = set(argv[2].split(",")) if len(argv) > 2 else set()
    print("| model | values | arena MB off | on | growth | plan kept | cold MB off | on | plan ms off | on |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for name in names:
        plan, specs, scratch = plan_of(name, vendor)
        ms, mems = {}, {}
        for hot in (False, True):
            memory.HOT = hot
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                mems[hot] = memory.plan_memory(plan, specs, scratch)
                best = min(best, time.perf_counter() - t0)
            ms[hot] = best * 1e3
        memory.HOT = True
        off, on = mems[False], mems[True]
        cold_off = memory.write_cost(off.blocks, off.clock)
        cold_on = memory.write_cost(on.blocks, on.clock)
        kept = "hot" if on.hot else min(("size", "breadth"), key=lambda k: on.cost.get(k, 0))
        if ops:
            print({k: round(v / 1e6, 2) for k, v in on.cost.items()})
        print(f"| {name} | {len(on.placed)} | {off.arena_bytes / 1e6:.2f} | {on.arena_bytes / 1e6:.2f} "
              f"| {on.arena_bytes / max(off.arena_bytes, 1):.3f} | {kept} | {cold_off / 1e6:.2f} "
              f"| {cold_on / 1e6:.2f} | {ms[False]:.1f} | {ms[True]:.1f} |", flush=True)
        if ops:
            ages = [node_ages(plan, off), node_ages(plan, on)]
            print(f"{name}: the destination's age (in {memory.HOT_CACHE_BYTES >> 20} MiB touched), off / on")
            for i, step in enumerate(plan.steps):
                if step.op in ops and i in ages[0]:
                    o = next(s for s in step.output_slots if s is not None)
                    mb = on.placed[o][2].itemsize * math.prod(on.placed[o][1]) / 1e6
                    print(f"  {step.name} ({step.op}, {mb:.2f} MB): {ages[0][i]:.2f} / {ages[1].get(i, 0):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])

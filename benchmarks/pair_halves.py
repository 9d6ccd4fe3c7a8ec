"""Where each kind of layer's two-thread time goes (issue 11, session 16; docs/numba.md, "ResNet-50's pairs per kind
of layer"): nodes_ab2t.py's protocol (sessions in one process, one run each per round, the order rotated, each
node's best run) with three sessions of the defaults and one two-thread session per ``LABEL=SPEC`` variant:

- ``numba1``: one thread;
- ``default``: two threads, every pair call traced (``pairs.TRACE``): the caller's own half, its wait at the end,
  the helper's start after the publish and its half, each call put on the node whose profiled call holds it;
- ``seq``: two threads with the helper held asleep, so that every pair call publishes its job and the caller then
  takes the helper's half too (fpair's TAKEN): the two halves in turn on one core, the same code and cut as the
  paired call. seq / 1t above 1 is work the cut adds (what both halves do, an input each side copies or
  transforms, a cut that leaves a half off its tuned plan); default's own + helper against seq's halves is what
  running them side by side costs (the caches and memory shared, the other core's speed).

Per kind (nodes_ab's labels; the sums over the kind's nodes of each node's best run), ms::

    2t / 1t      the default's time over one thread's (ideal 0.5)
    seq / 1t     the halves in turn over one thread (ideal 1)
    own, helper  the default's caller half and helper half (that run's); (own + helper) / seq's halves
    start        the helper's claim after the publish; wait: the caller's wait for the helper's half
    out          the default's node time outside its pair call (own + wait): the bind, a copy on the caller
    apart        |own - (start + helper)|: how far the two sides' ends are apart

then per variant default / variant (above 1: the variant faster)::

    taskset -c 0,1 python benchmarks/pair_halves.py resnet50 [runs=12] [LABEL=SPEC ...] [--no-backoff] [--burst=K]

``--burst=K``: each session's turn is K runs back to back, the last one timed. On the Xeon (session 16's call) eight
sessions of one process ran the same code up to 1.2-1.4x apart on layers that no variant touched, both ways (the 7x7
layers, 4-9 MB of weights each, faster in some sessions; the 56x56 ones slower in others). Eight sessions of
ResNet-50 hold ~100 MB of weights each (more packed and transformed) against a 300 MB L3, so a session's best run
likely depends on what the sessions before it left there (not shown). A burst puts its own back first, as in a
process that runs one session; fewer sessions (no variants) should narrow it too.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodes_ab import kernelkit, load, refuse_built_once, variant_session  # noqa: E402, I001 (sets the environment)
from nodes_ab2t import _Woken  # noqa: E402
from _timing import node_ms_rounds_interleaved  # noqa: E402

import numpy as np  # noqa: E402


class _Held:
    """A two-thread session whose pair calls find the helper asleep but usable: each publishes its job, runs the
    caller's half, then takes the helper's half itself (the halves in turn on the caller). Nothing backs off."""

    def __init__(self, sess):
        self.sess = sess

    def run(self, *args, **kwargs):
        import time

        from kernelkit_numba.kernels import fpair, pairs

        srv = fpair.server()
        end = time.perf_counter() + 0.05
        while srv.ctl[pairs.AWAKE] != 0 and time.perf_counter() < end:  # the helper asleep (after pairs.IDLE_S)
            time.sleep(2e-4)
        saved = (srv.usable, srv.asleep, srv._back_off, srv._recent, srv._misses)
        srv.usable = lambda: True
        srv.asleep = lambda: None
        srv._back_off = lambda seconds=0.0: None
        try:
            return self.sess.run(*args, **kwargs)
        finally:
            srv.usable, srv.asleep, srv._back_off = saved[:3]
            del srv.usable, srv.asleep, srv._back_off  # (back to the class's methods)
            srv._recent, srv._misses = saved[3], saved[4]

    def __getattr__(self, name):
        return getattr(self.sess, name)


def _calls(events, trace, rate: float) -> dict:
    """node -> [own, wait, start, helper (ms), paired calls, calls] summed over the pair calls reported within
    the node's profiled call (``events``: one run's, ``trace``: pairs.TRACE's entries of that run)."""
    out: dict = {}
    j = 0
    trace = sorted(trace)
    for node, start, secs, _tid in events:
        end = start + secs
        while j < len(trace) and trace[j][0] < start:
            j += 1
        k = j
        while k < len(trace) and trace[k][0] <= end:
            _t, done, own, wait, begin, helper = trace[k]
            row = out.setdefault(node, [0.0] * 6)
            row[0] += own / rate * 1e3
            row[1] += wait / rate * 1e3
            row[2] += begin / rate * 1e3
            row[3] += helper / rate * 1e3
            row[4] += done == 1
            row[5] += 1
            k += 1
        j = k
    return out


def run_rounds(sessions: list, feed, runs: int, traced: set, burst: int = 1) -> tuple[list, list]:
    """_timing.node_ms_rounds_interleaved's rounds (the order rotated; ``burst``): per session, node -> ms in each
    round; and per traced session (its index in ``traced``), node -> the pair calls' figures of each round
    (``_calls``)."""
    from kernelkit_numba.kernels import pairs

    rate = pairs.cycle_rate()
    halves: list = [{} for _ in sessions]

    def timed(i, r, run):
        if i not in traced:
            run()
            return
        seen = len(sessions[i].profile_events())
        pairs.TRACE = []
        run()
        trace, pairs.TRACE = pairs.TRACE, None
        for node, row in _calls(sessions[i].profile_events()[seen:], trace, rate).items():
            halves[i].setdefault(node, [None] * runs)[r] = row

    return node_ms_rounds_interleaved(sessions, feed, runs, True, burst, timed), halves


def _group(kinds: dict, plan_session) -> dict:
    """node -> its kind label (nodes_ab.print_groups' labels)."""
    out = {}
    for step in plan_session.plan.kernel_steps():
        kind = step.op
        if step.op == "Conv":
            label = next((kinds[o] for o in [step.name, *step.outputs] if o in kinds), "?")
            kind = f"Conv {label}" + (" +Z" if len(step.inputs) > 3 else "")
        out[step.name] = kind
    return out


def main(argv: list[str]) -> int:
    if "--no-backoff" in argv:
        from kernelkit_numba import shards
        from kernelkit_numba.kernels import pairs

        argv = [a for a in argv if a != "--no-backoff"]
        shards.POOL.backoff = False
        pairs.PairServer._back_off = lambda self, seconds=0.0: None
    burst = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--burst=")), 1)
    argv = [a for a in argv if not a.startswith("--burst=")]
    name = argv[0] if argv else "resnet50"
    runs = int(argv[1]) if len(argv) > 1 else 12
    variants = [a.split("=", 1) for a in argv[2:]]
    refuse_built_once(variants, "pair_halves.py")
    kinds, model, feed = load(name)
    labels = ["numba1", "default", "seq"] + [v[0] for v in variants]
    two = kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True)
    sessions = [kernelkit.Session(model, vendors=["numba", "reference"], threads=1, profile=True), _Woken(two),
                _Held(kernelkit.Session(model, vendors=["numba", "reference"], threads=2, profile=True))]
    sessions += [_Woken(variant_session(model, feed, spec, 2)) for _, spec in variants]
    per, halves = run_rounds(sessions, feed, runs, {1, 2}, burst)
    group = _group(kinds, two)
    rows: dict = {}
    for node, kind in group.items():
        if node not in per[0] or node not in per[1]:
            continue
        row = rows.setdefault(kind, {"n": 0, "ms": [0.0] * len(labels), "h": [0.0] * 6, "seq_own": 0.0,
                                     "apart": 0.0, "paired": 0, "calls": 0})
        row["n"] += 1
        for i in range(len(labels)):
            row["ms"][i] += min(per[i].get(node, [0.0]))
        best = int(np.argmin(per[1][node]))  # the default's best run of the node: its halves
        h = (halves[1].get(node) or [None] * runs)[best]
        if h is not None:
            row["h"] = [a + b for a, b in zip(row["h"], h)]
            row["apart"] += abs(h[0] - (h[2] + h[3]))
            row["paired"] += h[4]
            row["calls"] += h[5]
        sbest = int(np.argmin(per[2][node]))
        s = (halves[2].get(node) or [None] * runs)[sbest]
        if s is not None:
            row["seq_own"] += s[0]
    print(f"## {name}, best run of {runs} per node (ms), sessions in turn, order rotated"
          + (f", each turn the last of {burst} runs" if burst > 1 else ""))
    print("| kind | nodes | 1t | 2t | seq | 2t / 1t | seq / 1t | own | helper | start | wait | out | apart "
          "| (own + helper) / seq halves | paired / calls |")
    print("|---|---:|" + "---:|" * 13)
    total = {"ms": [0.0] * len(labels), "h": [0.0] * 6, "apart": 0.0, "seq_halves": 0.0, "paired": 0, "calls": 0}

    def line(label, n, ms, h, apart, seq_halves, paired, calls):
        out = ms[1] - h[0] - h[1] if calls else ms[1]
        return (f"| {label} | {n} | {ms[0]:.3f} | {ms[1]:.3f} | {ms[2]:.3f} | {ms[1] / ms[0]:.3f} | "
                f"{ms[2] / ms[0]:.3f} | {h[0]:.3f} | {h[3]:.3f} | {h[2]:.3f} | {h[1]:.3f} | {out:.3f} | {apart:.3f} | "
                + (f"{(h[0] + h[3]) / seq_halves:.3f}" if seq_halves > 0 and calls else "-") + f" | {paired}/{calls} |")

    seq_out: dict = {}
    for kind, row in sorted(rows.items(), key=lambda kv: -kv[1]["ms"][1]):
        # the seq session's halves: its node time less the default's time outside the pair call
        out = row["ms"][1] - row["h"][0] - row["h"][1] if row["calls"] else 0.0
        seq_halves = row["ms"][2] - out if row["calls"] else 0.0
        seq_out[kind] = seq_halves
        print(line(kind, row["n"], row["ms"], row["h"], row["apart"], seq_halves, row["paired"], row["calls"]))
        total["ms"] = [a + b for a, b in zip(total["ms"], row["ms"])]
        total["h"] = [a + b for a, b in zip(total["h"], row["h"])]
        total["apart"] += row["apart"]
        total["seq_halves"] += seq_halves
        total["paired"] += row["paired"]
        total["calls"] += row["calls"]
    print(line("**sum**", "", total["ms"], total["h"], total["apart"], total["seq_halves"], total["paired"],
               total["calls"]))
    if len(labels) > 3:
        print()
        print("| kind | nodes | default | " + " | ".join(labels[3:]) + " | "
              + " | ".join(f"default / {v}" for v in labels[3:]) + " |")
        print("|---|---:|" + "---:|" * (1 + 2 * (len(labels) - 3)))
        for kind, row in sorted(rows.items(), key=lambda kv: -kv[1]["ms"][1]):
            ms = row["ms"]
            print(f"| {kind} | {row['n']} | {ms[1]:.3f} | " + " | ".join(f"{v:.3f}" for v in ms[3:]) + " | "
                  + " | ".join(f"{ms[1] / v:.3f}" if v else "-" for v in ms[3:]) + " |")
        ms = total["ms"]
        print("| **sum** | | " + f"{ms[1]:.2f} | " + " | ".join(f"{v:.2f}" for v in ms[3:]) + " | "
              + " | ".join(f"{ms[1] / v:.3f}" if v else "-" for v in ms[3:]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

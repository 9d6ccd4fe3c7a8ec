"""Per block of a turns.py run, where a two-thread numba block's time went (issue 11, session 14; docs/numba.md,
"The two-thread blocks that run slow in turns"): ``KERNELKIT_TURNS_TRACE=1 taskset -c 0,1 python
benchmarks/turns.py ...`` adds a ``trace`` entry to each block's JSON line, and ``python benchmarks/turns_trace.py
OUT.jsonl`` prints them as a table per model and runtime (``--short``: a line a block; ``--stalls``: a line a stall).

Per block (its timed calls only, not the settle calls):

- the pair calls' halves from ``pairs.TRACE`` (cycles, turned into ms a run): the caller's own half, its wait at the
  end, the helper's start after the publish, the helper's half, and the helper's idle end (the caller's half the
  longer); each call also keeps the CPU the caller ran on (``sched_getcpu`` when it reported), so that the halves
  are summed per CPU: where the caller stays on one CPU, the helper ran on the other, and the two CPUs' speeds show
  as the helper's halves against the caller's (the halves are cut even);
- ``/proc/stat`` per CPU of the process's affinity: busy, idle and steal (the hypervisor ran someone else on that
  vCPU) in ms over the block;
- per thread of the process (``/proc/self/task``): its run time and its wait on the run queue (``schedstat``), its
  last CPU, and its migrations (``sched``, where the kernel has it).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import time

_libc = ctypes.CDLL(None, use_errno=True)
_getcpu = getattr(_libc, "sched_getcpu", None)


def getcpu() -> int:
    return int(_getcpu()) if _getcpu is not None else -1


class CpuTrace(list):
    """``pairs.TRACE`` that also keeps the calling thread's CPU on each appended call, and in ``marks`` the pair
    helper's stall counters as the call reports (before its own verdict: a call's stall shows in the next mark)."""

    def __init__(self):
        super().__init__()
        self.marks: list = []

    def append(self, item) -> None:
        list.append(self, (*item, getcpu()))
        self.marks.append(_stall_counts())


def _stall_counts() -> tuple:
    """The pair helper's (stalls, the back-offs they fired: time-based and counted in calls, the stalls paid for:
    rnpair.STALL_NET, the pair calls refused within a back-off or skip, the lone stalls' skips: pairs.LONE_SKIP, the
    wakes, the reporting caller's rule: pairs.PairServer.family) now."""
    fpair = sys.modules.get("kernelkit_numba.kernels.fpair")
    if fpair is None or not fpair._server:
        return (0, 0, 0, 0, 0, 0, "")
    srv = fpair._server[0]
    st = srv.stats
    return (st.get("stalls", 0), st.get("stall_backoffs", 0) + st.get("skips", 0) + st.get("lone", 0),
            st.get("paid", 0), st.get("refused", 0), st.get("lone", 0), st.get("wakes", 0), getattr(srv, "family", ""))


def stall_records(trace, rate: float, t0: float) -> list:
    """Each stall of a block's pair calls (``trace``: a CpuTrace): [ms since the block began, the caller's own half,
    its wait, the helper's start, its half (us), the helper's half over the caller's, the median of that over the 8
    paired calls before (a helper on a slower core: high before too; a lost core: a spike), whether it fired a
    back-off, whether it was paid for (rnpair.STALL_NET), and the ms until the next pair call reported (a
    back-off's length, as the run saw it); issue 11, session 18: the caller's rule (pairs.PairServer.family: "f"
    fpair's products, "h" a hiccup window, tpair's, "r" rnpair.rule(): the ResNets' layers), whether the fire was a
    lone stall's skip (pairs.LONE_SKIP), then until the next paired call: the pair calls refused (a back-off or skip),
    run alone on a miss, and that woke the helper, and the ms to it (-1: none in the block)]."""
    if not trace or rate <= 0:
        return []
    us = 1e6 / rate
    marks = list(trace.marks) + [_stall_counts()]
    out, before = [], []
    for i, (t, done, o, w, s, h, _cpu) in enumerate(trace):
        if done != 1:
            continue
        stalled, fired, paid = (marks[i + 1][k] > marks[i][k] for k in range(3))
        if stalled:
            prior = sorted(before[-8:])
            gap = (trace[i + 1][0] - t) * 1e3 if i + 1 < len(trace) else -1.0
            j = next((k for k in range(i + 1, len(trace)) if trace[k][1] == 1), len(trace))
            end = marks[j] if j < len(trace) else marks[-1]
            missed = sum(1 for k in range(i + 1, j) if trace[k][1] == 2)
            to_paired = (trace[j][0] - t) * 1e3 if j < len(trace) else -1.0
            out.append([round((t - t0) * 1e3, 2), round(o * us, 1), round(w * us, 1), round(s * us, 1),
                        round(h * us, 1), round(h / o, 2) if o > 0 else 0.0,
                        round(prior[len(prior) // 2], 2) if prior else 0.0, fired, paid, round(gap, 2),
                        marks[i][6], marks[i + 1][4] > marks[i][4], end[3] - marks[i][3], missed,
                        end[5] - marks[i][5], round(to_paired, 2)])
        if o > 0:
            before.append(h / o)
    return out


def _proc_stat(cpus) -> dict:
    out = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu") and line[3:4].isdigit():
                    parts = line.split()
                    cpu = int(parts[0][3:])
                    if cpu in cpus:
                        v = [int(x) for x in parts[1:]]
                        idle = v[3] + v[4]
                        steal = v[7] if len(v) > 7 else 0
                        out[cpu] = (sum(v[:8]) - idle - steal, idle, steal)
    except OSError:
        pass
    return out


def _threads() -> dict:
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = (int(x) for x in f.read().split())
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            last_cpu = int(fields[36])  # field 39 of stat, counted from after the name
            migrations = -1
            try:
                with open(f"/proc/self/task/{tid}/sched") as f:
                    for line in f:
                        if line.startswith("se.nr_migrations"):
                            migrations = int(line.split(":")[1])
            except OSError:
                pass
            out[int(tid)] = (run_ns, wait_ns, last_cpu, migrations)
        except (OSError, ValueError, IndexError):
            continue
    return out


class BlockTrace:
    """``start()`` before a block's timed calls, ``stop(calls)`` after: the block's trace (module doc) as a dict."""

    def __init__(self):
        self.cpus = sorted(os.sched_getaffinity(0))
        self.hz = os.sysconf("SC_CLK_TCK")
        self.pairs = sys.modules.get("kernelkit_numba.kernels.pairs")

    def start(self) -> None:
        if self.pairs is None:
            self.pairs = sys.modules.get("kernelkit_numba.kernels.pairs")
        if self.pairs is not None:
            self.pairs.TRACE = CpuTrace()
        self.t0 = time.perf_counter()
        self.stat0 = _proc_stat(self.cpus)
        self.thr0 = _threads()

    def stop(self, calls: int) -> dict:
        wall = time.perf_counter() - self.t0
        stat1, thr1 = _proc_stat(self.cpus), _threads()
        tick_ms = 1e3 / self.hz
        out: dict = {"wall_ms": wall * 1e3, "cpus": {}}
        for cpu in self.cpus:
            if cpu in stat1 and cpu in self.stat0:
                busy, idle, steal = (tick_ms * (b - a) for a, b in zip(self.stat0[cpu], stat1[cpu], strict=True))
                out["cpus"][str(cpu)] = {"busy_ms": busy, "idle_ms": idle, "steal_ms": steal}
        threads = []
        for tid, (run1, wait1, cpu, mig1) in thr1.items():
            run0, wait0, _, mig0 = self.thr0.get(tid, (0, 0, cpu, mig1))
            if run1 - run0 > 1e6:  # threads that ran a ms or more in the block
                threads.append({"tid": tid, "run_ms": (run1 - run0) / 1e6, "rq_wait_ms": (wait1 - wait0) / 1e6,
                                "last_cpu": cpu, "migrations": mig1 - mig0 if mig1 >= 0 else -1})
        out["threads"] = threads
        trace = self.pairs.TRACE if self.pairs is not None else None
        if trace:
            rate = self.pairs.cycle_rate()
            ms = 1e3 / rate / max(calls, 1)  # cycles -> ms a run
            paired = [t for t in trace if t[1] == 1]
            by_cpu: dict = {}
            own = wait = start = helper = idle_end = 0
            for _, _, o, w, s, h, cpu in paired:
                own, wait, start, helper = own + o, wait + w, start + s, helper + h
                idle_end += max(0, o - s - h)
                d = by_cpu.setdefault(str(cpu), [0, 0, 0])
                d[0], d[1], d[2] = d[0] + 1, d[1] + o, d[2] + h
            ratios = sorted(h / o for _, _, o, _, _, h, _ in paired if o > 0)
            out["pairs"] = {
                "paired": len(paired) / max(calls, 1), "alone": (len(trace) - len(paired)) / max(calls, 1),
                "own_ms": own * ms, "wait_ms": wait * ms, "start_ms": start * ms, "helper_ms": helper * ms,
                "idle_end_ms": idle_end * ms,
                "helper_over_own": helper / own if own else 0.0,
                "ratio_q": [ratios[int(q * (len(ratios) - 1))] for q in (0.1, 0.5, 0.9)] if ratios else [],
                # per CPU the caller ran on: calls a run, its own halves' and the helper's halves' ms a run
                "by_caller_cpu": {k: [v[0] / max(calls, 1), v[1] * ms, v[2] * ms] for k, v in by_cpu.items()},
                "stalls": stall_records(trace, rate, self.t0),
            }
            self.pairs.TRACE = None
        return out


def table(path: str) -> str:
    rows = [json.loads(line) for line in open(path)]
    lines = []
    for key in sorted({(r["model"], r["load"]) for r in rows}):
        sub = [r for r in rows if (r["model"], r["load"]) == key]
        lines.append(f"\n{key[0]} {key[1]}")
        lines.append("| round | runtime | median | best | steal ms (cpu: ms) | rq wait ms | paired/run | own | wait "
                     "| hlp start | helper | idle end | hlp/own (q10 q50 q90) | by caller cpu: calls own hlp | "
                     "threads: last cpu, migrations |")
        lines.append("|---" * 14 + "|")
        for r in sorted(sub, key=lambda r: (r["round"], r["runtime"])):
            t = r.get("trace", {})
            steal = " ".join(f"{c}:{v['steal_ms']:.0f}" for c, v in t.get("cpus", {}).items())
            rq = sum(x["rq_wait_ms"] for x in t.get("threads", []))
            thr = " ".join(f"{x['last_cpu']}/{x['migrations']}" for x in t.get("threads", []))
            p = t.get("pairs")
            if p:
                q = " ".join(f"{v:.2f}" for v in p["ratio_q"])
                cpu = "; ".join(f"{c}: {v[0]:.0f} {v[1]:.1f} {v[2]:.1f}" for c, v in sorted(p["by_caller_cpu"].items()))
                pc = (f"{p['paired']:.0f} | {p['own_ms']:.1f} | {p['wait_ms']:.2f} | {p['start_ms']:.2f} | "
                      f"{p['helper_ms']:.1f} | {p['idle_end_ms']:.2f} | {p['helper_over_own']:.2f} ({q}) | {cpu}")
            else:
                pc = " | " * 7
            lines.append(f"| {r['round']} | {r['runtime']} | {r['median_ms']:.1f} | {r['best_ms']:.1f} | {steal} | "
                         f"{rq:.1f} | {pc} | {thr} |")
    return "\n".join(lines)


def short(path: str) -> str:
    """One line a block, then per model and paired runtime the fastest and the slowest third of its blocks: the
    caller's and the helper's halves, the sides' ends apart (waits plus the helper's idle ends) and the steal, ms a
    run (uneven cores: the ends apart grow in the slow blocks; both sides slow: the halves grow, the ends do not)."""
    rows = [json.loads(line) for line in open(path)]
    lines = []
    for r in rows:
        t = r.get("trace", {})
        p = t.get("pairs") or {}
        steal = "/".join(f"{v['steal_ms']:.0f}" for v in t.get("cpus", {}).values())
        cpu = ";".join(f"{c}:{v[0]:.0f},{v[1]:.1f},{v[2]:.1f}" for c, v in sorted(p.get("by_caller_cpu", {}).items()))
        halves = (f"own {p['own_ms']:.1f} hlp {p['helper_ms']:.1f} wait {p['wait_ms']:.2f} idle {p['idle_end_ms']:.2f}"
                  if p else "")
        lines.append(f"{r['model']} {r['load']} r{r['round']} {r['runtime']} {r['median_ms']:.1f} steal {steal} "
                     f"rq {sum(x['rq_wait_ms'] for x in t.get('threads', [])):.1f} {halves} {cpu}")
    for key in sorted({(r["model"], r["load"], r["runtime"]) for r in rows if (r.get("trace") or {}).get("pairs")}):
        sub = sorted((r for r in rows if (r["model"], r["load"], r["runtime"]) == key), key=lambda r: r["median_ms"])
        third = max(1, len(sub) // 3)
        zero = {"own_ms": 0.0, "helper_ms": 0.0, "wait_ms": 0.0, "idle_end_ms": 0.0, "helper_over_own": 0.0}
        for label, part in (("fast", sub[:third]), ("slow", sub[-third:])):
            ps = [r["trace"].get("pairs") or zero for r in part]

            def mean(f, ps=ps):
                return sum(f(p) for p in ps) / len(ps)

            steal = sum(sum(v["steal_ms"] for v in r["trace"]["cpus"].values()) for r in part) / len(part)
            lines.append(f"{' '.join(key)} {label} {len(part)} blocks: median "
                         f"{sum(r['median_ms'] for r in part) / len(part):.1f} own {mean(lambda p: p['own_ms']):.1f} "
                         f"hlp {mean(lambda p: p['helper_ms']):.1f} "
                         f"ends apart {mean(lambda p: p['wait_ms'] + p['idle_end_ms']):.2f} "
                         f"hlp/own {mean(lambda p: p['helper_over_own']):.2f} steal {steal:.0f}")
    return "\n".join(lines)


def stalls(path: str) -> str:
    """Each block's stalls (stall_records), one line a stall: when in the block, own / wait / the helper's start and
    half (us), the helper's half over the caller's and its median over the 8 calls before, fired, paid for, the gap
    after."""
    lines = ["block | ms in block | own us | wait | hlp start | hlp half | hlp/own | before | fired | paid | gap ms | "
             "rule | lone | refused | missed | wakes | to paired ms"]
    for r in (json.loads(line) for line in open(path)):
        for rec in ((r.get("trace") or {}).get("pairs") or {}).get("stalls", []):
            lines.append(f"{r['model']} {r['load']} r{r['round']} {r['runtime']} | " + " | ".join(str(v) for v in rec))
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    mode = short if "--short" in args else stalls if "--stalls" in args else table
    for p in (a for a in args if a not in ("--short", "--stalls")):
        print(mode(p))

"""One session of a benchmark model alone in this process, per node (docs/numba.md, "Two threads on
the CNNs (issue 11, session 8)").

``trace_nodes.py`` runs the 1- and 2-thread sessions in one process, which inflates the 1-thread
figures (the two sessions' packed weights share the caches): its per-node ratios overstate the
second thread's gain. Here each thread count gets its own process (run this script twice and
compare the JSON with ``--compare``). Per node: best and median time over the runs; at 2+ threads
also the pool's jobs, the shards and shard time per thread (caller / workers), the worker's
wake-up delay and the caller's wait at each job's end, the caller alone in the node outside every
job (``alone_ms``: Python, kernels below two shards) and its time in a job
outside its shards (``caller_lead_ms``, ``caller_gaps_ms``: claims, the GIL, phase barriers,
``caller_tail_ms``; docs/numba.md, "Two threads on the ResNets (issue 11, session 9)"), these
per-run means over the runs without a back-off (``runs_without_backoff``). Per run:
wall time and the thread CPU time of the caller and of the pool's workers (a thread sharing its core
with another runnable one gets less CPU than wall time)::

    python benchmarks/threads_alone.py MODEL [--threads 2] [--runs 20] [--cpus 0,1] [--loaded]
        [--set module.ATTR=value,...] [--no-backoff]  > out.json
    python benchmarks/threads_alone.py --compare one_thread.json two_threads.json [--top 30]
    python benchmarks/threads_alone.py MODEL --interleave [--runs 10] > both.json  # 1t and 2t in one process
    python benchmarks/threads_alone.py --serial-vs both.json [--top 30]

``--interleave`` (issue 11, session 10): pairs of runs at 2 threads and with the pool held backed off
(every job on the caller, ``config.current_threads()`` 1) take turns in one process, on the same
packed weights: per node the 1-thread time against the 2-thread shards' sum, without the host's
drift between processes (1.5x on the Xeon) and without a second session's weights in the caches.

``--set`` (or ``$KERNELKIT_BENCH_SET``) sets ``kernelkit_numba`` constants as
``test_bench_numba.py``'s children do; ``--loaded`` runs a busy loop pinned to the first CPU.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _cpu(clock_ids) -> float:
    return sum(time.clock_gettime(c) for c in clock_ids)


def measure(args) -> dict:
    cpus = [int(c) for c in args.cpus.split(",")]
    os.sched_setaffinity(0, set(cpus))
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    import kernelkit
    from kernelkit_numba import shards
    from kernelkit_numba.kernels import halves
    from test_bench_numba import apply_bench_set, model_case
    from trace_nodes import attribute

    apply_bench_set(args.set)
    if args.no_backoff:
        shards.POOL.backoff = False
    start = dict(shards.POOL.stats)
    _, model, feed, _ = model_case(args.model)
    sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=args.threads, profile=True)
    for _ in range(3):
        sess.run(None, feed)
    busy = None
    if args.loaded:
        busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"],
                                preexec_fn=lambda: os.sched_setaffinity(0, {cpus[0]}))
        time.sleep(0.3)
    pool = shards.POOL
    before = dict(pool.stats)
    halves_before = dict(halves.stats)  # two-share calls run on the caller alone, and woken (halves.py)
    per_node: dict = collections.defaultdict(list)
    agg = collections.defaultdict(lambda: {"jobs": 0, "helped": 0, "caller_shards": 0, "worker_shards": 0,
                                           "wake": [], "serial": 0, "caller_wait": 0.0, "caller_busy": 0.0,
                                           "worker_busy": 0.0, "in_jobs": 0.0, "caller_gaps": 0.0,
                                           "worker_gaps": 0.0, "caller_lead": 0.0, "caller_tail": 0.0})
    walls, caller_cpu, worker_cpu = [], [], []
    serial_walls: list = []  # --interleave: the runs with every job on the caller (the pool held backed off)
    per_node_serial: dict = collections.defaultdict(list)
    busy_runs: dict = collections.defaultdict(list)  # per node, per clean run: the shards' sum
    clean_runs: dict = collections.defaultdict(list)  # ... and the node's time in that run
    clean_ts: dict = collections.defaultdict(float)  # node time summed over the runs without a back-off
    clean = 0
    try:
        for r in range(args.runs * (2 if args.interleave else 1)):
            serial = args.interleave and (r // 2) % 2 == 1  # two runs a mode, the first of each not kept
            if args.interleave:
                pool.reset()
                if serial:
                    pool._serial_until = time.perf_counter() + 1e9  # every job on the caller, kernels at 1 thread
            workers = [time.pthread_getcpuclockid(t.ident) for t in pool._workers if t.ident is not None]
            sess.reset_profile()
            pool.trace = [] if args.threads > 1 and not serial else None
            signs = (pool.stats["backoffs"], pool.stats["held"], pool.backed_off())
            c0, w0 = time.thread_time(), _cpu(workers)
            t0 = time.perf_counter()
            sess.run(None, feed)
            t1 = time.perf_counter()
            c1, w1 = time.thread_time(), _cpu(workers)
            walls.append(t1 - t0)
            caller_cpu.append((c1 - c0) / (t1 - t0))
            worker_cpu.append((w1 - w0) / (t1 - t0) if workers else 0.0)
            events = sess.profile_events()
            trace, pool.trace = pool.trace, None
            if args.interleave and r % 2 == 0:
                walls.pop(), caller_cpu.pop(), worker_cpu.pop()
                continue  # the first run after a switch of mode
            if serial:
                serial_walls.append(walls.pop())
                caller_cpu.pop(), worker_cpu.pop()
                for name, _, dt, *_ in events:
                    per_node_serial[name].append(dt)
                continue
            for name, _, dt, *_ in events:
                per_node[name].append(dt)
            if signs != (pool.stats["backoffs"], pool.stats["held"], False):
                continue  # a back-off in this run: its kernels ran unsharded (no trace attributes)
            clean += 1
            for name, _, dt, *_ in events:
                clean_ts[name] += dt
            run_busy: dict = collections.defaultdict(float)
            if trace:
                spans = sorted((ts, ts + dt, name) for name, ts, dt, *_ in events)
                for node, d in attribute(events, trace).items():
                    a = agg[node]
                    for k in ("jobs", "helped", "caller_shards", "worker_shards", "serial", "caller_wait"):
                        a[k] += d[k]
                    a["wake"] += d["wake"]
                jobs = {r[0]: r[2] for r in trace if r[1] < 0}
                by_job = collections.defaultdict(list)
                for r in trace:
                    if r[1] >= 0:
                        by_job[r[0]].append(r)
                for r in trace:  # the caller inside a job (publication to all done), per node
                    if r[1] < 0:
                        node = next((n for s, e, n in spans if s <= r[3] <= e), None)
                        a = agg[node]
                        a["in_jobs"] += r[4] - r[3]
                        # the caller's time in the job outside its shards: publication to its first
                        # shard (lead), between its shards (gaps: claims, the GIL, phase barriers),
                        # its last shard to leaving the job's loop (tail); and the worker's gaps
                        for who, rows in (("caller", [x for x in by_job[r[0]] if x[2] == r[2]]),
                                          ("worker", [x for x in by_job[r[0]] if x[2] != r[2]])):
                            rows.sort(key=lambda x: x[3])
                            a[who + "_gaps"] += sum(b[3] - e[4] for e, b in zip(rows, rows[1:]))
                            if who == "caller" and rows:
                                a["caller_lead"] += rows[0][3] - r[3]
                                a["caller_tail"] += r[5] - rows[-1][4]
                for r in trace:  # shard time per node and thread (by the shard's start)
                    if r[1] < 0:
                        continue
                    node = next((n for s, e, n in spans if s <= r[3] <= e), None)
                    key = "caller_busy" if jobs.get(r[0], r[2]) == r[2] else "worker_busy"
                    agg[node][key] += r[4] - r[3]
                    run_busy[node] += r[4] - r[3]
                for node, shard_sum in run_busy.items():  # per run: the medians below are not pulled by one slow run
                    busy_runs[node].append(shard_sum)
                    clean_runs[node].append(next(dt for name, _, dt, *_ in events if name == node))
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    ops = {row["node"]: row["op"] for row in sess.profile()}
    runs = max(1, clean)  # the per-run means of the trace: over the runs without a back-off
    nodes = []
    for name, ts in per_node.items():
        a = agg.get(name)
        row = {"node": name, "op": ops.get(name, "?"), "best_ms": min(ts) * 1e3,
               "median_ms": statistics.median(ts) * 1e3}
        if per_node_serial.get(name):
            row["serial_median_ms"] = statistics.median(per_node_serial[name]) * 1e3
        if busy_runs.get(name):  # medians over the runs without a back-off (the busy means above: means)
            row["busy_median_ms"] = statistics.median(busy_runs[name]) * 1e3
            row["clean_median_ms"] = statistics.median(clean_runs[name]) * 1e3
        if a is not None:
            row.update(jobs=a["jobs"] / runs, helped=a["helped"] / runs, sh_caller=a["caller_shards"] / runs,
                       sh_worker=a["worker_shards"] / runs, serial=a["serial"] / runs,
                       wake_us=statistics.median(a["wake"]) * 1e6 if a["wake"] else None,
                       caller_wait_us=a["caller_wait"] / runs * 1e6, caller_busy_ms=a["caller_busy"] / runs * 1e3,
                       worker_busy_ms=a["worker_busy"] / runs * 1e3,
                       # the caller alone in the node (a mean a run without a back-off): outside every job
                       alone_ms=(clean_ts[name] - a["in_jobs"]) / runs * 1e3 if a["jobs"] else None,
                       **{k + "_ms": a[k] / runs * 1e3 for k in ("caller_lead", "caller_gaps", "caller_tail",
                                                                 "worker_gaps")})
        nodes.append(row)
    node_sum = sum(r["median_ms"] for r in nodes)
    return {"model": args.model, "threads": args.threads, "loaded": args.loaded, "set": args.set or "",
            "cpus": args.cpus, "wall_best_ms": round(min(walls) * 1e3, 3),
            "wall_median_ms": round(statistics.median(walls) * 1e3, 3),
            "node_median_sum_ms": round(node_sum, 3), "runs_without_backoff": clean,
            "caller_cpu_share_median": round(statistics.median(caller_cpu), 3),
            "worker_cpu_share_median": round(statistics.median(worker_cpu), 3),
            "pool": {k: v - before.get(k, 0) for k, v in pool.stats.items()},
            "pool_warmup": {k: before[k] - start.get(k, 0) for k in before}, "nodes": nodes,
            "halves": {k: v - halves_before.get(k, 0) for k, v in halves.stats.items()},
            **({"serial_wall_median_ms": round(statistics.median(serial_walls) * 1e3, 3),
                "serial_wall_best_ms": round(min(serial_walls) * 1e3, 3)} if serial_walls else {})}


def compare(a_path: str, b_path: str, top: int) -> None:
    a, b = (json.load(open(p)) for p in (a_path, b_path))
    an = {r["node"]: r for r in a["nodes"]}
    print(f"{a['model']}: {a['threads']}t {a['wall_median_ms']:.2f} ms (best {a['wall_best_ms']:.2f}) vs "
          f"{b['threads']}t {b['wall_median_ms']:.2f} ms (best {b['wall_best_ms']:.2f}); ratio "
          f"{a['wall_median_ms'] / b['wall_median_ms']:.2f}; pool {b['pool']}; caller cpu share "
          f"{b['caller_cpu_share_median']}, worker {b['worker_cpu_share_median']}")
    rows = []
    for r in b["nodes"]:
        o = an.get(r["node"])
        if o is None:
            continue
        rows.append((o["median_ms"], r))
    rows.sort(key=lambda x: -x[0])
    print(f"{'node':<22} {'op':<10} {'A ms':>7} {'B ms':>7} {'A/B':>5} {'jobs':>4} {'help':>4} {'shC':>5} {'shW':>5} "
          f"{'busyC':>6} {'busyW':>6} {'eff':>5} {'wake':>5} {'wait':>5} {'alone':>6}")
    tot = collections.Counter()
    for t1, r in rows[:top]:
        busy = r.get("caller_busy_ms", 0.0) + r.get("worker_busy_ms", 0.0)
        eff = t1 / busy if busy else float("nan")  # the node's time at A over the shard time at B
        wake = r.get("wake_us")
        print(f"{r['node'][:22]:<22} {r['op'][:10]:<10} {t1:7.3f} {r['median_ms']:7.3f} {t1 / r['median_ms']:5.2f} "
              f"{r.get('jobs', 0):4.1f} {r.get('helped', 0):4.1f} {r.get('sh_caller', 0):5.1f} "
              f"{r.get('sh_worker', 0):5.1f} {r.get('caller_busy_ms', 0):6.3f} {r.get('worker_busy_ms', 0):6.3f} "
              f"{eff:5.2f} {'-' if wake is None else round(wake):>5} {r.get('caller_wait_us', 0):5.0f} "
              f"{r.get('alone_ms') or 0.0:6.3f}")
    for t1, r in rows:
        tot["a"] += t1
        tot["b"] += r["median_ms"]
        tot["busy"] += r.get("caller_busy_ms", 0.0) + r.get("worker_busy_ms", 0.0)
        tot["busyC"] += r.get("caller_busy_ms", 0.0)
        tot["wait"] += r.get("caller_wait_us", 0.0) / 1e3
        tot["alone"] += r.get("alone_ms") or 0.0
        for k in ("caller_lead", "caller_gaps", "caller_tail", "worker_gaps"):
            tot[k] += r.get(k + "_ms", 0.0)
        if not r.get("jobs"):
            tot["a_serial"] += t1
            tot["b_serial"] += r["median_ms"]
    print({k: round(v, 3) for k, v in tot.items()})


def serial_vs(path: str, top: int) -> None:
    """An ``--interleave`` profile, per node: the serial runs' time (1t, the same process and weights),
    the 2-thread node time, the shards' sum (caller + worker; the median over runs where the profile has
    it, else the mean, which one slow run pulls) and 1t / shard sum (below 1: the shards at two threads
    take longer than the node alone on one thread), the caller's time outside shards (means)."""
    d = json.load(open(path))
    print(f"{d['model']}: serial {d.get('serial_wall_median_ms')} ms, {d['threads']}t {d['wall_median_ms']} ms "
          f"(1t/2t {d.get('serial_wall_median_ms', float('nan')) / d['wall_median_ms']:.2f}); pool {d['pool']}")
    rows = sorted((r for r in d["nodes"] if "serial_median_ms" in r), key=lambda r: -r["serial_median_ms"])
    print(f"{'node':<22} {'op':<8} {'1t':>7} {'2t':>7} {'1t/2t':>5} {'shards':>7} {'1t/sh':>5} {'busyC':>6} "
          f"{'busyW':>6} {'alone':>6} {'gaps':>6} {'wait':>6}")
    tot: collections.Counter = collections.Counter()
    for r in rows:
        busy = r.get("busy_median_ms", r.get("caller_busy_ms", 0.0) + r.get("worker_busy_ms", 0.0))
        other = (r.get("alone_ms") or 0.0, r.get("caller_lead_ms", 0.0) + r.get("caller_gaps_ms", 0.0)
                 + r.get("caller_tail_ms", 0.0), r.get("caller_wait_us", 0.0) / 1e3)
        tot["1t"] += r["serial_median_ms"]
        tot["2t"] += r["median_ms"]
        if busy:
            tot["1t_sharded"] += r["serial_median_ms"]
            tot["shards"] += busy
        for k, val in zip(("alone", "gaps", "wait"), other):
            tot[k] += val
        if top and len(tot) and rows.index(r) < top:
            print(f"{r['node'][:22]:<22} {r['op'][:8]:<8} {r['serial_median_ms']:7.3f} {r['median_ms']:7.3f} "
                  f"{r['serial_median_ms'] / r['median_ms']:5.2f} {busy:7.3f} "
                  f"{r['serial_median_ms'] / busy if busy else float('nan'):5.2f} {r.get('caller_busy_ms', 0):6.3f} "
                  f"{r.get('worker_busy_ms', 0):6.3f} {other[0]:6.3f} {other[1]:6.3f} {other[2]:6.3f}")
    print({k: round(v, 3) for k, v in tot.items()},
          f"nodes with jobs: 1t / shard sum {tot['1t_sharded'] / max(tot['shards'], 1e-9):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="resnet18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--loaded", action="store_true")
    ap.add_argument("--set", default=None)
    ap.add_argument("--no-backoff", action="store_true")
    ap.add_argument("--interleave", action="store_true",
                    help="alternate pairs of runs at 2+ threads and with the pool held backed off (every job on the "
                         "caller, kernels cut for one thread), the first run of each pair not kept; per node "
                         "serial_median_ms, and --serial-vs reads it")
    ap.add_argument("--serial-vs", default=None, metavar="JSON",
                    help="an --interleave profile: per node the serial time against the 2-thread shard sum")
    ap.add_argument("--compare", nargs=2, default=None)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare, args.top)
        return
    if args.serial_vs:
        serial_vs(args.serial_vs, args.top)
        return
    print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()

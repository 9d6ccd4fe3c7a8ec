"""Timing shared by the per-kernel A/B scripts (bench_conv_algos, bench_depthwise_s2, bench_gemm_nt,
bench_maxpool): callables interleaved round by round, so that a noisy host slows them alike; and the
old-pool file and busy loop of the shard-pool A/Bs (bench_pool, bench_pool_models)."""
from __future__ import annotations

import contextlib
import time

import numpy as np


def probe_ms(buf: np.ndarray) -> float:
    """The host's speed now, in ms: a fixed workload (``buf``, a float32 array of ``PROBE_FLOATS``, scaled in place 20
    times, best of 5), the same work in every process whatever it runs (turns.py --probe, mlp_blocks.py)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            np.multiply(buf, np.float32(1.0), out=buf)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


PROBE_FLOATS = 1 << 18  # 1 MiB


def best_cpu_ms(fns: dict, reps: int, clock=time.process_time) -> dict:
    """Best CPU time (ms) of each callable in ``fns`` over ``reps`` rounds, the callables
    interleaved within each round. Warm the callables up before calling this. ``clock``: another
    clock (``best_wall_ms``)."""
    best = dict.fromkeys(fns, np.inf)
    for _ in range(reps):
        for name, f in fns.items():
            t0 = clock()
            f()
            best[name] = min(best[name], clock() - t0)
    return {k: v * 1e3 for k, v in best.items()}


def best_wall_ms(fns: dict, reps: int) -> dict:
    """``best_cpu_ms`` by the wall clock (sessions of several threads)."""
    return best_cpu_ms(fns, reps, time.perf_counter)


def old_shards_file(rev: str | None) -> str:
    """``shards.py`` as it was at git revision ``rev``, written to a temporary file for an A/B of
    the shard pool (bench_pool.py, bench_pool_models.py); "" without a revision."""
    import os
    import subprocess

    if not rev:
        return ""
    src = subprocess.run(["git", "show", f"{rev}:packages/cpu_numba/src/kernelkit_numba/shards.py"],
                         check=True, capture_output=True, text=True).stdout
    path = f"/tmp/kk_old_shards_{os.getpid()}.py"
    with open(path, "w") as f:
        f.write(src)
    return path


@contextlib.contextmanager
def busy_core(cpu: int, on: bool = True):
    """A busy loop pinned to ``cpu`` for the body (``on``: else nothing): the "loaded" case."""
    import os
    import subprocess
    import sys

    busy = None
    if on:
        busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"],
                                preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        time.sleep(0.2)
    try:
        yield
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def best_node_ms(sess, feed, runs: int) -> dict:
    """Best time (ms) of each node of a ``profile=True`` session over ``runs`` runs, after three
    warm-up runs (profile_ops.py, quantized_profile.py)."""
    for _ in range(3):
        sess.run(None, feed)
    sess.reset_profile()
    for _ in range(runs):
        sess.run(None, feed)
    best: dict = {}
    for node, _start, secs, _tid in sess.profile_events():
        best[node] = min(best.get(node, np.inf), secs * 1e3)
    return best


def best_node_ms_interleaved(sessions: list, feed, runs: int, rotate: bool = False) -> list[dict]:
    """``best_node_ms`` of several ``profile=True`` sessions run in turn, one run each per round
    (ops_vs_reference.py: on a loaded host a later session no longer meets other load than an
    earlier one). ``rotate``: the order rotated every round, so that no session always runs right
    after the same other one and meets the caches it left (nodes_ab2t.py: a session always after the
    one-thread one ran its first layers 1.2-1.3x slower on the Xeon, session 12)."""
    return [{node: min(ms) for node, ms in per.items()}
            for per in node_ms_rounds_interleaved(sessions, feed, runs, rotate)]


def node_ms_rounds_interleaved(sessions: list, feed, runs: int, rotate: bool = False, burst: int = 1,
                               timed=None) -> list[dict]:
    """``best_node_ms_interleaved``'s runs, every round kept: per session, node -> its ms in each round
    (a list of ``runs``, round r of every session in the same place; a node called more than once in a
    run: its fastest call). ops_vs_reference.py reads the spread of a node's within-round ratio from it.
    ``burst`` > 1: each turn is that many runs back to back, the last one timed (its weights back in the
    caches after the other sessions' turns, as in a process that runs one session). ``timed(i, r, run)``:
    called for each timed run instead of ``run()`` (session i, round r; pair_halves.py traces it)."""
    for sess in sessions:
        for _ in range(3):
            sess.run(None, feed)
        sess.reset_profile()
    n = len(sessions)
    seen = [0] * n
    per: list[dict] = [{} for _ in sessions]
    for r in range(runs):
        for k in range(n):
            i = (r + k) % n if rotate else k
            if burst > 1:
                for _ in range(burst - 1):
                    sessions[i].run(None, feed)
                seen[i] = len(sessions[i].profile_events())
            if timed is None:
                sessions[i].run(None, feed)
            else:
                timed(i, r, lambda i=i: sessions[i].run(None, feed))
            events = sessions[i].profile_events()
            run: dict = {}
            for node, _start, secs, _tid in events[seen[i]:]:
                run[node] = min(run.get(node, np.inf), secs * 1e3)
            seen[i] = len(events)
            for node, ms in run.items():
                per[i].setdefault(node, [np.inf] * runs)[r] = ms
    return per


def steal_seconds() -> float | None:
    """Seconds the hypervisor took from the CPUs of this process's affinity since boot (``/proc/stat``'s
    steal column), or None where that cannot be read. The Xeon's figures move up to 50 % between
    processes of the same code; the steal over a process's timed runs says whether its host lost time
    (the Xeon reported none in session 9)."""
    from kernelkit_numba.shards import proc_stat_seconds

    return proc_stat_seconds((8,))


def ort_best_nodes(proto, feed, threads: int, runs: int) -> list[dict]:
    """onnxruntime's own profile of ``runs`` runs after 3 warm-up runs (``enable_profiling``): per node
    in run order, ``{"name", "op", "shapes" (input shapes), "ms" (best kernel time)}``. The profiler
    adds to onnxruntime's per-node times: compare whole runs without it."""
    import json
    import os
    import tempfile

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for _ in range(3 + runs):
        sess.run(None, feed)
    path = sess.end_profiling()
    with open(path) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    os.unlink(path)
    order, best, info = [], {}, {}
    for e in events[len(events) * 3 // (3 + runs):]:  # skip the warm-up runs
        name = e["name"][:-len("_kernel_time")]
        if name not in best:
            order.append(name)
            shapes = [list(list(d.values())[0]) for d in e["args"].get("input_type_shape", [])]
            info[name] = (e["args"].get("op_name"), shapes)
        best[name] = min(best.get(name, np.inf), e["dur"] / 1e3)
    return [{"name": n, "op": info[n][0], "shapes": info[n][1], "ms": best[n]} for n in order]

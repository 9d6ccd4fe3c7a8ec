"""The MLP b64's one-thread runtimes in blocks of back-to-back calls, all in ONE process (issue 11, session 17):
turns.py's blocks (each runtime in a process of its own) and mlp_parts.py's single calls interleaved in one process
put numba 1t against the reference at different ratios (the Xeon, session 17's call L1: 1.45 in turns, 2.04 in
mlp_parts.py's medians). Here each round runs every session's block (SETTLE untimed calls, then calls for BLOCK_S
seconds) in a rotated order, a host probe (turns.py's: a 1 MiB float32 array scaled 20 times, best of 5) before
each; per session the median of its block medians and the ratios within rounds, median (range).

    python benchmarks/mlp_blocks.py [rounds=10] [LABEL=SPEC ...]

``LABEL=SPEC``: one more numba 1t session built under SPEC (mlp_parts.py's syntax: ``kernels.fgemm.X=V;...``).
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from _timing import PROBE_FLOATS, probe_ms  # noqa: E402
from mlp_parts import settings  # noqa: E402
from test_bench_numba import model_case, ort_session  # noqa: E402

BLOCK_S = 0.2
SETTLE = 3
PROBE = np.ones(PROBE_FLOATS, np.float32)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    variants = [a.split("=", 1) for a in sys.argv[2:]]
    proto, model, feed, _ = model_case("mlp")
    sessions = {"numba 1t": kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1)}
    for label, spec in variants:
        with settings(spec):
            sessions[label] = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1)
            for _ in range(3):
                sessions[label].run(None, feed)  # binds under SPEC
    sessions["reference"] = kernelkit.Session(model, vendors=["reference"], fallback=False)
    ort1 = ort_session(proto, 1)
    fns = {name: (lambda s=s: s.run(None, feed)) for name, s in sessions.items()}
    fns["ORT 1t"] = lambda: ort1.run(None, feed)
    names = list(fns)
    calls = {}
    for n in names:
        for _ in range(3):
            fns[n]()
        t0 = time.perf_counter()
        fns[n]()
        calls[n] = max(3, min(400, round(BLOCK_S / max(time.perf_counter() - t0, 1e-5))))
    med = {n: [] for n in names}
    probes = {n: [] for n in names}
    for rnd in range(rounds):
        shift = rnd % len(names)
        order = names[shift:] + names[:shift]
        if rnd % 2:
            order = order[::-1]
        for n in order:
            probes[n].append(probe_ms(PROBE))
            for _ in range(SETTLE):
                fns[n]()
            ms = []
            for _ in range(calls[n]):
                t0 = time.perf_counter()
                fns[n]()
                ms.append((time.perf_counter() - t0) * 1e3)
            med[n].append(float(np.median(ms)))
    print(f"MLP b64, one process, {rounds} rounds of blocks ({BLOCK_S} s, {SETTLE} settling calls); ms")
    print("| session | median of block medians | best block | probe ms (median) |")
    print("|---|---:|---:|---:|")
    for n in names:
        print(f"| {n} | {np.median(med[n]):.3f} | {min(med[n]):.3f} | {np.median(probes[n]):.4f} |")
    pairs = [("reference", "numba 1t"), ("numba 1t", "ORT 1t")]
    pairs += [("numba 1t", label) for label, _ in variants] + [("reference", label) for label, _ in variants]
    print("\n| ratio (within rounds) | median | range |")
    print("|---|---:|---:|")
    for a, b in pairs:
        r = np.array(med[a]) / np.array(med[b])
        print(f"| {a} / {b} | {np.median(r):.3f} | {r.min():.2f}-{r.max():.2f} |")


if __name__ == "__main__":
    main()

"""Timing shared by the per-kernel A/B scripts (bench_conv_algos, bench_depthwise_s2, bench_gemm_nt,
bench_maxpool): callables interleaved round by round, so that a noisy host slows them alike."""
from __future__ import annotations

import time

import numpy as np


def best_cpu_ms(fns: dict, reps: int) -> dict:
    """Best CPU time (ms) of each callable in ``fns`` over ``reps`` rounds, the callables
    interleaved within each round. Warm the callables up before calling this."""
    best = dict.fromkeys(fns, np.inf)
    for _ in range(reps):
        for name, f in fns.items():
            t0 = time.process_time()
            f()
            best[name] = min(best[name], time.process_time() - t0)
    return {k: v * 1e3 for k, v in best.items()}

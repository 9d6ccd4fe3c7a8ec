"""The batch-1 int8 products as two halves on two cores (kernels/qpair.py) against the one-thread
product, in one process: a two-thread kernelkit session of a quantized model (benchmarks/quantized.py's
models, batch 1) run in alternating blocks with the pairs on and off (off: the helper held in a
back-off, so every product runs on the calling thread as before), and a one-thread session; best and
median ms of each, the helper's counts, one JSON line.

    OPENBLAS_NUM_THREADS=1 taskset -c 0,1 python benchmarks/quantized_pair.py mlp --runs 3000 [--block 100]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_quantized", Path(__file__).parent / "quantized.py")
qbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qbench)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=sorted(qbench.MODES))
    p.add_argument("--runs", type=int, default=3000, help="runs of each mode")
    p.add_argument("--block", type=int, default=100, help="runs of one mode before switching")
    p.add_argument("--no-backoff", action="store_true", help="the shard pool never backs off (a loaded dev box)")
    args = p.parse_args(argv)
    from kernelkit_numba import shards
    from kernelkit_numba.kernels import qpair

    if args.no_backoff:
        shards.POOL.backoff = False
    proto, path = qbench.quantized_model(args.model, False, Path(tempfile.mkdtemp()),
                                         reduce_range=not qbench._has_vnni())
    x = qbench._inputs(proto, 1, 0)
    two = kernelkit.Session(convert(path), threads=2, options={"numba_start": "eager"})
    one = kernelkit.Session(convert(path), threads=1, options={"numba_start": "eager"})
    feeds = {"x": x}
    ref = one.run(None, feeds)[0]
    for _ in range(200):
        out = two.run(None, feeds)[0]
    helpers = [qpair.server()]  # fpair's helper, the one for every pair (issue 11, session 10, second round)
    same = bool(np.array_equal(out, ref))

    def hold(on: bool) -> None:
        for h in helpers:
            h.until = 0.0 if on else float("inf")

    modes = {"pair": (two, True), "serial2": (two, False), "one": (one, False)}
    times = {m: [] for m in modes}
    before = [dict(h.stats) for h in helpers]
    done = 0
    while done < args.runs:
        for mode, (sess, on) in modes.items():
            hold(on)
            for _ in range(5):
                sess.run(None, feeds)
            t = times[mode]
            for _ in range(min(args.block, args.runs - done)):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                t.append(time.perf_counter() - t0)
        done += args.block
    hold(True)
    row = {"model": args.model, "runs": args.runs, "bit_exact": same}
    for mode, t in times.items():
        ms = np.array(t) * 1e3
        row[f"{mode}_best"], row[f"{mode}_median"] = round(float(ms.min()), 4), round(float(np.median(ms)), 4)
    row["pair/serial2 median"] = round(row["pair_median"] / row["serial2_median"], 3)
    row["pair/one median"] = round(row["pair_median"] / row["one_median"], 3)
    row["helpers"] = [{k: h.stats[k] - b[k] for k in h.stats} for h, b in zip(helpers, before)]
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""kernelkit numba int8 and onnxruntime int8 on one quantized model (as benchmarks/quantized.py
makes it), in one process, one run of each in turn for ``--runs`` runs: best and median ms of each and
their ratios, one JSON line. For A/B comparisons of small per-run costs on a noisy machine: run it under
two trees (base first on PYTHONPATH, then the branch) several times and compare the ratios, which the
machine's load moves much less than absolute times.

    OPENBLAS_NUM_THREADS=1 python benchmarks/quantized_turns.py mlp --runs 3000 [--threads 2]
        [--int8-work 32] [--column-shard-ops 1048576]   # qgemm's two-thread settings, for a trial
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
import onnxruntime as ort  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_quantized", Path(__file__).parent / "quantized.py")
qbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qbench)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=sorted(qbench.MODES))
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--int8-work", type=float, help="qgemm.INT8_WORK for this process")
    p.add_argument("--column-shard-ops", type=float, help="qgemm.COLUMN_SHARD_OPS for this process")
    args = p.parse_args(argv)
    from kernelkit_numba.kernels import qgemm

    if args.int8_work is not None:
        qgemm.INT8_WORK = args.int8_work
    if args.column_shard_ops is not None:
        qgemm.COLUMN_SHARD_OPS = args.column_shard_ops
    proto, path = qbench.quantized_model(args.model, False, Path(tempfile.mkdtemp()),
                                         reduce_range=not qbench._has_vnni())  # quantized.py's default (auto)
    x = qbench._inputs(proto, 1, 0)
    kk = kernelkit.Session(convert(path), threads=args.threads, options={"numba_start": "eager"})
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = args.threads, 1
    ox = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    runs = {"kk": lambda: kk.run(None, {"x": x}), "ort": lambda: ox.run(None, {"x": x})}
    times = {key: [] for key in runs}
    for _ in range(10):
        for run in runs.values():
            run()
    for _ in range(args.runs):
        for key, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - t0)
    ms = {key: np.array(t) * 1e3 for key, t in times.items()}
    row = {"model": args.model, "threads": args.threads, "runs": args.runs}
    for key, t in ms.items():
        row[f"{key}_best"], row[f"{key}_median"] = round(float(t.min()), 4), round(float(np.median(t)), 4)
    row["ratio_best"] = round(row["kk_best"] / row["ort_best"], 3)
    row["ratio_median"] = round(row["kk_median"] / row["ort_median"], 3)
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

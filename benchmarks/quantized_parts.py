"""Where one run of a small quantized model goes (benchmarks/quantized.py's models, batch 1): each
node's compiled product alone (a DynamicQuantizeMatMul's bound Numba call, ``qgemm._bind_small``),
the node's call as the plan makes it (``step.direct()``) and its runner, the executor's walk over the
runners, ``Executor.start`` + ``finish``, and ``Session.run``; best and median microseconds of
``--runs`` calls each, one after the other in this process.

    OPENBLAS_NUM_THREADS=1 python benchmarks/quantized_parts.py mlp [--runs 3000] [--threads 2]
"""
from __future__ import annotations

import argparse
import importlib.util
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


def best_us(fn, runs: int) -> str:
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return f"{min(t) * 1e6:7.2f} {float(np.median(t)) * 1e6:7.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=sorted(qbench.MODES))
    p.add_argument("--runs", type=int, default=3000)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    proto, path = qbench.quantized_model(args.model, False, Path(tempfile.mkdtemp()),
                                         reduce_range=not qbench._has_vnni())
    x = qbench._inputs(proto, 1, 0)
    sess = kernelkit.Session(convert(path), threads=args.threads, options={"numba_start": "eager"})
    feeds = {"x": x}
    for _ in range(10):
        sess.run(None, feeds)
    ex = sess._executor
    names = sess._resolve_outputs(None)
    key = None if ex.plan.static else tuple(feeds[n].shape for n, _ in ex.inputs)
    pool = ex.pool_for(key)
    runners = ex.runners if ex.plan.static else ex._fixed
    arena = pool.take()
    env0 = arena.template.copy()
    for name, slot in ex.inputs:
        env0[slot] = feeds[name]
    before, env = [], list(env0)  # each step's inputs as the run has them
    for run in runners:
        before.append(list(env))
        run(env)
    pool.give(arena)
    print(f"{args.model}, batch 1, {args.threads} thread(s): best and median us of {args.runs} calls")
    for i, step in enumerate(ex.plan.steps):
        xs = [before[i][s] if s is not None else None for s in step.input_slots]
        call = step.direct()[0] if step.direct is not None else None
        bound = getattr(getattr(step, "kernel", None), "_plain", None)
        line = f"  {step.name:24s} runner {best_us(lambda r=runners[i], e=before[i]: r(list(e)), args.runs)}"
        if call is not None:
            line += f"  call {best_us(lambda c=call, xs=xs: c(*xs), args.runs)}"
        if bound is not None and bound[11] is not None:  # the one Numba call (one output, no residual)
            x2 = xs[0].reshape(bound[9])
            x2.setflags(write=False)
            flat = np.empty(bound[10], np.float32)
            product = (bound[18][0], (bound[11], x2, *bound[12], flat))
            line += f"  product {best_us(lambda f=product: f[0](*f[1]), args.runs)}"
        print(line)
    print(f"  {'walk':24s} {best_us(lambda: ex._walk_quiet(runners, list(env0)), args.runs)}")
    print(f"  {'start + finish':24s} {best_us(lambda: ex.finish(ex.start(feeds), feeds, names), args.runs)}")
    print(f"  {'Session.run':24s} {best_us(lambda: sess.run(None, feeds), args.runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

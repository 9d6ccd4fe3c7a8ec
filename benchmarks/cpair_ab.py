"""In-process A/B of the float32 conv pairs (kernels/cpair.py, issue 11, session 10): one process holds a
two-thread numba session of the model with pairs on, one with them off (``KERNELKIT_F32_PAIR=off`` when
it bound its nodes) and a one-thread session; they take turns in short blocks, round after round, and
the ratios are medians of the ratios within each round (the host drifts between blocks far more than
within one).

    taskset -c 0,1 python benchmarks/cpair_ab.py mobilenetv2 [--rounds 30] [--calls 10]

Prints per round the block medians, the helper's counters (paired / alone / back-offs), and at the end
the median ratios on/off and on/1t.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="mobilenetv2")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=10, help="timed calls per block")
    ap.add_argument("--settle", type=int, default=2, help="untimed calls at the start of each block")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=ATTR=VALUE[,ATTR=VALUE]: one more session with pairs on, bound with these "
                         "kernels.cpair constants set (e.g. pix=AXIS=pixels, nodw=PAIR_DEPTHWISE=0; "
                         "MODULE.ATTR: kernels.MODULE's, e.g. nohead=hpair.ON=0)")
    args = ap.parse_args(argv)
    os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
    sys.path.insert(0, HERE)
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import cpair
    from test_bench_numba import model_case

    _proto, model, feed, _gflop = model_case(args.model)

    def where(attr):
        """(module, name) of a variant's constant: ATTR in kernels.cpair, MODULE.ATTR in kernels.MODULE."""
        mod, _, name = attr.rpartition(".")
        return (importlib.import_module(f"kernelkit_numba.kernels.{mod}") if mod else cpair), name

    def session(threads, pairs, consts=()):
        was = os.environ.get(cpair.ENV)
        os.environ[cpair.ENV] = "auto" if pairs else "off"
        kept = {attr: getattr(*where(attr)) for attr, _ in consts}
        for attr, value in consts:
            setattr(*where(attr), type(kept[attr])(value) if not isinstance(kept[attr], bool) else value not in
                    ("0", "false", "no"))
        try:
            return kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=threads)
        finally:
            for attr, value in kept.items():
                setattr(*where(attr), value)
            if was is None:
                os.environ.pop(cpair.ENV)
            else:
                os.environ[cpair.ENV] = was

    sessions = {"on": session(args.threads, True), "off": session(args.threads, False), "1t": session(1, False)}
    for spec in args.variant:
        name, _, rest = spec.partition("=")
        sessions[name] = session(args.threads, True, [tuple(kv.split("=", 1)) for kv in rest.split(",")])
    want = sessions["1t"].run(None, feed)[0]
    for s in sessions.values():
        for _ in range(3):
            assert_close(s.run(None, feed)[0], want, np.float32)
    srv = cpair.server()
    blocks: dict = {k: [] for k in sessions}
    names = list(sessions)
    for rnd in range(args.rounds):
        shift = rnd % len(names)
        order = names[shift:] + names[:shift]
        before = dict(srv.stats)
        for name in order:
            s = sessions[name]
            for _ in range(args.settle):
                s.run(None, feed)
            ms = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                s.run(None, feed)
                ms.append((time.perf_counter() - t0) * 1e3)
            blocks[name].append(float(np.median(ms)))
        delta = {k: v - before.get(k, 0) for k, v in srv.stats.items() if v != before.get(k, 0)}
        print(f"round {rnd}: " + ", ".join(f"{k} {blocks[k][-1]:.2f}" for k in names) + f" ms; helper {delta}",
              flush=True)
    on, off, one = (np.array(blocks[k]) for k in ("on", "off", "1t"))
    for name in names[3:]:
        v = np.array(blocks[name])
        print(f"{args.model}: variant {name} {np.median(v):.2f} ms, per-round {name}/off {np.median(v / off):.3f}, "
              f"{name}/on {np.median(v / on):.3f}")
    print(f"{args.model}: medians on {np.median(on):.2f}, off {np.median(off):.2f}, 1t {np.median(one):.2f} ms; "
          f"per-round on/off {np.median(on / off):.3f} (min {np.min(on / off):.3f}, max {np.max(on / off):.3f}), "
          f"on/1t {np.median(on / one):.3f}, off/1t {np.median(off / one):.3f}; helper {srv.stats}")


if __name__ == "__main__":
    main()

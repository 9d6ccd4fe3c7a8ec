"""Each block of a traced turns.py run (``KERNELKIT_TURNS_TRACE=1 ... --json OUT.jsonl``), one line a block and one a
run (issue 11, session 15; docs/numba.md, "Layers alone under load"): the block's median, its pool counters and its
threads (run ms, run-queue wait ms, last CPU, migrations), then each timed call as ``MS[pN][aN][w][!]@CPU``: its ms,
the pair calls it paired (p) and that the helper missed (a), a wake of the helper (w), ``!`` where the shard pool
was not backed off at its start, and the CPU the caller ended it on.

    python benchmarks/turns_runs.py OUT.jsonl [MODEL]
"""
from __future__ import annotations

import json
import sys


def run_text(run) -> str:
    ms, paired, alone, wakes, off, cpu = run
    return (f"{ms:.0f}" + (f"p{paired}" if paired else "") + (f"a{alone}" if alone else "") + ("w" if wakes else "")
            + ("" if off else "!") + f"@{cpu}")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    model = argv[1] if len(argv) > 1 else None
    for line in open(argv[0]):
        r = json.loads(line)
        if model and r.get("model") != model:
            continue
        t = r.get("trace") or {}
        threads = [(round(x["run_ms"]), round(x["rq_wait_ms"], 1), x["last_cpu"], x["migrations"])
                   for x in t.get("threads", [])]
        print(r.get("model"), r.get("load", ""), r.get("round"), r.get("runtime"), round(r["median_ms"], 1),
              r.get("pool"), threads)
        if t.get("runs"):
            print("    " + " ".join(run_text(x) for x in t["runs"]))


if __name__ == "__main__":
    main()

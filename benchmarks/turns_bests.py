"""turns.py's ratios from each block's best call beside its median (issue 11, session 17): the JSON lines of a turns.py
run (``--json``) hold each block's ``best_ms`` with its ``median_ms``; on a noisy host every runtime's block median
sits 12-16 % above its best call (the MLP in mlp17's Xeon call), and which block draws the slow calls moves each
round's ratio of medians, where the ratio of the blocks' best calls reads the runtimes at the host's fast state. No run.

    python benchmarks/turns_bests.py OUT.jsonl [MORE.jsonl ...]

Per model and load: each runtime's median over rounds of its block medians and best calls and of median / best; for
turns.py's pairs of runtimes (``turns.RATIOS``, then each variant against the runtimes of its thread count), the ratio
within rounds of the medians and of the bests, median (range) and the rounds where it is above 1.
"""
from __future__ import annotations

import collections
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pairs(runtimes, one_thread) -> list[tuple[str, str]]:
    """turns.RATIOS' pairs among ``runtimes``, then each variant against the runtimes of its thread count (a
    ``--variant1`` (in ``one_thread``): numba1, reference1, ort1; a ``--variant``: numba, ort2), turns.py's ratios."""
    from turns import RATIOS

    out = [(num, den) for _label, num, den in RATIOS if num in runtimes and den in runtimes]
    base = ("numba1", "numba", "reference1", "ort1", "ort2", "numbanp")
    for other in runtimes:
        if other not in base:
            mates = ("numba1", "reference1", "ort1") if other in one_thread else ("numba", "ort2")
            out += [(b, other) for b in mates if b in runtimes and (b, other) not in out]
    return out


def main(paths) -> None:
    rows = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    groups = collections.defaultdict(lambda: collections.defaultdict(dict))  # (model, load) -> round -> runtime -> row
    for r in rows:
        if "median_ms" in r and "best_ms" in r:
            groups[r["model"], r.get("load", "quiet")][r["round"]][r["runtime"]] = r
    for (model, load), rounds in groups.items():
        runtimes = list(dict.fromkeys(rt for rnd in rounds.values() for rt in rnd))
        one_thread = {rt for rnd in rounds.values() for rt, row in rnd.items() if row.get("threads") == 1}
        print(f"## {model} {load}: {len(rounds)} rounds")
        print("| runtime | block medians (ms) | best calls (ms) | median / best |")
        print("|---|---:|---:|---:|")
        for rt in runtimes:
            med = np.array([rnd[rt]["median_ms"] for rnd in rounds.values() if rt in rnd])
            best = np.array([rnd[rt]["best_ms"] for rnd in rounds.values() if rt in rnd])
            print(f"| {rt} | {np.median(med):.3f} | {np.median(best):.3f} (min {best.min():.3f}) | "
                  f"{np.median(med / best):.3f} |")
        print("\n| ratio | of the medians | above 1 | of the bests | above 1 |")
        print("|---|---:|---:|---:|---:|")
        for num, den in pairs(runtimes, one_thread):
            both = [rnd for rnd in rounds.values() if num in rnd and den in rnd]
            cells = []
            for key in ("median_ms", "best_ms"):
                r = np.array([rnd[num][key] / rnd[den][key] for rnd in both])
                cells += [f"{np.median(r):.3f} ({r.min():.2f}-{r.max():.2f})", f"{int((r > 1).sum())} of {len(r)}"]
            print(f"| {num} / {den} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

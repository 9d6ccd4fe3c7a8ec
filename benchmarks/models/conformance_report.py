"""Regenerate docs/conformance.md: ONNX backend node tests per op and vendor.

    python benchmarks/models/conformance_report.py [--out docs/conformance.md]

Runs the same tests as tests/test_onnx_backend.py (kernelkit_converters.onnx.conformance) for every
installed vendor and writes pass / fail / excluded / no-kernel counts per op, then the exclusions
with their reasons (from kernelkit_converters/onnx/backend_exclusions.py).
"""
from __future__ import annotations

import argparse
import datetime
import io
import platform
import unittest
from collections import defaultdict
from pathlib import Path

import kernelkit
import numpy
import onnx
from kernelkit_converters.onnx.backend_exclusions import UNSUPPORTED_OPS, exclusions
from kernelkit_converters.onnx.conformance import backend_test, installed_vendors

ROOT = Path(__file__).resolve().parents[2]


def run_vendor(vendor: str):
    case, chosen, excluded, missing = backend_test(vendor, __name__)
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    failed = {t.id().rsplit(".", 1)[-1].removesuffix("_cpu"): msg for t, msg in result.failures + result.errors}
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, op in chosen.items():
        counts[op]["fail" if name in failed else "pass"] += 1
    for name in excluded:
        counts[_op_of(name)]["excluded"] += 1
    for op in missing.values():
        counts[op]["no kernel"] += 1
    return counts, failed


def _op_of(name: str) -> str:
    from kernelkit_converters.onnx.conformance import node_tests

    return node_tests().get(name, "?")


def render(results: dict) -> str:
    from kernelkit_converters.onnx.conformance import node_tests

    n_tests = len(node_tests())
    vendors = list(results)
    ops = sorted({op for counts, _ in results.values() for op in counts})
    lines = [
        "# ONNX backend conformance",
        "",
        "All of ONNX's backend node tests (`onnx.backend.test`, onnx " + onnx.__version__ + f": {n_tests} tests),",
        "run per vendor with fallback off and compared with kernelkit's tolerances",
        "(`kernelkit.testing.assert_close`). Regenerate with `python benchmarks/models/conformance_report.py`;",
        "CI runs the same tests in `tests/test_onnx_backend.py`.",
        "",
        f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"Python {platform.python_version()}, NumPy {numpy.__version__}, kernelkit {kernelkit.__version__}.",
        "",
        "Cells: passed / failed (excluded, no kernel for this vendor). Excluded tests need ops, dtypes or",
        "attribute modes kernelkit documents as unsupported (reasons below); a vendor without a kernel",
        "for a test's op and dtype is a coverage gap, not a failure. An `_expanded` test (the op's function",
        "body in other ops) counts for its op.",
        "",
        "## Totals",
        "",
        "| vendor | passed | failed | excluded | no kernel |",
        "|---|---:|---:|---:|---:|",
    ]
    for vendor in vendors:
        counts, _ = results[vendor]
        tot = defaultdict(int)
        for c in counts.values():
            for k, v in c.items():
                tot[k] += v
        lines.append(f"| {vendor} | {tot['pass']} | {tot['fail']} | {tot['excluded']} | {tot['no kernel']} |")
    lines += ["", "## Per op", "", "| op | " + " | ".join(vendors) + " |", "|---|" + "---|" * len(vendors)]
    for op in ops:
        cells = []
        for vendor in vendors:
            c = results[vendor][0].get(op, {})
            extra = ", ".join(f"{c[k]} {k}" for k in ("excluded", "no kernel") if c.get(k))
            cell = f"{c.get('pass', 0)} / {c.get('fail', 0)}" + (f" ({extra})" if extra else "")
            cells.append(cell)
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    failures = [(v, n, m) for v, (_, failed) in results.items() for n, m in sorted(failed.items())]
    if failures:
        lines += ["", "## Failures", ""]
        for vendor, name, msg in failures:
            last = [ln for ln in msg.strip().splitlines() if ln.strip()][-1][:200]
            lines.append(f"- {vendor} `{name}`: {last}")
    lines += ["", "## Unsupported ops", "", "Tests using one of these ops (not registered in kernelkit) are excluded "
              "with its reason (`UNSUPPORTED_OPS` in backend_exclusions.py).", "", "| op | reason |", "|---|---|"]
    registered = set(kernelkit.ops())
    for op, reason in sorted(UNSUPPORTED_OPS.items()):
        if op not in registered:
            lines.append(f"| {op} | {reason} |")
    lines += ["", "## Exclusions", "", "| vendors | test (regex) | reason |", "|---|---|---|"]
    seen = {}
    for vendor in vendors:
        for pattern, reason in exclusions(vendor).items():
            seen.setdefault((pattern, reason), []).append(vendor)
    for (pattern, reason), vs in seen.items():
        who = "all" if len(vs) == len(vendors) else ", ".join(vs)
        cell = pattern.replace("|", "\\|")  # a regex alternation would split the table row
        lines.append(f"| {who} | `{cell}` | {reason} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "conformance.md"))
    args = parser.parse_args()
    vendors = sorted(installed_vendors(), key=lambda v: (v != "reference", v))  # the reference first
    results = {vendor: run_vendor(vendor) for vendor in vendors}
    Path(args.out).write_text(render(results))


if __name__ == "__main__":
    main()

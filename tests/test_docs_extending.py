"""Every ```python block of docs/extending.md runs, in order, in one fresh interpreter (so the ops
and kernels the walk-through registers do not leak into this test process). Blocks starting with
``# needs: gpu`` run only when an OpenCL device is present (PoCL in CI)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "extending.md"

RUNNER = r"""
import json, sys
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__docs__"}
for line, code in blocks:
    exec(compile(code, f"docs/extending.md:{line}", "exec"), namespace)
print("ran", len(blocks), "blocks")
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the block's first code line, code) for every ```python fence."""
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 2
        # pad with blank lines so that tracebacks point at the doc's own line numbers
        blocks.append((line, "\n" * (line - 1) + match.group(1)))
    return blocks


def _has_opencl() -> bool:
    try:
        from kernelkit_opencl.runtime import list_devices

        return bool(list_devices())
    except Exception:  # noqa: BLE001 - no OpenCL: the gpu blocks are left out (and counted below)
        return False


def test_every_python_block_runs():
    import json

    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 10
    gpu = _has_opencl()
    chosen = [b for b in blocks if gpu or not b[1].lstrip("\n").startswith("# needs: gpu")]
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(chosen), capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert f"ran {len(chosen)} blocks" in proc.stdout
    if gpu:
        assert len(chosen) == len(blocks)

"""The fuzz suite's short budget (issue 13): hypothesis-driven structured mutation of the .kkm
loader, the ONNX converter, deployment YAML and the custom-kernel XML/YAML readers, a few seconds
in all. Every case must load or raise a KernelkitError. The long run with per-case timeouts and an
RSS cap is ``python -m kernelkit.fuzz`` (docs/robustness.md)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit import fuzz

SCALE = int(os.environ.get("KK_FUZZ_SCALE", "1"))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    # the seeds of the custom target come from this checkout, wherever kernelkit is installed
    examples = Path(__file__).resolve().parents[3] / "examples" / "custom_opencl"
    return fuzz.Workspace(tmp_path_factory.mktemp("fuzz"), examples=examples)


def _needs(target):
    module = {"onnx": "kernelkit_converters", "custom": "kernelkit_opencl"}.get(target)
    return pytest.mark.skipif(module is not None and importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed")


@pytest.mark.parametrize("target", [pytest.param(t, marks=_needs(t)) for t in fuzz.TARGETS])
def test_mutated_files_load_or_raise_typed_errors(workspace, target):
    """Every mutated input is read or refused with a KernelkitError: none raises anything else."""
    assert target != "custom" or workspace.custom, "examples/custom_opencl seeds are missing"

    @settings(max_examples=25 * SCALE, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def case(data):
        payload = fuzz.draw_case(data.draw, target, workspace)
        kind, detail = fuzz.run_case(target, payload, workspace)
        assert kind in ("ok", "typed"), f"{target}: {detail}"

    case()


def test_worker_reports_hangs_and_memory(tmp_path):
    """The long run's worker: a case over the timeout is a hang, and the worker restarts after it."""
    worker = fuzz.Worker(tmp_path, mem_limit=0)
    try:
        fifo = tmp_path / "case.yml"  # run_deploy writes here: a FIFO makes write_bytes block forever
        os.mkfifo(fifo)
        kind, _, _ = worker.case("deploy", b"model: m.kkm\n", timeout=3)
        assert kind == "hang"
        os.unlink(fifo)
        kind, _, rss = worker.case("deploy", b"model: m.kkm\n", timeout=60)
        assert kind == "ok" and rss > 0
    finally:
        worker.stop()

"""examples/plugin installs as its own package into a fresh venv and plugs its op into kernelkit
through the ``kernelkit.backends`` entry point; a plugin whose import fails is a warning, not a crash.

The venv sees the packages of the interpreter running the tests (``kernelkit.testing.child_venv``:
from a venv, tox or a system interpreter alike) and the install is offline (``--no-deps
--no-build-isolation``), so it costs a few seconds.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernelkit.testing import child_venv

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "plugin"

BROKEN_PYPROJECT = """
[build-system]
requires = ["hatchling>=1.18"]
build-backend = "hatchling.build"

[project]
name = "kernelkit-broken-plugin"
version = "0.0.1"

[project.entry-points."kernelkit.backends"]
broken = "kernelkit_broken_plugin:initialize"

[tool.hatch.build.targets.wheel]
packages = ["kernelkit_broken_plugin"]
"""

# Runs inside the venv. Computes the op's formula independently of the plugin's own reference.
SCRIPT = r"""
import json, os, sys, warnings
import numpy as np

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import kernelkit as kk
    status = kk.load_backends()
import kernelkit_example_plugin
from kernelkit.registry import get_schema
from kernelkit.testing import assert_close, run_single_op

def expected(x, coefficients, scale, bias, relu, axis=1):
    y = sum(np.float64(c) * x.astype(np.float64) ** k for k, c in enumerate(coefficients)) * scale
    shape = [1] * x.ndim
    shape[axis] = -1
    y = y + np.frombuffer(bias, "<f4").astype(np.float64).reshape(shape)
    return np.maximum(y, 0) if relu else y

g = kk.GraphBuilder("uses_plugin")
x = g.input("x", ("N", 3, 4), "float32")
bias = np.array([0.5, -1.0, 2.0], "<f4").tobytes()
y = g.op("ChannelPoly", x, domain="com.example", coefficients=[1.0, -2.0, 0.5], scale=1.5,
         activation="relu", bias=bias)
g.output(g.op("Neg", y))
model = g.build()
feed = np.random.default_rng(0).uniform(-3, 3, (2, 3, 4)).astype(np.float32)
want = -expected(feed, [1.0, -2.0, 0.5], 1.5, bias, True)
report = {"status": status, "plugin_file": kernelkit_example_plugin.__file__, "runs": {},
          "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}
OPTIONS = {"opencl_device": os.environ.get("KERNELKIT_OPENCL_DEVICE", "pocl")}
targets = [("cpu", None)] + [("cpu", [v]) for v in ("reference", "numba")]
if "--gpu" in sys.argv:
    targets.append(("gpu", None))
for device, vendors in targets:
    sess = kk.Session(model, device=device, vendors=vendors, fallback=vendors is None,
                      options=OPTIONS)
    got = sess.run(None, {"x": feed})[0]
    report["runs"][f"{device}:{vendors}"] = {"placement": sess.placement()["ChannelPoly_0"],
                                             "max_err": float(np.max(np.abs(got - want)))}

# what the conformance suite does for every registered kernel of the op: its samples vs the reference
schema = get_schema("ChannelPoly", "com.example")
checked = []
for key in kk.kernels("com.example::ChannelPoly"):
    if key.vendor == "reference" or (key.device == "gpu" and "--gpu" not in sys.argv):
        continue
    for inputs, attrs in schema.samples(np.random.default_rng(1), key.dtype):
        ref = run_single_op("ChannelPoly", inputs, attrs, domain="com.example", vendors=["reference"], fallback=False)
        got = run_single_op("ChannelPoly", inputs, attrs, domain="com.example", device=key.device,
                            vendors=[key.vendor], fallback=False, options=OPTIONS)
        assert_close(got[0], ref[0], err_msg=str(key))
    checked.append(list(key))
report["conformance"] = checked
print(json.dumps(report))
"""


def _has_pocl() -> bool:
    try:
        import pyopencl as cl

        return any("portable" in p.name.lower() for p in cl.get_platforms())
    except Exception:  # noqa: BLE001 - no OpenCL here: the gpu part is left out
        return False


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("plugin")
    shutil.copytree(PLUGIN, tmp / "plugin", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    broken = tmp / "broken"
    (broken / "kernelkit_broken_plugin").mkdir(parents=True)
    (broken / "pyproject.toml").write_text(BROKEN_PYPROJECT)
    (broken / "kernelkit_broken_plugin" / "__init__.py").write_text(
        "import kernelkit_module_that_does_not_exist  # deliberately broken\n")
    python = child_venv(tmp / "venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                    str(tmp / "plugin"), str(broken)],
                   check=True, cwd=tmp, capture_output=True)
    return python


def run_in(python: Path, *args: str) -> dict:
    proc = subprocess.run([str(python), "-c", SCRIPT, *args], capture_output=True, text=True, cwd=python.parents[2],
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plugin_installs_into_fresh_venv_and_runs_a_model(venv):
    gpu = _has_pocl()
    report = run_in(venv, *(["--gpu"] if gpu else []))
    assert Path(report["plugin_file"]).is_relative_to(venv.parents[1])  # the venv's copy, not the source tree
    assert report["status"]["example"] == "ok"
    runs = report["runs"]
    assert runs["cpu:None"]["placement"] == ["cpu", "numba"]  # numba (priority 0) beats the reference (-100)
    assert runs["cpu:['reference']"]["placement"] == ["cpu", "reference"]
    assert runs["cpu:['numba']"]["placement"] == ["cpu", "numba"]
    for run in runs.values():
        assert run["max_err"] < 1e-4
    checked = {tuple(k)[:4] for k in report["conformance"]}  # (op, device, vendor, dtype); layout ""
    assert {("com.example::ChannelPoly", "cpu", "numba", "float32"),
            ("com.example::ChannelPoly", "cpu", "numba", "float64")} <= checked
    if gpu:
        assert runs["gpu:None"]["placement"] == ["gpu", "opencl"]
        assert ("com.example::ChannelPoly", "gpu", "opencl", "float32") in checked


def test_conformance_suite_cross_checks_the_plugin_kernels(venv):
    """The plugin's kernels are in the registry, so tests/test_conformance.py covers them as it is."""
    proc = subprocess.run([str(venv), "-m", "pytest", str(ROOT / "tests" / "test_conformance.py"), "-q",
                           "-k", "ChannelPoly", "-n", "0", "-p", "no:cacheprovider",
                           "-o", "console_output_style=classic"],
                          capture_output=True, text=True, cwd=venv.parents[2], timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", proc.stdout)
    expected = 2 + (1 if _has_pocl() else 0)  # numba float32/float64 (+ opencl float32)
    assert passed and int(passed.group(1)) == expected, proc.stdout[-2000:]


def test_broken_plugin_is_a_warning_not_a_crash(venv):
    report = run_in(venv)  # the broken entry point is installed in the same venv
    assert report["status"]["broken"].startswith("ModuleNotFoundError")
    assert any("'broken'" in w and "kernelkit_module_that_does_not_exist" in w for w in report["warnings"])
    assert report["status"]["example"] == "ok"  # the other plugin still loaded and ran
    assert report["runs"]["cpu:None"]["max_err"] < 1e-4

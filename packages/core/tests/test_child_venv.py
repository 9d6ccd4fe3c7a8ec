"""kernelkit.testing.child_venv: a nested venv sees what the running interpreter sees (issue: from a
venv, ``--system-site-packages`` alone exposed only the base interpreter's packages)."""
from __future__ import annotations

import subprocess
import sys

import kernelkit


def test_child_venv_sees_the_running_interpreters_packages(tmp_path):
    from kernelkit.testing import child_venv

    python = child_venv(tmp_path / "child")
    probe = ("import kernelkit, rich, numpy, sys; "
             "print(kernelkit.__file__); print(numpy.__file__); print(sys.prefix)")
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True).stdout.split("\n")
    child = out[2]
    assert out[0] == kernelkit.__file__  # the very copy this test imports (editable or not)
    import numpy

    assert out[1] == numpy.__file__
    assert child == str(tmp_path / "child") and child != sys.prefix

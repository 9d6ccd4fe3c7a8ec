"""Op and kernel modules are found, not listed: every public module of the folder, sorted."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import kernelkit
import numpy as np
import pytest
from kernelkit.discovery import import_submodules, submodules
from kernelkit.testing import assert_close, isolate_registries

OPS = Path(kernelkit.__file__).parent / "ops"


@pytest.fixture
def family(tmp_path, monkeypatch):
    """A throwaway package ``kk_probe_family`` on sys.path, as a backend's kernels/ folder."""
    isolate_registries(monkeypatch)
    root = tmp_path / "kk_probe_family"
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [m for m in sys.modules if m.startswith("kk_probe_family")]:
        del sys.modules[name]


def test_a_new_module_is_picked_up_and_helpers_are_skipped(family):
    (family / "zeta.py").write_text("ORDER = []\n")
    (family / "_helper.py").write_text("raise AssertionError('a private helper must not be imported')\n")
    (family / "alpha.py").write_text(textwrap.dedent("""
        import numpy as np
        import kernelkit as kk

        @kk.register_kernel("Neg", device="cpu", vendor="probe", dtype="float32", priority=50)
        def neg(x):
            return np.negative(x) * 1
        """))
    (family / "sub").mkdir()
    (family / "sub" / "__init__.py").write_text("")
    assert submodules("kk_probe_family") == ["kk_probe_family.alpha", "kk_probe_family.sub", "kk_probe_family.zeta"]
    names = [m.__name__ for m in import_submodules("kk_probe_family")]
    assert names == ["kk_probe_family.alpha", "kk_probe_family.sub", "kk_probe_family.zeta"]
    assert "kk_probe_family._helper" not in sys.modules
    g = kernelkit.GraphBuilder("neg")
    g.output(g.op("Neg", g.input("x", (2,), "float32")))
    sess = kernelkit.Session(g.build())
    assert set(sess.placement().values()) == {("cpu", "probe")}  # the new file's kernel is registered
    assert_close(sess.run(None, {"x": np.array([1, -2], np.float32)})[0], np.array([-1, 2], np.float32))


def test_every_core_op_file_is_imported():
    public = sorted(p.stem for p in OPS.glob("*.py") if not p.stem.startswith("_"))
    assert public and [m.rsplit(".", 1)[1] for m in submodules("kernelkit.ops")] == public
    assert all(f"kernelkit.ops.{name}" in sys.modules for name in public)
    assert {"Conv", "Relu", "TopK", "Resize"} <= set(kernelkit.ops())

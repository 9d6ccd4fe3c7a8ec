"""Model loaders found by file suffix (``kernelkit.load_model``), and the core's boundaries: no core
module imports a sibling package, and the passes never import the Session."""
from __future__ import annotations

import ast
import sys
import types
from importlib.metadata import EntryPoint
from pathlib import Path

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import LoaderNotFoundError, ModelFormatError, RegistryError, loaders
from kernelkit.testing import assert_close, isolate_registries

CORE = Path(kk.__file__).parent


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    isolate_registries(monkeypatch)


def _neg_model():
    g = kk.GraphBuilder("neg")
    g.output(g.op("Neg", g.input("x", (3,), "float32")))
    return g.build()


def _entry_points(monkeypatch, *eps):
    monkeypatch.setattr(loaders, "entry_points", lambda group: [e for e in eps if e.group == group])


def test_kkm_is_cores_own_loader(tmp_path):
    kk.save(_neg_model(), tmp_path / "m.KKM")  # suffixes are matched case-insensitively
    model = kk.load_model(tmp_path / "m.KKM")
    assert isinstance(model, kk.Model) and [n.op for n in model.graph.nodes] == ["Neg"]
    (y,) = kk.Session(str(tmp_path / "m.KKM"), vendors=["reference"]).run(None, {"x": np.ones(3, np.float32)})
    assert_close(y, -np.ones(3, np.float32))


def test_loader_found_through_the_entry_point_group(monkeypatch, tmp_path):
    seen = []
    plugin = types.ModuleType("kk_toy_format")
    plugin.load = lambda path: seen.append(Path(path)) or _neg_model()
    monkeypatch.setitem(sys.modules, "kk_toy_format", plugin)
    _entry_points(monkeypatch, EntryPoint(".toy", "kk_toy_format:load", loaders.GROUP))
    (tmp_path / "m.toy").write_bytes(b"")
    assert ".toy" in loaders.suffixes() and ".kkm" in loaders.suffixes()
    (y,) = kk.Session(tmp_path / "m.toy", vendors=["reference"]).run(None, {"x": np.arange(3, dtype=np.float32)})
    assert_close(y, -np.arange(3, dtype=np.float32))
    assert seen == [tmp_path / "m.toy"]


def test_unknown_suffix_is_a_typed_error(monkeypatch, tmp_path):
    _entry_points(monkeypatch)
    with pytest.raises(LoaderNotFoundError, match=r"'\.tflite' files.*kernelkit\.loaders.*installed: \.kkm"):
        kk.load_model(tmp_path / "m.tflite")
    with pytest.raises(LoaderNotFoundError, match=r"'\.tflite'"):
        kk.Session(tmp_path / "m.tflite")
    assert issubclass(LoaderNotFoundError, ModelFormatError) and LoaderNotFoundError.code == "KK_NO_LOADER"


def test_onnx_without_the_converters_names_the_package(monkeypatch, tmp_path):
    _entry_points(monkeypatch)  # as if kernelkit-converters were not installed
    with pytest.raises(LoaderNotFoundError, match=r"'\.onnx' files; install kernelkit-converters"):
        kk.load_model(tmp_path / "m.onnx")


def test_loader_that_cannot_be_imported_names_it(monkeypatch, tmp_path):
    _entry_points(monkeypatch, EntryPoint(".onnx", "kernelkit_converters.onnx:convert", loaders.GROUP))
    monkeypatch.setitem(sys.modules, "kernelkit_converters.onnx", None)  # importing it raises ImportError
    with pytest.raises(LoaderNotFoundError, match=r"kernelkit_converters\.onnx:convert.*install kernelkit-converters"):
        kk.load_model(tmp_path / "m.onnx")


def test_a_loader_must_return_a_model(tmp_path):
    kk.register_loader(".junk", lambda path: {"not": "a model"})
    with pytest.raises(ModelFormatError, match=r"m\.junk: the loader for '\.junk' returned dict"):
        kk.load_model(tmp_path / "m.junk")


def test_register_loader_refuses_duplicates_and_bad_suffixes():
    with pytest.raises(RegistryError, match=r"'\.kkm' is already registered"):
        kk.register_loader(".kkm", lambda path: None)
    for bad in ("", ".", "a/b", "..x"):
        with pytest.raises(RegistryError, match="suffix"):
            kk.register_loader(bad, lambda path: None)
    kk.register_loader("kkm", lambda path: _neg_model(), override=True)  # explicit replacement
    assert kk.load_model("anything.kkm").graph.name == "neg"


@pytest.mark.parametrize("path", ["folder", 5, None])
def test_paths_without_a_format(tmp_path, path):
    with pytest.raises(ModelFormatError):
        kk.load_model(tmp_path if path == "folder" else path)


# -- boundaries ---------------------------------------------------------------------------------------
def _imports(file: Path) -> list[str]:
    """Every module a file imports, at any depth (function-level imports too), made absolute."""
    package = ".".join(("kernelkit", *file.relative_to(CORE).parent.parts))
    found = []
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found += [module] + [f"{module}.{a.name}" for a in node.names]
    return found


def test_no_core_module_imports_a_sibling_package():
    offenders = {str(f.relative_to(CORE)): m for f in sorted(CORE.rglob("*.py")) for m in _imports(f)
                 if m.split(".")[0].startswith("kernelkit_")}
    assert offenders == {}


def test_passes_and_kernel_calls_do_not_import_the_session():
    """The old cycle: converters -> kernelkit.passes -> passes/builtin.py -> session.py."""
    files = [*sorted((CORE / "passes").glob("*.py")), CORE / "invoke.py", CORE / "registry.py", CORE / "loaders.py"]
    offenders = {str(f.relative_to(CORE)) for f in files if "kernelkit.session" in _imports(f)}
    assert offenders == set()

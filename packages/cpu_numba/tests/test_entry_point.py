"""The backend is found through its entry point and registers its kernels."""
from importlib.metadata import entry_points

import kernelkit
from kernelkit.backends import load_backends

HEAVY = ["Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "Softmax",
         "LayerNormalization", "BatchNormalization", "Add", "Mul", "Relu"]


def test_entry_point_is_declared():
    eps = {ep.name: ep.value for ep in entry_points(group="kernelkit.backends")}
    assert eps.get("numba") == "kernelkit_numba:initialize"


def test_backend_loads_and_registers_kernels():
    assert load_backends().get("numba") == "ok"
    ops = {k.op for k in kernelkit.kernels(device="cpu", vendor="numba")}
    missing = [op for op in HEAVY if op not in ops]
    assert not missing, f"numba kernels missing for {missing}"
    dtypes: dict[str, set] = {}
    for k in kernelkit.kernels(vendor="numba"):
        dtypes.setdefault(k.op, set()).add(k.dtype)
    logic = {"And", "Or", "Xor"}  # bool in, bool out
    integer = {"DequantizeLinear": {"int8", "uint8", "int32"}, "LayoutReorder": {"*"}}  # reorders: any dtype
    for op in ("MaxPool", "Transpose", "Concat"):  # the int8 data movement of QDQ models
        integer[op] = {"float32", "int8", "uint8"}
    for op in ("MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul", "com.microsoft::QGemm",
               "com.microsoft::MatMulIntegerToFloat", "com.microsoft::QLinearAdd"):
        integer[op] = {"int8", "uint8"}  # keyed by their quantized input; every other kernel is float32
    typed = {"Gather": {"float32", "int64", "bool"}, "Expand": {"float32", "int64", "bool"},  # typed_index.py
             "Where": {"float32", "int64", "bool"}, "GatherND": {"float32", "int64", "bool"},
             "ScatterND": {"float32", "int64", "bool"}, "Cast": {"float32", "int32", "int64", "bool"}}
    expected = {**integer, **typed}
    assert logic <= set(dtypes) and set(expected) <= set(dtypes)
    assert dtypes == {op: {"bool"} if op in logic else expected.get(op, {"float32"}) for op in dtypes}


def test_initialize_is_idempotent_import_only():
    import kernelkit_numba

    before = kernelkit.kernels(vendor="numba")
    kernelkit_numba.initialize()  # modules are already imported: registers nothing twice
    assert kernelkit.kernels(vendor="numba") == before


def test_every_kernel_module_is_found_and_imported():
    """No hand-kept list: each public module of kernels/ is imported by initialize()."""
    import sys
    from pathlib import Path

    import kernelkit_numba.kernels

    load_backends()
    folder = Path(kernelkit_numba.kernels.__file__).parent
    public = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    assert "conv" in public and all(f"kernelkit_numba.kernels.{name}" in sys.modules for name in public)


def test_numba_session_imports_no_opencl():
    """Warm start: a session that names its vendors loads only those backends, so a numba session
    in a fresh process never imports the OpenCL backend or pyopencl (build, first runs, tiered
    start included); a session without vendors still loads every backend."""
    import json
    import subprocess
    import sys

    probe = """
import json, sys
import numpy as np
import kernelkit
from kernelkit.builder import GraphBuilder
g = GraphBuilder("m")
x = g.input("x", (4, 8), "float32")
g.output(g.op("Relu", g.op("MatMul", x, g.constant(np.ones((8, 3), np.float32)))))
feed = {"x": np.ones((4, 8), np.float32)}
seen = {}
for vendors in (["numba"], ["numba", "reference"]):
    sess = kernelkit.Session(g.build(), vendors=vendors, options={"numba_start": "tiered"})
    for _ in range(3):
        (y,) = sess.run(None, feed)
    seen[str(vendors)] = [m for m in ("kernelkit_numba", "kernelkit_opencl", "pyopencl") if m in sys.modules]
    assert np.allclose(y, 8.0)
kernelkit.Session(g.build())
seen["None"] = [m for m in ("kernelkit_numba", "kernelkit_opencl") if m in sys.modules]
print(json.dumps(seen))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["['numba']"] == ["kernelkit_numba"] and seen["['numba', 'reference']"] == ["kernelkit_numba"]
    assert seen["None"] == ["kernelkit_numba", "kernelkit_opencl"]

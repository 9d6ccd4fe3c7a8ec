"""Regression tests for issue 13, OpenCL side: each test names the item it guards and failed on
870925c."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

_READ_ONLY_PROBE = """
import json, warnings
import numpy as np
from kernelkit.testing import run_single_op
x = np.array([-1.5, 0.0, 2.0, 3.25], np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = run_single_op("Relu", [x], device="gpu", fallback=False)[0]
print(json.dumps({"got": got.tolist(), "warnings": [str(w.message) for w in caught]}))
"""


def _probe_read_only_home(tmp_path, **env_extra) -> dict:
    blocker = tmp_path / "not-a-folder"  # a file: nothing can be created below it, even by root
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("POCL_CACHE_DIR", "KERNELKIT_CACHE_DIR",
                                                            "PYOPENCL_NO_CACHE")}
    env.update(HOME=str(blocker / "home"), XDG_CACHE_HOME=str(blocker / "cache"), **env_extra)
    out = subprocess.run([sys.executable, "-c", _READ_ONLY_PROBE], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_read_only_home_and_xdg_cache(tmp_path):
    """Item 6: with HOME and XDG_CACHE_HOME unwritable, OpenCL kernels still run right: with a valid
    KERNELKIT_CACHE_DIR the caches go there, without one they stay in memory, each with a warning
    (870925c: NotADirectoryError from pyopencl's invoker cache in every kernel; PoCL listed no device)."""
    cache = tmp_path / "kk-cache"
    first = _probe_read_only_home(tmp_path, KERNELKIT_CACHE_DIR=str(cache))
    assert first["got"] == [0.0, 0.0, 2.0, 3.25]
    assert any("pyopencl's caching is off" in w for w in first["warnings"]), first["warnings"]
    assert list((cache / "opencl" / "programs").glob("*.bin")), "program cache not written to KERNELKIT_CACHE_DIR"
    assert (cache / "pocl").is_dir()  # PoCL's cache redirected beside ours
    second = _probe_read_only_home(tmp_path, POCL_CACHE_DIR=str(cache / "pocl"))
    assert second["got"] == [0.0, 0.0, 2.0, 3.25]
    assert any("kept in memory only" in w for w in second["warnings"]), second["warnings"]


# -- custom kernels: items 7 and 10 --------------------------------------------------------------------
import shutil  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import kernelkit as kk  # noqa: E402
from kernelkit.errors import ConfigError, KernelBuildError  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "custom_opencl"
# built at session creation as on PoCL (a GPU builds in the background by default, which defers a
# build error to the first run)
OPTIONS = {"opencl_device": os.environ.get("KERNELKIT_OPENCL_DEVICE", "pocl"), "opencl_tune": False,
           "opencl_async_build": False}


@pytest.fixture
def custom_layers():
    from kernelkit_opencl import custom_layers

    kk.load_backends()
    yield custom_layers
    custom_layers.unload_custom_kernels()


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def _leaky(shape=(1, 2, 3, 4)):
    g = kk.GraphBuilder("leaky")
    g.output(g.op("LeakyRelu", g.input("x", shape, "float32"), alpha=0.1))
    return g.build()


def _layer_yml(entry="leaky_relu", source="leaky_relu.cl", extra=""):
    return f"""
        layers:
          - op: LeakyRelu
            entry: {entry}
            sources: [{source}]
            defines: [{{name: neg_slope, param: alpha, type: float, default: 0.01}}]
            buffers: [{{arg: 0, input: 0}}, {{arg: 1, output: 0}}]
            work_sizes: {{global: [X, Y, B*F]}}{extra}
        """


def _custom_kernels():
    return kk.kernels("LeakyRelu", device="gpu", vendor="custom")


def test_config_that_fails_to_build_is_unregistered(tmp_path, custom_layers):
    """Item 7: a config whose program does not compile fails the session that named it, and later
    gpu sessions that never named it run the built-in kernel (870925c: they failed too)."""
    _write(tmp_path, "bad.cl", "__kernel void broken(__global float* a, __global float* b) { a[0] = nope; }\n")
    config = _write(tmp_path, "bad.yml", _layer_yml("broken", "bad.cl"))
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(1, 2, 3, 4)
    with pytest.raises(KernelBuildError, match="nope"):
        kk.Session(_leaky(), device="gpu", options={**OPTIONS, "opencl_custom_kernels": str(config)})
    assert _custom_kernels() == []
    got = kk.Session(_leaky(), device="gpu", fallback=False, options=OPTIONS).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.where(x < 0, 0.1 * x, x), rtol=1e-6)


def test_process_wide_config_that_fails_to_build_is_unregistered(tmp_path, custom_layers, monkeypatch):
    """Item 7, process-wide: a config from $KERNELKIT_OPENCL_CUSTOM_KERNELS whose program does not
    compile fails that session, then is unregistered, so a later session runs the built-in kernel."""
    _write(tmp_path, "bad.cl", "__kernel void broken(__global float* a, __global float* b) { a[0] = nope; }\n")
    config = _write(tmp_path, "bad.yml", _layer_yml("broken", "bad.cl"))
    monkeypatch.setenv("KERNELKIT_OPENCL_CUSTOM_KERNELS", str(config))
    with pytest.raises(KernelBuildError, match="nope"):
        kk.Session(_leaky(), device="gpu", options=OPTIONS)
    monkeypatch.delenv("KERNELKIT_OPENCL_CUSTOM_KERNELS")
    assert _custom_kernels() == []
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(1, 2, 3, 4)
    got = kk.Session(_leaky(), device="gpu", fallback=False, options=OPTIONS).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.where(x < 0, 0.1 * x, x), rtol=1e-6)


def test_failed_load_leaves_the_registry_as_it_was(tmp_path, custom_layers):
    """Item 7: loading [good, bad] registers nothing, and a changed file that fails keeps the old
    kernels (870925c kept the first file's kernels registered)."""
    shutil.copy(EXAMPLE / "leaky_relu.cl", tmp_path / "leaky_relu.cl")
    good = _write(tmp_path, "good.yml", _layer_yml())
    bad = _write(tmp_path, "bad.yml", _layer_yml().replace("input: 0}", "input: 7}"))
    with pytest.raises(ConfigError, match="port-index 7"):
        custom_layers.load_custom_kernels([good, bad])
    assert _custom_kernels() == []
    custom_layers.load_custom_kernels(good)
    before = _custom_kernels()
    assert before
    good.write_text(good.read_text().replace("input: 0}", "input: 7}"))  # the same file, now broken
    with pytest.raises(ConfigError, match="port-index 7"):
        custom_layers.load_custom_kernels(good)
    assert _custom_kernels() == before


@pytest.mark.parametrize("extra, fragment", [
    ("\n            compiler_options: [-I/etc]", "compiler option '-I/etc' is not allowed"),
    ("\n            compiler_options: ['-include', '/etc/passwd']", "not allowed"),
])
def test_compiler_options_are_restricted(tmp_path, custom_layers, extra, fragment):
    """Item 10: build options from a config cannot name files outside it (-I, -include)."""
    shutil.copy(EXAMPLE / "leaky_relu.cl", tmp_path / "leaky_relu.cl")
    config = _write(tmp_path, "c.yml", _layer_yml(extra=extra))
    with pytest.raises(ConfigError, match=fragment):
        custom_layers.load_custom_kernels(config)


def test_define_value_cannot_inject_a_preprocessor_line(tmp_path, custom_layers):
    """Item 10: a newline in a static define's value would start a line of its own (``#include``);
    it is refused at load."""
    shutil.copy(EXAMPLE / "leaky_relu.cl", tmp_path / "leaky_relu.cl")
    config = _write(tmp_path, "c.yml", _layer_yml().replace(
        "defines: [", 'defines: [{name: EVIL, default: "1\\n#include \\"/etc/passwd\\""}, '))
    with pytest.raises(ConfigError, match="one line"):
        custom_layers.load_custom_kernels(config)


@pytest.mark.parametrize("include, fragment", [
    ('#include "/etc/hostname"', "escapes"), ('#include "../outside.h"', "escapes"),
    ("#include <stdio.h>", "not allowed"), ("#define P \"/etc/hostname\"\n#include P", "not allowed"),
])
def test_includes_stay_inside_the_config_folder(tmp_path, custom_layers, include, fragment):
    """Item 10: ``#include`` of an absolute or escaping path, or a system/macro include, is refused."""
    (tmp_path / "outside.h").write_text("#define X 1\n")
    cl = (EXAMPLE / "leaky_relu.cl").read_text()
    _write(tmp_path, "cfg/leaky_relu.cl", include + "\n" + cl)
    config = _write(tmp_path, "cfg/c.yml", _layer_yml())
    with pytest.raises(ConfigError, match=fragment):
        custom_layers.load_custom_kernels(config)


def test_relative_include_inside_the_folder_works(tmp_path, custom_layers):
    """Item 10: a relative ``#include "..."`` inside the config's folder is inlined and runs."""
    cl = (EXAMPLE / "leaky_relu.cl").read_text().replace("(OUTPUT0_TYPE)neg_slope", "(OUTPUT0_TYPE)SLOPE")
    _write(tmp_path, "inc/slope.h", "#define SLOPE neg_slope\n")
    _write(tmp_path, "leaky_relu.cl", '#include "inc/slope.h"\n' + cl)
    config = _write(tmp_path, "c.yml", _layer_yml())
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(1, 2, 3, 4)
    sess = kk.Session(_leaky(), device="gpu", fallback=False, options={**OPTIONS, "opencl_custom_kernels": str(config)})
    assert sess.run(None, {"x": x})[0].tolist() == np.where(x < 0, np.float32(0.1) * x, x).tolist()


def test_missing_entry_point_is_found_at_load(tmp_path, custom_layers):
    """Item 10: an entry point the sources do not define is a ConfigError at load, not at run time."""
    shutil.copy(EXAMPLE / "leaky_relu.cl", tmp_path / "leaky_relu.cl")
    config = _write(tmp_path, "c.yml", _layer_yml(entry="not_there"))
    with pytest.raises(ConfigError, match="'not_there' is not defined"):
        custom_layers.load_custom_kernels(config)


def test_huge_work_size_is_a_typed_error(tmp_path, custom_layers):
    """Item 10: a work size of 10^40 is a KernelBuildError naming the config (870925c: std::bad_cast)."""
    shutil.copy(EXAMPLE / "leaky_relu.cl", tmp_path / "leaky_relu.cl")
    huge = "global: [X, Y, " + "1" + "0" * 40 + "]"
    config = _write(tmp_path, "c.yml", _layer_yml().replace("global: [X, Y, B*F]", huge))
    with pytest.raises(KernelBuildError, match="too large"):
        kk.Session(_leaky(), device="gpu", options={**OPTIONS, "opencl_custom_kernels": str(config)})


@pytest.mark.parametrize("bad", [{"TM": 0, "TN": 8, "WM": 4, "WN": 4, "BK": 1, "USE_LOCAL": 0, "VEC_LDS": 0},
                                 {"TM": 8}, "8x8", None])
def test_bad_tuning_entry_is_discarded_and_retuned(tmp_cache, bad):
    """Item 10: a tuned-parameter entry that is not a candidate (``TM: 0``, a partial dict, a string)
    is discarded with a warning and re-tuned; MatMul stays right (870925c trusted it: every MatMul
    failed)."""
    import json

    from kernelkit_opencl import tuning
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.runtime import OpenCLDevice

    rng = np.random.default_rng(0)
    a = rng.standard_normal((33, 20)).astype(np.float32)
    b = rng.standard_normal((20, 17)).astype(np.float32)
    dev = OpenCLDevice({"opencl_tune": True})
    gemm.matmul(dev.upload(a), dev.upload(b))
    path = tmp_cache / "opencl" / "tuned_params.json"
    data = json.loads(path.read_text())
    (key,) = [k for k in data if "|gemm|mm|" in k]
    data[key] = bad
    path.write_text(json.dumps(data))
    tuning._loaded_from = None  # as a new process would
    before = tuning.searches
    dev = OpenCLDevice({"opencl_tune": True})  # a new session
    with pytest.warns(RuntimeWarning, match="not a known candidate") if bad is not None else _nothing():
        out = gemm.matmul(dev.upload(a), dev.upload(b))
    np.testing.assert_allclose(dev.download(out), a @ b, rtol=1e-4, atol=1e-5)
    if bad is not None:
        assert tuning.searches == before + 1
        assert json.loads(path.read_text())[key] in gemm.CPU_TILES + gemm.GPU_TILES + gemm.GPU_SMALL


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- item 4: NaN and +-inf on OpenCL -------------------------------------------------------------------
def _on(device_kwargs, op, inputs, attrs=None):
    from kernelkit.testing import run_single_op

    with np.errstate(all="ignore"):
        return run_single_op(op, inputs, attrs, passes=False, fallback=False, **device_kwargs)[0]


@pytest.mark.parametrize("op, attrs", [("Relu", {}), ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
                                       ("Clip", {}), ("LeakyRelu", {"alpha": 0.1})])
def test_activations_propagate_nan(op, attrs):
    """Item 4: Relu and HardSigmoid returned 0 for NaN on OpenCL (fmax/clamp drop NaN); the reference
    and numba propagate it as NumPy does."""
    x = np.array([np.nan, np.inf, -np.inf, -1.5, 0.0, 2.0], np.float32)
    want = _on(dict(vendors=["reference"]), op, [x], attrs)
    got = _on(dict(device="gpu", vendors=["opencl"], options=OPTIONS), op, [x], attrs)
    np.testing.assert_array_equal(got, want)  # equal_nan by default
    assert np.isnan(got[0])


def test_fused_conv_relu_and_global_max_pool_propagate_nan():
    """Item 4: a Conv with a fused Relu and GlobalMaxPool returned 0 / skipped the NaN on OpenCL."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    x[0, 0, 2, 2] = np.nan
    x[0, 1, 0, 0] = np.inf
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1], "activation": "Relu"}
    want = _on(dict(vendors=["reference"]), "Conv", [x, w], attrs)
    got = _on(dict(device="gpu", vendors=["opencl"], options=OPTIONS), "Conv", [x, w], attrs)
    assert np.isnan(want).sum() == 27 and np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    pooled = _on(dict(device="gpu", vendors=["opencl"], options=OPTIONS), "GlobalMaxPool", [x])
    assert np.isnan(pooled[0, 0, 0, 0]) and pooled[0, 1, 0, 0] == np.inf


# -- item 10: the same bad value gives the same error class on every device ----------------------------
@pytest.mark.parametrize("op, inputs, attrs", [
    ("Gather", [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([5], np.int64)], {"axis": 0}),
    ("Reshape", [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([5, -1], np.int64)], {}),
    ("Tile", [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([-1, 2], np.int64)], {}),
    ("ConstantOfShape", [np.array([2**40, 2**40], np.int64)], {}),
    ("Expand", [np.ones((1, 1), np.float32), np.array([2**31, 2**31], np.int64)], {}),
    ("Pad", [np.ones((3, 4), np.float32), np.array([0, 0, 0, 2**40], np.int64)], {}),
], ids=["gather-index", "reshape", "tile-negative", "constant-of-shape-huge", "expand-huge", "pad-huge"])
def test_same_bad_value_same_error_class_on_cpu_and_opencl(op, inputs, attrs):
    """Item 10: a bad runtime value is a KernelExecutionError naming the node on the reference, numba
    and OpenCL alike (870925c: KernelExecutionError on CPU, ShapeError/InputError/DeviceError on OpenCL)."""
    from kernelkit.errors import KernelExecutionError
    from kernelkit.testing import run_single_op

    for kwargs in (dict(vendors=["reference"]), dict(vendors=["numba", "reference"]),
                   dict(device="gpu", vendors=["opencl"], options=OPTIONS)):
        with pytest.raises(KernelExecutionError, match=f"node '{op}_0'"):
            run_single_op(op, inputs, attrs, passes=False, **kwargs)


# -- item 11: an output sized from run-time values is bounded before it is allocated ---------------------
MiB = 1 << 20
_F32 = np.float32
# each output takes 100 MiB (or more): far over a 1 MiB limit, far under what this box can hold
_SIZED_BY_VALUES = [
    ("Expand", [np.ones((1, 1), _F32), np.array([5120, 5120], np.int64)], {}, ("numba", "opencl")),
    ("Pad", [np.ones((3, 4), _F32), np.array([0, 0, 0, 1 << 23], np.int64)], {}, ("numba", "opencl")),
    ("Tile", [np.ones((1, 4), _F32), np.array([6_553_600, 1], np.int64)], {}, ("numba", "opencl")),
    ("ConstantOfShape", [np.array([5120, 5120], np.int64)], {}, ("opencl",)),
    ("Range", [np.array(0, _F32), np.array(26_214_400, _F32), np.array(1, _F32)], {}, ("opencl",)),
    ("Resize", [np.ones((1, 1, 4, 4), _F32), None, None, np.array([1, 1, 5120, 5120], np.int64)], {},
     ("numba", "opencl")),
    ("OneHot", [np.arange(10, dtype=np.int64), np.array(2_621_440, np.int64), np.array([0, 1], _F32)], {}, ()),
    ("CenterCropPad", [np.ones((4, 4), _F32), np.array([5120, 5120], np.int64)], {}, ()),
    ("MaxUnpool", [np.ones((1, 1, 2, 2), _F32), np.arange(4, dtype=np.int64).reshape(1, 1, 2, 2),
                   np.array([1, 1, 5120, 5120], np.int64)], {"kernel_shape": [1, 1]}, ()),
    ("AffineGrid", [np.zeros((1, 2, 3), _F32), np.array([1, 1, 4096, 4096], np.int64)], {}, ()),
    ("DFT", [np.ones((1, 4, 1), _F32), np.array(13_107_200, np.int64)], {}, ()),
    ("HannWindow", [np.array(26_214_400, np.int64)], {}, ()),
    ("MelWeightMatrix", [np.array(2560, np.int64), np.array(20480, np.int64), np.array(16000, np.int64),
                         np.array(0, _F32), np.array(8000, _F32)], {}, ()),
    # a small output, but 100 MiB of sampling tables: the samples per bin come from the roi's values
    ("RoiAlign", [np.ones((1, 1, 8, 8), _F32), np.array([[0, 0, 8e5, 8e5]], _F32), np.array([0], np.int64)], {}, ()),
]


@pytest.mark.parametrize("op, inputs, attrs, vendors", _SIZED_BY_VALUES, ids=[c[0] for c in _SIZED_BY_VALUES])
def test_output_sized_by_values_is_bounded_before_allocating(monkeypatch, op, inputs, attrs, vendors):
    """Item 11: Pad/Expand/Tile/... of a small input whose output size comes from input VALUES is a
    KernelExecutionError naming the node, raised by ``limits.check_tensor_bytes`` (a
    ``TensorTooLargeError`` cause) before anything that size is allocated, on the reference, numba and
    OpenCL (before: a MemoryError where the host refuses the allocation; where it overcommits, the
    process was killed while filling 13 TB, as the H100 host did on ``pad-huge``/``expand-huge``)."""
    import tracemalloc

    from kernelkit import Session
    from kernelkit.errors import KernelExecutionError, TensorTooLargeError
    from kernelkit.testing import single_op_model

    monkeypatch.setenv("KERNELKIT_MAX_TENSOR_BYTES", str(MiB))
    model = single_op_model(op, inputs, attrs)
    feeds = {f"in{i}": x for i, x in enumerate(inputs) if x is not None}
    for vendor, kwargs in (("reference", dict(vendors=["reference"])), ("numba", dict(vendors=["numba", "reference"])),
                           ("opencl", dict(device="gpu", vendors=["opencl"], options=OPTIONS))):
        sess = Session(model, passes=False, **kwargs)
        tracemalloc.start()
        try:
            with pytest.raises(KernelExecutionError, match=f"node '{op}_0'") as caught:
                sess.run(None, feeds)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert isinstance(caught.value.__cause__, TensorTooLargeError), (vendor, caught.value)
        assert "1048576 bytes" in str(caught.value)
        assert peak < 4 * MiB, (vendor, peak)  # NumPy's buffers are traced: nothing near 100 MiB was made
        if vendor in vendors:  # the vendor's own kernel ran and refused (not a fallback to the reference)
            assert f"'{vendor}'" in str(caught.value), caught.value
    monkeypatch.setenv("KERNELKIT_MAX_TENSOR_BYTES", str(1 << 30))  # under a 1 GiB limit the same node runs
    got = Session(model, passes=False, vendors=["reference"]).run(None, feeds)[0]
    assert got.nbytes >= 96 * MiB or op == "RoiAlign"


@pytest.mark.parametrize("body, fragment", [
    ("a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10)) + "layers: *a9\n",
     "expands to more than"),
    ("layers: " + "[" * 3000 + "]" * 3000 + "\n", "YAML"),
    (b"layers: \xff\xfe\n", "cannot read YAML"),
], ids=["alias-bomb", "deep-nesting", "not-utf8"])
def test_custom_kernel_yaml_bombs_and_bad_text(tmp_path, custom_layers, body, fragment):
    """Item 2 for custom-kernel YAML: the same bounded loader as deployment files (alias bombs, deep
    nesting, non-UTF-8 text are ConfigErrors, quickly)."""
    import time

    path = tmp_path / "c.yml"
    (path.write_bytes if isinstance(body, bytes) else path.write_text)(body)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=fragment):
        custom_layers.read_config(path)
    assert time.perf_counter() - start < 10


def test_fuzz_findings_in_custom_kernel_configs(tmp_path, custom_layers):
    """Found by the 10-minute fuzz run: an unclosed quote in compiler options (ValueError from shlex)
    and a NUL byte in a source name (ValueError from the path) are ConfigErrors."""
    shutil.copy(EXAMPLE / "leaky_relu.cl", tmp_path / "leaky_relu.cl")
    xml = tmp_path / "c.xml"
    xml.write_text((EXAMPLE / "leaky_relu.xml").read_text().replace(
        'options="-cl-mad-enable"', 'options="-cl-mad-enable \'unclosed"'))
    with pytest.raises(ConfigError, match="No closing quotation"):
        custom_layers.read_config(xml)
    yml = tmp_path / "c.yml"
    yml.write_text(_layer_yml(extra="\n            compiler_options: \"-cl-mad-enable 'x\""))
    with pytest.raises(ConfigError, match="No closing quotation"):
        custom_layers.read_config(yml)
    yml.write_text(_layer_yml(source='"a\\0b.cl"'))
    with pytest.raises(ConfigError, match="NUL byte"):
        custom_layers.read_config(yml)

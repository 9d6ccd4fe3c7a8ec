"""Custom OpenCL kernels from configuration (OpenVINO clDNN XML and kernelkit YAML), on PoCL here.

The leaky-ReLU example in examples/custom_opencl runs from its XML unchanged and must match the
NumPy reference; malformed configs must raise ConfigError naming the file and the place in it.
"""
from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.errors import ConfigError, KernelBuildError
from kernelkit.testing import assert_close

pytest.importorskip("pyopencl")
from kernelkit_opencl import custom_layers  # noqa: E402
from kernelkit_opencl.custom_layers.formula import Formula, FormulaError, parse_list  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "custom_opencl"
# PoCL in CI; built at session creation as on PoCL (a GPU builds in the background by default,
# which defers a build error or a dump to the first run)
OPTIONS = {"opencl_device": os.environ.get("KERNELKIT_OPENCL_DEVICE", "pocl"), "opencl_async_build": False}


def _has_opencl() -> bool:
    try:
        from kernelkit_opencl.runtime import list_devices

        return bool(list_devices())
    except Exception:  # noqa: BLE001 - no driver: the device tests below are skipped
        return False


needs_device = pytest.mark.skipif(not _has_opencl(), reason="no OpenCL platform (pip install pocl-binary-distribution)")


@pytest.fixture(autouse=True)
def _clean_registry():
    kk.load_backends()
    yield
    custom_layers.unload_custom_kernels()


def leaky_model(shape, alpha=None, dtype="float32"):
    g = kk.GraphBuilder("leaky")
    x = g.input("x", shape, dtype)
    g.output(g.op("LeakyRelu", x, alpha=alpha))
    return g.build()


def reference(model, feeds):
    return kk.Session(model, device="cpu", vendors=["reference"], fallback=False).run(None, feeds)


# -- the shipped example ---------------------------------------------------------------------------
@needs_device
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 9), (6, 10), (2, 1, 1, 33)])
def test_example_xml_runs_unchanged_and_matches_reference(shape):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    model = leaky_model(shape, alpha=0.25)
    sess = kk.Session(model, device="gpu", options={**OPTIONS, "opencl_custom_kernels": EXAMPLE / "leaky_relu.xml"})
    assert sess.placement() == {"LeakyRelu_0": ("gpu", "custom")}
    (got,) = sess.run(None, {"x": x})
    (want,) = reference(model, {"x": x})
    assert_close(got, want)
    assert np.count_nonzero(got < 0) > 0  # the negative slope was applied, not clamped to zero


@needs_device
def test_example_yaml_equals_xml_and_attribute_default_applies():
    layers = kk_load(EXAMPLE / "leaky_relu.yml")
    assert [(layer.op, layer.entry, layer.vendor) for layer in layers] == [("LeakyRelu", "leaky_relu", "custom")]
    x = np.linspace(-3, 3, 2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    model = leaky_model(x.shape)  # alpha absent: the op's default 0.01 reaches the neg_slope define
    (got,) = kk.Session(model, device="gpu", options=OPTIONS).run(None, {"x": x})
    assert_close(got, np.where(x >= 0, x, x * np.float32(0.01)))


def kk_load(path):
    import kernelkit_opencl

    return kernelkit_opencl.load_custom_kernels(path)


@needs_device
def test_symbolic_batch_resizes_and_orders_with_builtin_kernels():
    """Neg (built-in opencl) -> LeakyRelu (custom) -> Neg: events alone order them on the session's
    queue; a new batch size rebuilds the custom program through resize."""
    kk_load(EXAMPLE / "leaky_relu.xml")
    g = kk.GraphBuilder("chain")
    x = g.input("x", ("N", 3, 8, 8), "float32")
    g.output(g.op("Neg", g.op("LeakyRelu", g.op("Neg", x), alpha=0.5)))
    model = g.build()
    sess = kk.Session(model, device="gpu", options=OPTIONS)
    assert sess.placement()["LeakyRelu_0"] == ("gpu", "custom")
    for batch in (1, 3, 1):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        (want,) = reference(model, {"x": x})
        assert_close(sess.run(None, {"x": x})[0], want)
        assert_close(sess.run_async(None, {"x": x}).result()[0], want)


@needs_device
def test_custom_activation_after_conv_is_not_fused():
    """A config-driven LeakyRelu overrides the built-in one, so fuse_activation keeps it as a node."""
    rng = np.random.default_rng(5)
    g = kk.GraphBuilder("conv_leaky")
    x = g.input("x", (1, 2, 6, 6), "float32")
    y = g.op("Conv", x, g.constant(rng.standard_normal((3, 2, 3, 3)).astype(np.float32)), pads=(1, 1, 1, 1))
    g.output(g.op("LeakyRelu", y, alpha=0.1, name="leaky"))
    model = g.build()
    sess = kk.Session(model, device="gpu", options={**OPTIONS, "opencl_custom_kernels": EXAMPLE / "leaky_relu.xml"})
    assert sess.placement()["leaky"] == ("gpu", "custom")
    assert any("'leaky'" in note and "'custom'" in note for note in sess.pass_notes), sess.pass_notes
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    assert_close(sess.run(None, {"x": x})[0], reference(model, {"x": x})[0])


@needs_device
def test_session_option_is_scoped_to_that_session():
    """opencl_custom_kernels registers into the session's KernelScope: a later session without the
    option, and the process-wide registry, never see the custom kernel."""
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(1, 2, 3, 4)
    model = leaky_model(x.shape, alpha=0.25)
    scoped = kk.Session(model, device="gpu", options={**OPTIONS, "opencl_custom_kernels": EXAMPLE / "leaky_relu.xml"})
    assert scoped.placement() == {"LeakyRelu_0": ("gpu", "custom")}
    plain = kk.Session(model, device="gpu", options=OPTIONS)
    assert plain.placement() == {"LeakyRelu_0": ("gpu", "opencl")}
    assert kk.kernels("LeakyRelu", device="gpu", vendor="custom") == []
    (want,) = reference(model, {"x": x})
    assert_close(scoped.run(None, {"x": x})[0], want)
    assert_close(plain.run(None, {"x": x})[0], want)


@needs_device
def test_env_variable_loads_config(monkeypatch):
    monkeypatch.setenv(custom_layers.ENV_VAR, str(EXAMPLE / "leaky_relu.xml"))
    sess = kk.Session(leaky_model((1, 2, 3, 4), alpha=0.1), device="gpu", options=OPTIONS)
    assert sess.placement()["LeakyRelu_0"] == ("gpu", "custom")


# -- formats, data blobs, dumps, build errors --------------------------------------------------------
LAYOUT_CL = """
__kernel void layout_probe(const __global INPUT0_TYPE* in0, __global OUTPUT0_TYPE* out0)
{
    const uint x = get_global_id(0), y = get_global_id(1), bf = get_global_id(2);
    const uint f = bf % INPUT0_DIMS[1], b = bf / INPUT0_DIMS[1];
#ifdef INPUT0_FORMAT_BYXF   /* the input really is stored B, Y, X, F */
    const uint src = ((b * INPUT0_DIMS[2] + y) * INPUT0_DIMS[3] + x) * INPUT0_DIMS[1] + f;
#else
#error "expected a BYXF input"
#endif
    const uint dst = b * OUTPUT0_PITCHES[0] + f * OUTPUT0_PITCHES[1] + y * OUTPUT0_PITCHES[2]
                   + x * OUTPUT0_PITCHES[3] + OUTPUT0_OFFSET;
    out0[dst] = in0[src] * (OUTPUT0_TYPE)SCALE + (OUTPUT0_TYPE)f;
}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@needs_device
def test_formats_are_reordered_on_device(tmp_path):
    write(tmp_path, "probe.cl", LAYOUT_CL)
    config = write(tmp_path, "probe.yml", """
        layers:
          - op: LeakyRelu
            entry: layout_probe
            sources: [probe.cl]
            defines: [{name: SCALE, value: 3}]
            buffers:
              - {arg: 0, input: 0, format: byxf}
              - {arg: 1, output: 0, format: YXFB}
            work_sizes: {global: "X, Y, B*F"}
        """)
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    sess = kk.Session(leaky_model(x.shape), device="gpu", options={**OPTIONS, "opencl_custom_kernels": config})
    (got,) = sess.run(None, {"x": x})
    want = x * 3 + np.arange(3, dtype=np.float32).reshape(1, 3, 1, 1)
    assert_close(got, want)


@needs_device
def test_data_blob_binds_initializer(tmp_path):
    write(tmp_path, "mul.cl", """
        __kernel void mul_blob(const __global INPUT0_TYPE* a, const __global INPUT0_TYPE* w,
                               __global OUTPUT0_TYPE* out)
        {
            const uint i = get_global_id(0);
            out[i] = a[i] * w[i % INPUT0_DIMS[3]] + (OUTPUT0_TYPE)NUM_INPUTS;
        }
        """)
    config = write(tmp_path, "mul.xml", """
        <CustomLayer name="Mul" type="SimpleGPU" version="1">
          <Kernel entry="mul_blob"><Source filename="mul.cl"/></Kernel>
          <Buffers>
            <Tensor arg-index="0" type="input" port-index="0"/>
            <Data name="B" arg-index="1"/>
            <Tensor arg-index="2" type="output" port-index="0"/>
          </Buffers>
        </CustomLayer>
        """)
    w = np.array([1.0, -2.0, 0.5, 4.0], np.float32)
    g = kk.GraphBuilder("mul")
    x = g.input("x", (2, 3, 5, 4), "float32")
    g.output(g.op("Mul", x, g.constant(w, name="w")))
    x = np.random.default_rng(4).standard_normal((2, 3, 5, 4)).astype(np.float32)
    sess = kk.Session(g.build(), device="gpu", options={**OPTIONS, "opencl_custom_kernels": config})
    assert sess.placement()["Mul_0"] == ("gpu", "custom")
    assert_close(sess.run(None, {"x": x})[0], x * w + np.float32(1))  # NUM_INPUTS counts tensors: 1


@needs_device
def test_dump_kernels_writes_builtin_defines(tmp_path, monkeypatch):
    folder = tmp_path / "cfg"
    shutil.copy(EXAMPLE / "leaky_relu.cl", write(folder, "leaky_relu.cl", "").parent / "leaky_relu.cl")
    text = (EXAMPLE / "leaky_relu.xml").read_text().replace("default=\"0.01\"", "default=\"0.01\"/><Define "
                                                             "name=\"DUMP_PROBE_7361\"")
    config = write(folder, "leaky.xml", text)
    monkeypatch.setenv("KERNELKIT_DUMP_KERNELS", str(tmp_path / "dump"))
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "cache"))
    kk.Session(leaky_model((1, 2, 3, 4), alpha=0.3), device="gpu", options={**OPTIONS, "opencl_custom_kernels": config})
    dumped = [p.read_text() for p in (tmp_path / "dump").glob("*.cl") if "DUMP_PROBE_7361" in p.read_text()]
    assert len(dumped) == 1
    for line in ("#define NUM_INPUTS 1", "#define INPUT0_DIMS (int []){ 1,2,3,4, }",
                 "#define OUTPUT0_PITCHES (int []){ 24,12,4,1, }", "#define GLOBAL_WORKSIZE (size_t []){ 4,3,2, }",
                 "#define INPUT0_FORMAT_BFYX", "#define neg_slope 0.3f"):
        assert line in dumped[0]


@needs_device
def test_build_error_names_node_and_carries_log(tmp_path):
    write(tmp_path, "bad.cl", "__kernel void broken(__global float* a, __global float* b) { a[0] = nope; }\n")
    config = write(tmp_path, "bad.yml", """
        layers:
          - {op: LeakyRelu, entry: broken, sources: [bad.cl], buffers: [{arg: 0, input: 0}, {arg: 1, output: 0}]}
        """)
    with pytest.raises(KernelBuildError, match="(?s)LeakyRelu.*nope"):
        kk.Session(leaky_model((1, 2, 3, 4)), device="gpu", options={**OPTIONS, "opencl_custom_kernels": config})


# -- malformed configs -----------------------------------------------------------------------------
GOOD_XML = (EXAMPLE / "leaky_relu.xml").read_text()

XML_CASES = {
    "unknown element": (GOOD_XML.replace("<CompilerOptions", "<Compiler options=\"\"/><CompilerOptions"),
                        r"leaky\.xml:\d+: unknown element <Compiler>"),
    "unknown attribute": (GOOD_XML.replace('format="BFYX"/>\n    <Tensor arg-index="1"',
                                           'format="BFYX" stride="2"/>\n    <Tensor arg-index="1"'),
                          r"leaky\.xml:9: .*unknown attribute.*stride"),
    "bad formula": (GOOD_XML.replace('global="X,Y,B*F"', 'global="X,Y,B**F"'), r"leaky\.xml:13: bad work size"),
    "code in formula": (GOOD_XML.replace('global="X,Y,B*F"', 'global="__import__(\'os\')"'),
                        r"leaky\.xml:13: bad work size.*Call"),
    "unknown dimension": (GOOD_XML.replace('global="X,Y,B*F"', 'global="X,Z"'), r"leaky\.xml:13: .*'Z'"),
    "missing source": (GOOD_XML.replace("leaky_relu.cl", "missing.cl"),
                       r"leaky\.xml:5: source file 'missing.cl' not found"),
    "escaping source": (GOOD_XML.replace("leaky_relu.cl", "../outside.cl"), r"leaky\.xml:5: .*escapes"),
    "absolute source": (GOOD_XML.replace("leaky_relu.cl", "/etc/hostname"), r"leaky\.xml:5: .*relative"),
    "duplicate arg": (GOOD_XML.replace('arg-index="1"', 'arg-index="0"'),
                      r"leaky\.xml:\d+: arg-index 0 is bound twice"),
    "gap in args": (GOOD_XML.replace('arg-index="1"', 'arg-index="2"'), r"leaky\.xml:3: arg-index values \[0, 2\]"),
    "bad format": (GOOD_XML.replace('format="BFYX"/>\n    <Tensor arg-index="1"',
                                    'format="NHWC"/>\n    <Tensor arg-index="1"'),
                   r"leaky\.xml:9: unknown tensor format 'NHWC'"),
    "bad layer type": (GOOD_XML.replace("SimpleGPU", "SimpleCPU"), r"leaky\.xml:3: .*SimpleCPU"),
    "bad define type": (GOOD_XML.replace('type="float"', 'type="double"'), r"leaky\.xml:6: define type 'double'"),
    "bad default": (GOOD_XML.replace('default="0.01"', 'default="abc"'),
                    r"leaky\.xml:6: value 'abc' is not a valid float"),
    "unknown param": (GOOD_XML.replace('param="alpha"', 'param="slope"'), r"leaky\.xml:6: .*'slope'.*alpha"),
    "param type mismatch": (GOOD_XML.replace('type="float"', 'type="int"').replace('"0.01"', '"1"'),
                            r"leaky\.xml:6: define 'neg_slope' has type int but attribute 'alpha' .* is float"),
    "port out of range": (GOOD_XML.replace('type="input" port-index="0"', 'type="input" port-index="3"'),
                          r"leaky\.xml:9: input port-index 3 is out of range"),
    "unregistered op": (GOOD_XML.replace('name="LeakyRelu"', 'name="com.acme::Frobnicate"'),
                        r"leaky\.xml:3: op 'com.acme::Frobnicate' is not registered"),
    "no output": (GOOD_XML.replace('type="output"', 'type="input"').replace('port-index="0" format="BFYX"/>\n  </B',
                                                                            'port-index="1" format="BFYX"/>\n  </B'),
                  r"leaky\.xml:3: no output tensor"),
    "doctype": ('<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY a "aaaa">]>\n' + GOOD_XML, r"leaky\.xml:2: DOCTYPE"),
    "not xml": (GOOD_XML.replace("</Buffers>", "</Bufers>"), r"leaky\.xml:11: malformed XML: mismatched tag"),
}


@pytest.mark.parametrize("case", sorted(XML_CASES))
def test_malformed_xml_names_file_and_line(tmp_path, case):
    text, pattern = XML_CASES[case]
    folder = tmp_path / "cfg"
    folder.mkdir()
    shutil.copy(EXAMPLE / "leaky_relu.cl", folder / "leaky_relu.cl")
    (tmp_path / "outside.cl").write_text("// outside the config's folder\n")
    config = folder / "leaky.xml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=pattern):
        custom_layers.load_custom_kernels(config)
    assert not kk.kernels("LeakyRelu", device="gpu", vendor="custom")  # nothing half-registered


YAML_CASES = {
    "unknown key": ("layers:\n  - {op: LeakyRelu, entry: k, sources: [k.cl], buffers: [], colour: red}",
                    r"k\.yml: layers\[0\]: unknown key\(s\) \['colour'\]"),
    "buffer without kind": ("layers:\n  - {op: LeakyRelu, entry: k, sources: [k.cl], buffers: [{arg: 0}]}",
                            r"k\.yml: layers\[0\]\.buffers\[0\]: a buffer needs exactly one"),
    "negative arg": ("layers:\n  - {op: LeakyRelu, entry: k, sources: [k.cl], buffers: [{arg: -1, output: 0}]}",
                     r"k\.yml: layers\[0\]\.buffers\[0\]\.arg: arg must be a non-negative integer"),
    "bad work size": ("layers:\n  - {op: LeakyRelu, entry: k, sources: [k.cl], buffers: [{arg: 0, output: 0}],"
                      " work_sizes: {global: 'X/Y.5'}}", r"k\.yml: layers\[0\]\.work_sizes\.global: bad work size"),
    "bad dtype": ("layers:\n  - {op: LeakyRelu, entry: k, sources: [k.cl], buffers: [{arg: 0, output: 0}],"
                  " dtypes: [float128]}", r"k\.yml: layers\[0\]\.dtypes: .*float128"),
    "not a list": ("layers: {op: LeakyRelu}", r"k\.yml: layers: expected a list"),
    "bad yaml": ("layers: [\n  - {op: LeakyRelu", r"k\.yml:\d+: malformed YAML"),
    "bad entry": ("layers:\n  - {op: LeakyRelu, entry: 'k(); evil', sources: [k.cl], buffers: [{arg: 0, output: 0}]}",
                  r"k\.yml: layers\[0\]: kernel entry"),
}


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_malformed_yaml_names_file_and_key(tmp_path, case):
    text, pattern = YAML_CASES[case]
    (tmp_path / "k.cl").write_text("__kernel void k(__global float* o) {}\n")
    config = tmp_path / "k.yml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=pattern):
        custom_layers.load_custom_kernels(config)


def test_unknown_config_type_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"cfg\.json: unknown custom-kernel config type"):
        custom_layers.load_custom_kernels(tmp_path / "cfg.json")
    with pytest.raises(ConfigError, match=r"nope\.xml: custom-kernel config file not found"):
        custom_layers.load_custom_kernels(tmp_path / "nope.xml")


def test_session_option_with_bad_config_is_a_config_error(tmp_path):
    config = write(tmp_path, "bad.yml", "layers: 3\n")
    with pytest.raises(ConfigError, match=r"bad\.yml: layers: expected a list"):
        kk.Session(leaky_model((1, 2)), device="gpu", options={**OPTIONS, "opencl_custom_kernels": config})


def test_loading_same_file_twice_is_a_noop():
    first = custom_layers.load_custom_kernels(EXAMPLE / "leaky_relu.xml")
    again = custom_layers.load_custom_kernels(EXAMPLE / "leaky_relu.xml")
    assert first == again
    assert kk.kernels("LeakyRelu", device="gpu", vendor="custom") == [("LeakyRelu", "gpu", "custom", "float32", "")]


def test_two_files_claiming_one_kernel_key_conflict():
    custom_layers.load_custom_kernels(EXAMPLE / "leaky_relu.xml")
    with pytest.raises(ConfigError, match=r"leaky_relu\.yml: layers\[0\]: a kernel for .*already registered"):
        custom_layers.load_custom_kernels(EXAMPLE / "leaky_relu.yml")


def test_defines_of_every_type_from_attributes_and_static_values(tmp_path):
    from kernelkit_opencl.custom_layers.config import Define, LayerConfig
    from kernelkit_opencl.custom_layers.jit import user_defines

    src = write(tmp_path, "k.cl", "")
    layer = LayerConfig(op="Conv", entry="k", sources=(src,), file=tmp_path / "k.yml", where="k.yml: layers[0]",
                        defines=(Define("GROUPS", "d0", "group", "int", "1"),
                                 Define("STRIDES", "d1", "strides", "int[]", "1,1"),
                                 Define("SLOPES", "d2", "slopes", "float[]", "0.5, 2"),
                                 Define("GAIN", "d3", "gain", "float", None),
                                 Define("VEC 4", "d4"), Define("FLAG", "d5")))
    attrs = {"group": 2, "strides": (2, 3), "slopes": (), "gain": 1}
    assert user_defines(layer, attrs, "node") == [
        "#define GROUPS 2", "#define STRIDES (int []){ 2,3, }", "#define SLOPES (float []){ 0.5f,2.0f, }",
        "#define GAIN 1.0f", "#define VEC 4", "#define FLAG"]
    with pytest.raises(KernelBuildError, match="'GAIN'.*'gain'"):
        user_defines(layer, {**attrs, "gain": None}, "node")


# -- work-size formulas ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, want", [
    ("B*F*Y*X", 2 * 3 * 5 * 7), ("X,Y,B*F", None), ("(X + 3) / 4", 2), ("-X / 2", -3), ("X % 4", 3),
    ("-X % 4", -3), ("7 - -X", 14), ("((B))", 2),
])
def test_formulas_evaluate_in_c_integer_arithmetic(text, want):
    dims = {"B": 2, "F": 3, "Y": 5, "X": 7}
    if want is None:
        assert [f.evaluate(dims) for f in parse_list(text)] == [7, 5, 6]
    else:
        assert Formula.parse(text).evaluate(dims) == want


@pytest.mark.parametrize("text", ["X**2", "X // 2", "X.real", "len(X)", "X if Y else B", "1.5*X", "X << 1",
                                  "[X]", "lambda: 1", "X; Y", "'X'", "X,Y,B,F", "", "N*C"])
def test_formulas_reject_everything_else(text):
    with pytest.raises(FormulaError):
        parse_list(text) if "," in text else Formula.parse(text)


def test_division_by_zero_is_reported():
    with pytest.raises(FormulaError, match="division by zero"):
        Formula.parse("X / (Y - 5)").evaluate({"B": 1, "F": 1, "Y": 5, "X": 4})

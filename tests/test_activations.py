"""One activation table (kernelkit.activation.ACTIVATIONS) read by every view of it: the fusion
pass, the numba epilogue codes and the OpenCL defines agree on names and defaults, an unknown
activation is an OpAttributeError everywhere, and each fused activation computed by numba and by
OpenCL (PoCL) matches the reference's unfused op."""
from __future__ import annotations

import os

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import OpAttributeError
from kernelkit.activation import ACTIVATIONS, apply_activation, resolve
from kernelkit.passes import builtin
from kernelkit.testing import assert_close

OPENCL = {"opencl_device": os.environ.get("KERNELKIT_OPENCL_DEVICE", "pocl")}  # PoCL in CI


def _epilogue():
    return pytest.importorskip("kernelkit_numba.kernels.epilogue")


def _opencl_common():
    pytest.importorskip("pyopencl")
    from kernelkit_opencl.kernels import _common

    return _common


# -- the views agree ---------------------------------------------------------------------------------
def test_every_view_has_the_same_names():
    names = list(ACTIVATIONS)
    assert names == ["Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish", "Tanh", "Gelu"]
    assert builtin.ACTIVATIONS is ACTIVATIONS  # the fusion pass fuses exactly the table's ops
    assert all(kk.get_schema(name) for name in names)  # each is also a standalone op
    assert [k for k in _epilogue().CODES if k] == names
    assert [k for k in _opencl_common().ACTIVATION_CL if k] == names


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_every_view_has_the_same_defaults(name):
    defaults = ACTIVATIONS[name].defaults
    assert resolve(name, ()) == defaults
    code, p0, p1 = _epilogue().activation_code(name, (), "float64", "here")
    if name == "Relu":  # numba runs Relu as Clip(0, inf)
        assert (p0, p1) == (0, np.inf)
    else:
        assert (p0, p1)[:len(defaults)] == defaults
    _, defines = _opencl_common().activation(name, ())
    assert (defines["ACT_P0"], defines["ACT_P1"])[:len(defaults)] == defaults


def test_unknown_activation_is_an_op_attribute_error_everywhere():
    y = np.ones(3, np.float32)
    for call in (lambda: apply_activation(y, "Swish"), lambda: resolve("Swish"),
                 lambda: _epilogue().activation_code("Swish", (), "float32", "node 'n' (Conv)"),
                 lambda: _opencl_common().activation("Swish", ())):
        with pytest.raises(OpAttributeError, match="unknown fused activation 'Swish'"):
            call()
    with pytest.raises(OpAttributeError, match=r"'LeakyRelu' takes at most 1 activation_params"):
        resolve("LeakyRelu", (0.1, 0.2))
    g = kk.GraphBuilder("bad")
    a, w = g.input("a", (2, 3)), g.constant(np.ones((3, 2), np.float32))
    with pytest.raises(OpAttributeError, match=r"node 'mm' \(MatMul\): unknown fused activation 'Swish'"):
        g.op("MatMul", a, w, name="mm", activation="Swish")  # shape inference checks it, naming the node
    g.output(g.op("MatMul", a, w, name="mm", activation="Relu"))
    model = g.build()
    model.graph.nodes[0].attrs["activation"] = "Swish"  # e.g. read from a file
    for vendors in (["reference"], ["numba"]):
        with pytest.raises(OpAttributeError, match=r"node 'mm' \(MatMul\): unknown fused activation 'Swish'"):
            kk.Session(model, vendors=vendors)


# -- each fused activation on each backend matches the reference ---------------------------------------
# (activation op, its constant inputs after X, its attributes)
CASES = [
    ("Relu", [], {}), ("Clip", [-0.5, 0.75], {}), ("Clip", [None, 0.25], {}), ("LeakyRelu", [], {"alpha": 0.2}),
    ("LeakyRelu", [], {}), ("Sigmoid", [], {}), ("HardSwish", [], {}), ("Tanh", [], {}), ("Gelu", [], {}),
    ("Gelu", [], {"approximate": "tanh"}),
]


def _model(producer: str, act: str, extra, attrs):
    rng = np.random.default_rng(7)
    g = kk.GraphBuilder(f"{producer}_{act}")
    if producer == "Gemm":
        x = g.input("x", (5, 6), "float32")
        y = g.op("Gemm", x, g.constant(rng.standard_normal((4, 6)).astype(np.float32)),
                 g.constant(rng.standard_normal(4).astype(np.float32)), transB=1)
    else:
        x = g.input("x", (1, 3, 6, 6), "float32")
        y = g.op("Conv", x, g.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                 g.constant(rng.standard_normal(4).astype(np.float32)), pads=(1, 1, 1, 1))
    consts = [g.constant(np.array(v, np.float32)) if v is not None else None for v in extra]
    g.output(g.op(act, y, *consts, **attrs))
    feeds = {"x": (rng.standard_normal((5, 6) if producer == "Gemm" else (1, 3, 6, 6)) * 3).astype(np.float32)}
    return g.build(), feeds


@pytest.mark.parametrize("producer", ["Gemm", "Conv"])
@pytest.mark.parametrize("backend", ["numba", "opencl"])
@pytest.mark.parametrize("act, extra, attrs", CASES, ids=[f"{a}{i}" for i, (a, _, _) in enumerate(CASES)])
def test_fused_activation_matches_the_reference(backend, producer, act, extra, attrs):
    model, feeds = _model(producer, act, extra, attrs)
    (want,) = kk.Session(model, vendors=["reference"], passes=False).run(None, feeds)  # the standalone op
    if backend == "numba":
        pytest.importorskip("kernelkit_numba")
        sess = kk.Session(model, vendors=["numba"], fallback=False, passes=["fuse_activation"])
    else:
        _opencl_common()
        sess = kk.Session(model, device="gpu", fallback=False, passes=["fuse_activation"], options=OPENCL)
    (node,) = sess.graph.nodes
    assert node.op == producer and node.attrs["activation"] == act  # fused, and run by the backend:
    assert set(sess.placement().values()) == {("cpu", "numba") if backend == "numba" else ("gpu", "opencl")}
    assert_close(sess.run(None, feeds)[0], want, err_msg=f"{backend} {producer}+{act} {extra} {attrs}")


@pytest.mark.parametrize("backend", ["reference", "numba", "opencl"])
@pytest.mark.parametrize("act", ["Clip", "LeakyRelu", "Gelu"])
def test_empty_activation_params_take_the_tables_defaults(backend, act):
    """A producer with activation_params=() uses the table's defaults on every backend."""
    a = np.linspace(-4, 4, 12, dtype=np.float32).reshape(3, 4)
    g = kk.GraphBuilder("mm")
    g.output(g.op("MatMul", g.input("a", (3, 4), "float32"), g.constant(np.eye(4, dtype=np.float32)),
                  activation=act))
    kwargs = {"reference": {"vendors": ["reference"]}, "numba": {"vendors": ["numba"], "fallback": False},
              "opencl": {"device": "gpu", "fallback": False, "options": OPENCL}}[backend]
    if backend == "opencl":
        _opencl_common()
    (got,) = kk.Session(g.build(), **kwargs).run(None, {"a": a})
    want = {"Clip": a, "LeakyRelu": np.where(a >= 0, a, a * np.float32(0.01)),
            "Gelu": apply_activation(a.copy(), "Gelu", (0.0,))}[act]
    assert_close(got, want)

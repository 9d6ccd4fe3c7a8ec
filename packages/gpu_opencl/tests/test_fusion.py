"""Fusions the OpenCL kernels opt into: the residual Add (+ Relu) in the Conv epilogue, attention."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close


def _model(x_shape, w_shape, out_shape, attrs, residual_first: bool):
    rng = np.random.default_rng(3)
    g = kk.GraphBuilder("residual")
    x = g.input("x", x_shape, "float32")
    r = g.input("r", out_shape, "float32")
    w = rng.standard_normal(w_shape).astype(np.float32) * 0.3
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    y = g.op("Conv", x, w, b, **attrs)
    s = g.op("Add", r, y) if residual_first else g.op("Add", y, r)
    g.output(g.op("Relu", s))
    return g.build()


CASES = [  # x, w, y, attrs
    ((2, 5, 9, 9), (6, 5, 3, 3), (2, 6, 9, 9), {"pads": [1, 1, 1, 1]}),
    ((1, 6, 8, 8), (6, 1, 3, 3), (1, 6, 8, 8), {"pads": [1, 1, 1, 1], "group": 6}),  # depthwise
    ((2, 4, 7), (4, 2, 3), (2, 4, 7), {"pads": [1, 1], "group": 2}),  # 1-D, grouped
]


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_residual_add_and_relu_fuse_into_conv(monkeypatch, rng, split, case):
    from kernelkit_opencl.kernels import gemm

    tiles = dict(gemm.GPU_TILES[0], SPLIT_K=split)  # the GPU's local-memory path, split-K too
    monkeypatch.setattr(gemm, "_candidates", lambda dev, call: [tiles])
    xs, ws, ys, attrs = CASES[case]
    model = _model(xs, ws, ys, attrs, residual_first=bool(case % 2))
    sess = kk.Session(model, device="gpu", fallback=False, options={"opencl_tune": False})
    assert sess.passes_fired.get("fuse_residual") == 1 and sess.passes_fired.get("fuse_activation") == 1
    assert [s.op for s in sess.plan.kernel_steps()] == ["Conv"]
    ref = kk.Session(model, device="cpu", vendors=["reference"], passes=False)
    for _ in range(3):  # plain, captured, replayed
        feeds = {"x": rng.standard_normal(xs).astype(np.float32), "r": rng.standard_normal(ys).astype(np.float32)}
        assert_close(sess.run(None, feeds)[0], ref.run(None, feeds)[0])


@pytest.mark.parametrize("split", [1, 2])
def test_pointwise_conv_on_large_images_runs_as_batched_gemm(monkeypatch, rng, split):
    """With ``opencl_pointwise_gemm``, a 1x1 stride-1 convolution over >= 784 pixels is a plain GEMM
    batched over the images (128-bit load tiles, split-K too), bias, residual and Relu fused as
    before; a padded one or a smaller image stays implicit GEMM."""
    from kernelkit_opencl.kernels import gemm

    tiles = dict(gemm.GPU_LARGE[1], SPLIT_K=split)
    monkeypatch.setattr(gemm, "_candidates", lambda dev, call: [tiles])
    for xs, ws, ys, attrs, plain in [((2, 8, 28, 28), (12, 8, 1, 1), (2, 12, 28, 28), {}, True),
                                     ((2, 8, 28, 28), (12, 8, 1, 1), (2, 12, 30, 30), {"pads": [1, 1, 1, 1]}, False),
                                     ((2, 8, 14, 14), (12, 8, 1, 1), (2, 12, 14, 14), {}, False)]:
        model = _model(xs, ws, ys, attrs, residual_first=False)
        sess = kk.Session(model, device="gpu", fallback=False,
                          options={"opencl_tune": False, "opencl_profile": True, "opencl_pointwise_gemm": True})
        assert [s.op for s in sess.plan.kernel_steps()] == ["Conv"]
        ref = kk.Session(model, device="cpu", vendors=["reference"], passes=False)
        for _ in range(3):  # plain, captured, replayed
            feeds = {"x": rng.standard_normal(xs).astype(np.float32), "r": rng.standard_normal(ys).astype(np.float32)}
            assert_close(sess.run(None, feeds)[0], ref.run(None, feeds)[0], err_msg=f"{xs} {attrs}")
        labels = [r["kernel"] for r in sess._devices["gpu"].kernel_profile()]
        assert any(lb.startswith("gemm 12x784x8 z2") for lb in labels) == plain, labels
    off = kk.Session(_model(*CASES[0][:3], CASES[0][3], False), device="gpu", fallback=False)  # the default
    assert not off._devices["gpu"].pointwise_gemm


def test_kernels_without_z_are_left_unfused(monkeypatch):
    """A Conv kernel whose signature has no ``z`` (reference, numba and OpenCL all take one) never
    sees a fused residual: the pass leaves Conv -> Add -> Relu alone."""
    from kernelkit.ops.conv import conv as reference_conv
    from kernelkit.registry import register_kernel
    from kernelkit.testing import isolate_registries

    isolate_registries(monkeypatch)

    @register_kernel("Conv", device="cpu", vendor="noz", dtype="float32")
    def conv_without_z(x, w, b=None, **attrs):
        return reference_conv(x, w, b, **attrs)

    model = _model(*CASES[0][:3], CASES[0][3], residual_first=False)
    sess = kk.Session(model, device="cpu", vendors=["noz", "reference"])
    assert {s.op: s.key.vendor for s in sess.plan.kernel_steps()}["Conv"] == "noz"
    assert "fuse_residual" not in sess.passes_fired
    assert [s.op for s in sess.plan.kernel_steps()] == ["Conv", "Add", "Relu"]


def test_residual_of_another_shape_is_not_fused():
    rng = np.random.default_rng(0)
    g = kk.GraphBuilder("bcast")
    x = g.input("x", (1, 3, 6, 6), "float32")
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    y = g.op("Conv", x, w, None)
    g.output(g.op("Add", y, rng.standard_normal((4, 1, 1)).astype(np.float32)))
    sess = kk.Session(g.build(), device="gpu", fallback=False, options={"opencl_tune": False})
    assert "fuse_residual" not in sess.passes_fired


def test_float16_storage_runs_every_node_in_half_on_the_device(rng, cnn):
    """options float16: weights/activations stored as half (Conv incl. depthwise, Gemm, pools, Add),
    float32 at the model's edges; close to fp32."""
    model = cnn(2)
    sess = kk.Session(model, device="gpu", fallback=False, options={"opencl_tune": False, "float16": True})
    assert sess.passes_fired.get("float16_storage", 0) > 0
    ops = {s.op: s.key.dtype for s in sess.plan.kernel_steps()}
    assert ops["Conv"] == ops["Gemm"] == ops["MaxPool"] == ops["GlobalAveragePool"] == "float16"
    full = kk.Session(model, device="gpu", fallback=False, options={"opencl_tune": False})
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    for _ in range(3):
        got, want = sess.run(None, {"x": x}), full.run(None, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        assert kk.testing.cosine(g, w) > 0.999
        np.testing.assert_allclose(g, w, rtol=0.02, atol=0.02)


def test_float16_matmul_softmax_layernorm(rng):
    g = kk.GraphBuilder("attn")
    x = g.input("x", (2, 8, 16), "float32")
    w = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
    s = g.op("Softmax", g.op("MatMul", x, w), axis=-1)
    g.output(g.op("LayerNormalization", s, np.ones(16, np.float32), np.zeros(16, np.float32), axis=-1))
    model = g.build()
    sess = kk.Session(model, device="gpu", fallback=False, options={"opencl_tune": False, "float16": True})
    assert {s.key.dtype for s in sess.plan.kernel_steps() if s.op != "Cast"} == {"float16"}
    feed = {"x": rng.standard_normal((2, 8, 16)).astype(np.float32)}
    want = kk.Session(model, device="cpu", vendors=["reference"]).run(None, feed)[0]
    assert kk.testing.cosine(sess.run(None, feed)[0], want) > 0.999


# -- attention: core's fuse_attention pass gives the OpenCL Attention kernel one node per layer ----------
_spec = importlib.util.spec_from_file_location("kernelkit_gpu_models",
                                               Path(__file__).parents[3] / "benchmarks/gpu/models.py")
gpu_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_models)


@pytest.mark.parametrize("batch, seq, d, heads", [(2, 12, 32, 4), (1, 150, 16, 2)])
def test_transformer_attention_fuses_into_one_kernel(batch, seq, d, heads):
    """benchmarks/gpu/models.py's encoder, small: each layer's MatMul -> Mul -> Softmax -> MatMul
    (with the head split/merge transposes) is one 3-D Attention node on opencl, and the session
    matches the reference, op by op as written."""
    model = gpu_models.transformer(batch, layers=2, seq=seq, d=d, heads=heads, ffn=2 * d)
    x = np.random.default_rng(5).standard_normal((batch, seq, d)).astype(np.float32)
    sess = kk.Session(model, device="gpu", fallback=False, options={"opencl_tune": False})
    assert sess.passes_fired.get("fuse_attention") == 2
    fused = [n for n in sess.graph.nodes if n.op_id == "Attention"]
    assert len(fused) == 2 and all(len(n.inputs) == 3 and n.attrs["q_num_heads"] == heads for n in fused)
    assert not any(n.op_id == "Softmax" for n in sess.graph.nodes)
    want = kk.Session(model, device="cpu", vendors=["reference"]).run(None, {"x": x})[0]
    assert_close(sess.run(None, {"x": x})[0], want)

"""Property tests: Conv (1-D/2-D, grouped, depthwise, dilated, strided, padded, fused epilogue)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit.errors import OpAttributeError
from kernelkit.testing import run_single_op

# every example builds a Session; a few dozen cover the space without slowing CI (kept per test,
# not as a global hypothesis profile, so other packages' tests keep their settings)
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

ACTS = [("", ()), ("Relu", ()), ("Clip", (-0.5, 0.5)), ("LeakyRelu", (0.2,)), ("Sigmoid", ()),
        ("HardSwish", ()), ("Tanh", ()), ("Gelu", (0.0,)), ("Gelu", (1.0,))]


@st.composite
def conv_cases(draw):
    rank = draw(st.sampled_from([1, 2]))
    group = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = draw(st.booleans())
    cg = 1 if depthwise else draw(st.integers(1, 3))
    mult = draw(st.integers(1, 2))
    c, m = cg * group, group * mult * (1 if depthwise else draw(st.integers(1, 2)))
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = [draw(st.integers(0, 2)) for _ in range(2 * rank)] if auto_pad == "NOTSET" else []
    spatial = [draw(st.integers((k - 1) * d + 1, 9)) for k, d in zip(kernel, dilations)]
    n = draw(st.integers(1, 2))
    act, params = draw(st.sampled_from(ACTS))
    attrs = {"group": group, "strides": strides, "dilations": dilations, "auto_pad": auto_pad,
             "activation": act, "activation_params": list(params)}
    if pads:
        attrs["pads"] = pads
    if draw(st.booleans()):
        attrs["kernel_shape"] = kernel
    seed = draw(st.integers(0, 2**16))
    return (n, c, *spatial), (m, cg, *kernel), draw(st.booleans()), attrs, seed


@FEW
@given(conv_cases())
def test_conv_matches_reference(check, case):
    x_shape, w_shape, with_bias, attrs, seed = case
    r = np.random.default_rng(seed)
    x = r.uniform(-1, 1, x_shape).astype(np.float32)
    w = r.uniform(-1, 1, w_shape).astype(np.float32)
    b = r.uniform(-1, 1, w_shape[0]).astype(np.float32) if with_bias else None
    check("Conv", [x, w, b], attrs, constants=(1, 2))


def test_conv_resnet_stem_and_pointwise(check, rng):
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    w = rng.standard_normal((8, 3, 7, 7)).astype(np.float32)
    check("Conv", [x, w], {"strides": [2, 2], "pads": [3, 3, 3, 3], "activation": "Relu"},
                            constants=(1,))
    x = rng.standard_normal((2, 16, 5, 5)).astype(np.float32)
    w = rng.standard_normal((8, 16, 1, 1)).astype(np.float32)
    check("Conv", [x, w, np.ones(8, np.float32)], {}, constants=(1, 2))


@pytest.mark.parametrize("n, c, m", [(1, 440, 110), (1, 4, 96), (3, 48, 1152), (2, 7, 5)])
@pytest.mark.parametrize("activation, params", [("", ()), ("Relu", ()), ("Sigmoid", ()), ("Clip", (-0.5, 0.5))])
def test_conv_on_one_pixel_maps(check, rng, n, c, m, activation, params):
    """1x1 convolutions of 1x1 maps (squeeze-and-excitation: conv._gemm_pixel, one BLAS product of
    the images' pixels), with and without bias, against the reference; a 1x1 map reached by a
    stride or a 3x3 kernel with pads keeps the other paths."""
    x = rng.standard_normal((n, c, 1, 1)).astype(np.float32)
    w = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    attrs = {"activation": activation, "activation_params": list(params)} if activation else {}
    check("Conv", [x, w, rng.standard_normal(m).astype(np.float32)], attrs, constants=(1, 2))
    check("Conv", [x, w], attrs, constants=(1,))
    w3 = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    check("Conv", [x, w3], {**attrs, "pads": [1, 1, 1, 1]}, constants=(1,))
    check("Conv", [rng.standard_normal((n, c, 2, 2)).astype(np.float32), w], {**attrs, "strides": [2, 2]},
          constants=(1,))


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 32, 7, 7), (32, 8, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # RegNetY's grouped layers, smaller
    ((2, 24, 14, 14), (24, 8, 3, 3), {"group": 3, "pads": [1, 1, 1, 1], "activation": "Relu"}),
    ((1, 16, 6, 5), (16, 4, 3, 2), {"group": 4, "pads": [0, 2, 1, 0]}),  # asymmetric pads, a 3x2 kernel
    ((1, 16, 5, 5), (8, 8, 3, 3), {"group": 2}),  # no pads
    ((1, 12, 9), (12, 4, 3), {"group": 3, "pads": [1, 1]}),  # 1-D
    ((1, 16, 8, 8), (16, 8, 3, 3), {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # strided: _im2col
])
def test_grouped_conv_im2col_through_a_padded_copy(check, rng, x_shape, w_shape, attrs):
    """Grouped convolutions at stride 1 take conv._im2col_padded (a zero-padded copy, then plain row
    copies); strided ones the clipped _im2col. Both against the reference, with bias."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    check("Conv", [x, w, rng.standard_normal(w_shape[0]).astype(np.float32)], attrs, constants=(1, 2))


@pytest.mark.parametrize("x_shape, w_shape, attrs, block", [
    ((1, 48, 112, 112), (48, 8, 3, 3), {"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2],
                                         "activation": "Relu"}, None),  # RegNetY's first 3x3/2, as is
    ((2, 16, 13, 11), (16, 4, 3, 3), {"group": 4, "pads": [1, 0, 1, 2], "strides": [2, 2]}, 8000),  # 2-2-2-1 rows
    ((1, 12, 15, 9), (18, 4, 3, 3), {"group": 3, "pads": [1, 1, 1, 1], "strides": [2, 1],
                                      "dilations": [1, 2]}, 10000),  # 3-3-2 rows
    ((1, 12, 17), (12, 4, 3), {"group": 3, "pads": [1, 1], "strides": [2]}, 1 << 8),  # 1-D: one block
])
@pytest.mark.parametrize("with_z", [False, True])
def test_grouped_conv_in_blocks_of_rows(rng, monkeypatch, x_shape, w_shape, attrs, block, with_z):
    """Strided grouped convolutions at one thread whose column matrix exceeds _GROUPED_ROWS_MIN_BYTES
    run in blocks of output rows (``Conv._grouped_rows``): RegNetY's layer at its size, and small
    ones with the limits lowered (one or a few rows a block, the last one partial), against the
    reference, with bias and a fused residual."""
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import conv

    if block is not None:
        monkeypatch.setattr(conv, "_GROUPED_ROWS_MIN_BYTES", 0)
        monkeypatch.setattr(conv, "_GROUPED_CHUNK_BYTES", block)
    calls = []
    rows = conv.Conv._grouped_rows
    monkeypatch.setattr(conv.Conv, "_grouped_rows", lambda self, *a: calls.append(a[-1]) or rows(self, *a))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    inputs = [x, w, rng.standard_normal(w_shape[0]).astype(np.float32)]
    if with_z:
        y = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
        inputs.append(rng.standard_normal(y.shape).astype(np.float32))
    got = run_single_op("Conv", inputs, attrs, constants=(1, 2), vendors=["numba"], fallback=False, threads=1)
    want = run_single_op("Conv", inputs, attrs, constants=(1, 2), vendors=["reference"], fallback=False)
    assert_close(got[0], want[0])
    assert calls, "the row-block path did not run"


def test_conv_unknown_activation_is_a_typed_error(rng):
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    with pytest.raises(OpAttributeError, match="Swoosh"):
        run_single_op("Conv", [x, w], {"activation": "Swoosh"}, vendors=["numba"], fallback=False)


def test_conv_does_not_touch_inputs(rng):
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    x0, w0 = x.copy(), w.copy()
    run_single_op("Conv", [x, w], {"group": 4, "activation": "Relu"}, vendors=["numba"], fallback=False)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


@st.composite
def conv_transpose_cases(draw):
    rank = draw(st.sampled_from([1, 2]))
    group = draw(st.sampled_from([1, 2]))
    cg, mg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)]
    spatial = [draw(st.integers(1, 5)) for _ in range(rank)]
    attrs = {"group": group, "strides": strides, "dilations": dilations}
    mode = draw(st.sampled_from(["pads", "output_shape", "SAME_UPPER", "SAME_LOWER"]))
    if mode == "pads":
        full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, spatial, kernel, dilations)]
        attrs["pads"] = [draw(st.integers(0, max(0, (f - 1) // 2))) for f in full] * 2
        attrs["output_padding"] = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilations)]
    elif mode == "output_shape":
        attrs["output_shape"] = [s * i for s, i in zip(strides, spatial)]
    else:
        attrs["auto_pad"] = mode
    act, params = draw(st.sampled_from(ACTS))
    attrs.update(activation=act, activation_params=list(params))
    seed = draw(st.integers(0, 2**16))
    return (draw(st.integers(1, 2)), cg * group, *spatial), (cg * group, mg, *kernel), draw(st.booleans()), attrs, seed


@FEW
@given(conv_transpose_cases())
def test_conv_transpose_matches_reference(check, case):
    x_shape, w_shape, with_bias, attrs, seed = case
    r = np.random.default_rng(seed)
    x = r.uniform(-1, 1, x_shape).astype(np.float32)
    w = r.uniform(-1, 1, w_shape).astype(np.float32)
    b = r.uniform(-1, 1, w_shape[1] * attrs["group"]).astype(np.float32) if with_bias else None
    check("ConvTranspose", [x, w, b], attrs, constants=(1, 2))


@st.composite
def winograd_cases(draw):
    """3x3 stride-1 convolutions on maps large enough for the Winograd path (>= 14x14 outputs)."""
    h, w = draw(st.integers(14, 19)), draw(st.integers(14, 19))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    if (h + pads[0] + pads[2] - 2) * (w + pads[1] + pads[3] - 2) < 196:
        pads = [1, 1, 1, 1]
    act, params = draw(st.sampled_from(ACTS))
    attrs = {"pads": pads, "activation": act, "activation_params": list(params)}
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 9)), h, w)
    return shape, draw(st.integers(1, 20)), draw(st.booleans()), attrs, draw(st.integers(0, 2**16))


@FEW
@given(winograd_cases())
def test_conv3x3_winograd_matches_reference(check, case):
    x_shape, m, with_bias, attrs, seed = case
    r = np.random.default_rng(seed)
    x = r.uniform(-1, 1, x_shape).astype(np.float32)
    w = r.uniform(-1, 1, (m, x_shape[1], 3, 3)).astype(np.float32)
    b = r.uniform(-1, 1, m).astype(np.float32) if with_bias else None
    check("Conv", [x, w, b], attrs, constants=(1, 2))


def test_conv3x3_winograd_deep_and_weights_as_input(check, rng):
    """A ResNet-sized layer (error grows with C * 9 terms), and weights fed at run time (transformed
    on every call, not cached from the first)."""
    x = rng.standard_normal((1, 128, 28, 28)).astype(np.float32)
    w = (rng.standard_normal((64, 128, 3, 3)) / 34).astype(np.float32)
    check("Conv", [x, w], {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1,))
    from types import SimpleNamespace

    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels.conv import Conv

    kernel = Conv()
    kernel.prepare([SimpleNamespace(dtype=np.dtype(np.float32), shape=(1, 8, 16, 16))], {"pads": [1, 1, 1, 1]})
    small = x[:, :8, :16, :16].copy()
    for scale in (1.0, -2.0):
        ws = (w[:4, :8] * scale).astype(np.float32)
        want = run_single_op("Conv", [small, ws], {"pads": [1, 1, 1, 1]}, vendors=["reference"])[0]
        assert_close(kernel.execute(small, ws), want)


@st.composite
def winograd4_cases(draw):
    """3x3 stride-1 convolutions for F(4x4, 3x3): maps of 28x28 and more at batch 1-2 (odd sizes:
    the last tiles overhang), 14x14 and more at batch 4, 7x7 and more at batch 8."""
    batch = draw(st.sampled_from([1, 2, 4, 8]))
    lo = {1: 28, 2: 28, 4: 14, 8: 7}[batch]
    h, w = draw(st.integers(lo, lo + 5)), draw(st.integers(lo, lo + 5))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    if (h + pads[0] + pads[2] - 2) * (w + pads[1] + pads[3] - 2) < lo * lo:
        pads = [1, 1, 1, 1]
    act, params = draw(st.sampled_from(ACTS))  # bounded ones run F(2x2, 3x3): see Conv.setup
    attrs = {"pads": pads, "activation": act, "activation_params": list(params)}
    shape = (batch, draw(st.integers(1, 9)), h, w)
    return shape, draw(st.integers(1, 20)), draw(st.booleans()), draw(st.booleans()), attrs, draw(st.integers(0, 2**16))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(winograd4_cases())
def test_conv3x3_winograd4_matches_reference(check, case):
    """F(4x4, 3x3), with and without a fused residual Z."""
    x_shape, m, with_bias, with_z, attrs, seed = case
    r = np.random.default_rng(seed)
    x = r.uniform(-1, 1, x_shape).astype(np.float32)
    w = r.uniform(-1, 1, (m, x_shape[1], 3, 3)).astype(np.float32)
    b = r.uniform(-1, 1, m).astype(np.float32) if with_bias else None
    inputs = [x, w, b]
    if with_z:
        p = attrs["pads"]
        out = (x_shape[0], m, x_shape[2] + p[0] + p[2] - 2, x_shape[3] + p[1] + p[3] - 2)
        inputs.append(r.uniform(-1, 1, out).astype(np.float32))
    check("Conv", inputs, attrs, constants=(1, 2))


def test_conv3x3_winograd4_resnet_layer(check, rng):
    """A ResNet-sized layer on F(4x4, 3x3): the error grows with C * 9 terms and the transform's
    larger constants; must stay within the float32 tolerance."""
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    z = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    check("Conv", [x, w, None, z], {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1,))


# every Conv path with the residual Z (pass fuse_residual) and an activation after it
Z_CASES = [
    ((1, 8, 30, 29), (5, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # Winograd F(4x4, 3x3)
    ((4, 3, 15, 14), (6, 3, 3, 3), {"pads": [1, 0, 2, 1]}),  # F(4x4, 3x3) at batch 4, odd sizes
    ((8, 4, 7, 7), (5, 4, 3, 3), {"pads": [1, 1, 1, 1]}),  # F(4x4, 3x3): 7x7 maps at batch 8
    ((1, 4, 16, 16), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),  # F(2x2, 3x3)
    ((2, 4, 9, 9), (6, 4, 1, 1), {}),  # 1x1: the image is the column matrix
    ((1, 4, 9, 9), (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # im2col + GEMM
    ((2, 6, 9, 8), (6, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),  # grouped
    ((1, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise: z in a second pass
    ((2, 3, 11), (4, 3, 3), {"pads": [1, 1]}),  # 1-D
]


@pytest.mark.parametrize("activation", ["", "Relu", "Sigmoid"])
@pytest.mark.parametrize("x_shape, w_shape, attrs", Z_CASES)
def test_conv_fused_residual_z(check, rng, x_shape, w_shape, attrs, activation):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    y = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    z = rng.standard_normal(y.shape).astype(np.float32)
    check("Conv", [x, w, b, z], {**attrs, "activation": activation}, constants=(1, 2))


def test_residual_block_fuses_add_and_relu_into_the_numba_conv(rng):
    """conv -> conv -> Add(x) -> Relu: fuse_residual moves the Add into the numba Conv (Z) and
    fuse_activation the Relu after it; the result agrees with the reference session."""
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper, numpy_helper

    w1 = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 28, 28]) for n in ("x", "y")]
    proto = helper.make_model(helper.make_graph(nodes, "block", io[:1], io[1:], [w1, w2]),
                              opset_imports=[helper.make_opsetid("", 21)])
    model = convert(proto)
    x = rng.standard_normal((1, 8, 28, 28)).astype(np.float32)
    sess = kernelkit.Session(model, vendors=["numba"], fallback=False)
    assert sess.passes_fired.get("fuse_residual") == 1
    assert [s.op for s in sess.plan.kernel_steps()] == ["Conv", "Conv"]
    want = kernelkit.Session(model, vendors=["reference"]).run(None, {"x": x})[0]
    assert_close(sess.run(None, {"x": x})[0], want)


# the depthwise 3x3 pads-1 fast paths (stride 1 straight from x; stride 2 over stride phases): even
# and odd maps, maps too small for an interior (1, 2, 3 rows or columns), channel multiplier 2,
# batch 2, and maps whose stride-2 output takes several accumulator blocks (130x131, 67x140)
DW_MAPS = [(14, 14), (7, 7), (15, 12), (1, 1), (2, 2), (3, 3), (1, 9), (9, 2), (112, 5), (130, 131), (67, 140)]


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("hw", DW_MAPS)
def test_depthwise3x3_fast_paths(check, rng, stride, hw):
    for n, c, mult, act, params in [(1, 4, 1, "Clip", (0.0, 6.0)), (2, 3, 2, "", ()), (1, 2, 1, "Sigmoid", ())]:
        x = rng.standard_normal((n, c, *hw)).astype(np.float32)
        w = rng.standard_normal((c * mult, 1, 3, 3)).astype(np.float32)
        b = rng.standard_normal(c * mult).astype(np.float32)
        attrs = {"group": c, "pads": [1, 1, 1, 1], "strides": [stride, stride], "activation": act,
                 "activation_params": list(params)}
        check("Conv", [x, w, b], attrs, constants=(1, 2))


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 3, 23, 21), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3], "activation": "Relu"}),  # stem
    ((2, 4, 12, 13), (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 6, 11, 11), (4, 3, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    ((1, 4, 16, 9), (5, 4, 1, 1), {"strides": [2, 2], "activation": "Sigmoid"}),
    ((1, 3, 10, 17), (4, 3, 3, 5), {"strides": [1, 3], "pads": [1, 4, 0, 2], "dilations": [1, 2]}),
    ((2, 4, 9, 14), (6, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2, "dilations": [2, 2]}),
])
@pytest.mark.parametrize("with_z", [False, True])
@pytest.mark.parametrize("phases", [False, True])
def test_conv_im2col_in_blocks_of_rows(check, rng, monkeypatch, x_shape, w_shape, attrs, with_z, phases):
    """The blocked im2col + GEMM (column matrices over 1 MiB, ``Conv._gemm_blocked``) with the limits
    lowered so these small maps take it: one or two output rows a block, the last one partial;
    strided ones packed from column phases (``_im2col_phases``) or gathered."""
    from kernelkit_numba.kernels import conv

    if not phases:  # one half on BLAS, the other on ftile's rows tiles where the CPU has a variant
        monkeypatch.setenv("KERNELKIT_F32_GEMM", "off")
    monkeypatch.setattr(conv, "_PHASES_MIN_COLS", 1 if phases else 1 << 30)
    monkeypatch.setattr(conv, "_COL_BYTES", 0)
    monkeypatch.setattr(conv, "_COL_BLOCK_BYTES", 1 << 9)
    monkeypatch.setattr(conv, "_BLOCKED_MIN_COLS", 1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
    inputs = [x, w, b]
    if with_z:
        y = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
        inputs.append(rng.standard_normal(y.shape).astype(np.float32))
    check("Conv", inputs, attrs, constants=(1, 2))


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 64, 7, 7), (70, 64, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}),  # 7x7 map, M % 4 = 2
    ((2, 40, 7, 7), (67, 40, 1, 1), {}),  # 1x1: the image transposed is the column matrix
    ((1, 24, 13, 14), (66, 24, 1, 1), {"strides": [2, 2], "activation": "Sigmoid"}),  # 1x1/2
    ((1, 32, 14, 13), (64, 32, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 8, 6, 5), (10, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1], "dilations": [1, 2]}),
])
@pytest.mark.parametrize("with_z", [False, True])
def test_conv_gemm_nt_rows(check, rng, monkeypatch, x_shape, w_shape, attrs, with_z):
    """Convolutions with few output pixels (7x7 maps) and many weight rows: columns transposed and
    ``gemm_nt_rows`` (weights read once), K in chunks (lowered here so that K takes several),
    row counts that leave a partial group of four, with the residual and activations."""
    from kernelkit_numba.kernels import conv

    monkeypatch.setenv("KERNELKIT_F32_GEMM", "off")  # ftile's cols tiles take these shapes otherwise
    monkeypatch.setattr(conv, "_NT_MIN_ROWS", 1)
    monkeypatch.setattr(conv, "_NT_K_CHUNK", 48)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
    inputs = [x, w, b]
    if with_z:
        y = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
        inputs.append(rng.standard_normal(y.shape).astype(np.float32))
    check("Conv", inputs, attrs, constants=(1, 2))

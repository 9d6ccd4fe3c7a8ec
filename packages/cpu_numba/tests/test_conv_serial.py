"""Conv's serial fast path (kernels/conv_serial.py): which static convolutions bind it at one thread,
its output against the general path (``execute``, bit for bit: the same drivers) and the reference,
and the cases that must leave it (a new weight array, weights that are not constants, a switch
changed after binding)."""
from __future__ import annotations

import gc
import subprocess
import sys
import threading
import warnings
import weakref

import numpy as np
import pytest
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba import config
from kernelkit_numba.kernels import conv_serial, dwtile, ftile
from kernelkit_numba.kernels.conv import Conv

needs_tiles = pytest.mark.skipif(ftile.choice()[0] is None, reason="no AVX2/AVX-512 float32 tiles on this CPU")
needs_avx512 = pytest.mark.skipif(not ftile.available("avx512"), reason="no AVX-512 float32 tiles on this CPU")


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _kernel(x, w, b, z, attrs, threads=1, options=None):
    names = ["x", "w", "b", "z"][:2 + (b is not None or z is not None) + (z is not None)]
    k = Conv()
    k.context = KernelContext(Node("Conv", names, ["y"], {}, "n"), None, options or {}, threads)
    specs = [TensorSpec(x.shape, "float32"), TensorSpec(w.shape, "float32")]
    if len(names) > 2:
        specs.append(None if b is None else TensorSpec(b.shape, "float32"))
    if z is not None:
        specs.append(TensorSpec(z.shape, "float32"))
    k.prepare(specs, attrs)
    return k


def _inputs(x, w, b, z):
    xs = [x, w]
    if b is not None or z is not None:
        xs.append(b)
    if z is not None:
        xs.append(z)
    return xs


# (x shape, weight shape, attrs, with bias, with z): 1x1 on the rows tiles (14x14, 56x56 tails, M not a
# multiple of 8), on the cols tiles (7x7, M a multiple of 16, K >= 128), batch 2; depthwise 3x3 stride 1
# and 2 (the pairs tile at 7-wide outputs), with and without the residual and the bias
CASES = [
    ((1, 40, 14, 14), (24, 40, 1, 1), {"activation": "Clip", "activation_params": [0.0, 6.0]}, True, False),
    ((1, 40, 14, 14), (20, 40, 1, 1), {}, True, True),
    ((1, 24, 56, 56), (36, 24, 1, 1), {"activation": "Relu"}, False, False),
    ((2, 16, 9, 11), (12, 16, 1, 1), {}, True, True),
    ((1, 160, 7, 7), (32, 160, 1, 1), {}, True, True),
    ((1, 192, 7, 7), (48, 192, 1, 1), {"activation": "Clip", "activation_params": [0.0, 6.0]}, True, False),
    ((1, 24, 14, 14), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1],
                                      "activation": "Clip", "activation_params": [0.0, 6.0]}, True, False),
    ((2, 8, 15, 12), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, False, True),
    ((1, 16, 14, 14), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1], "strides": [2, 2],
                                      "activation": "Clip", "activation_params": [0.0, 6.0]}, True, False),
    ((1, 16, 28, 28), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1], "strides": [2, 2]}, True, True),
    # the stems: strided convolutions of few input channels on the implicit GEMM
    ((1, 3, 64, 64), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2],
                                     "activation": "Clip", "activation_params": [0.0, 6.0]}, True, False),
    ((2, 3, 61, 66), (12, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, False, True),
    # 1x1 strided (the shortcuts): the input subsampled into a buffer, then the stride-1 tiles (rows tiles
    # at 28x28 and odd sizes, cols tiles at 7x7, stride 3 and unequal strides, an end pad that is never read)
    ((1, 24, 56, 56), (40, 24, 1, 1), {"strides": [2, 2]}, True, False),
    ((2, 16, 15, 13), (12, 16, 1, 1), {"strides": [2, 2], "activation": "Relu"}, True, True),
    ((1, 160, 14, 14), (32, 160, 1, 1), {"strides": [2, 2]}, False, True),
    ((1, 8, 13, 12), (16, 8, 1, 1), {"strides": [3, 2], "pads": [0, 0, 1, 0]}, True, False),
]


def _path(ws):
    """The bound call's closure for a case (the implicit GEMM only on the avx2/avx512 tiles: a forced
    ``generic`` variant leaves the stems to the general path)."""
    if ws[1] == 1:
        return "_depthwise_call"
    if ws[2] > 1:
        return "_implicit_call" if ftile.choice()[0] in (1, 2) else "NumbaKernel.bind"
    return "_tiles_call"


def _case(rng, xs, ws, attrs, with_b, with_z):
    x = rng.standard_normal(xs).astype(np.float32)
    w = _ro(rng.standard_normal(ws).astype(np.float32))
    b = _ro(rng.standard_normal(ws[0]).astype(np.float32)) if with_b else None
    z = None
    if with_z:
        y = run_single_op("Conv", _inputs(x, w, b, None), attrs, vendors=["reference"])[0]
        z = rng.standard_normal(y.shape).astype(np.float32)
    return x, w, b, z


@needs_tiles
@pytest.mark.parametrize("xs, ws, attrs, with_b, with_z", CASES)
def test_serial_call_matches_the_general_path(rng, xs, ws, attrs, with_b, with_z):
    if ws[1] == 1 and not dwtile.enabled():
        pytest.skip("no AVX-512 window tiles on this CPU")
    x, w, b, z = _case(rng, xs, ws, attrs, with_b, with_z)
    k = _kernel(x, w, b, z, attrs)
    call = k.bind(None)
    assert _path(ws) in call.__qualname__
    inputs = _inputs(x, w, b, z)
    want = k.execute(*inputs)
    ref = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
    for _ in range(2):  # the first call binds the constants, the second reuses them
        out = np.full(want.shape, np.nan, np.float32)
        got = call(*inputs, out=out)
        assert got is out
        np.testing.assert_array_equal(got, want)
        assert_close(got, ref)
    np.testing.assert_array_equal(call(*inputs), want)  # no out: allocated


@needs_tiles
def test_serial_call_leaves_for_new_or_writable_weights_and_switches(rng, monkeypatch):
    attrs = {"activation": "Clip", "activation_params": [0.0, 6.0]}
    x, w, b, z = _case(rng, (1, 40, 14, 14), (24, 40, 1, 1), attrs, True, True)
    k = _kernel(x, w, b, z, attrs)
    call = k.bind(None)
    general = []
    run = k.run
    monkeypatch.setattr(k, "run", lambda inputs, out: general.append(1) or run(inputs, out))

    def ref(w):
        return run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]

    assert_close(call(x, w, b, z), ref(w))
    assert not general
    w2 = _ro(rng.standard_normal(w.shape).astype(np.float32))  # another constant: packed again
    assert_close(call(x, w2, b, z), ref(w2))
    assert not general
    w3 = rng.standard_normal(w.shape).astype(np.float32)  # writable (a graph input): the general path
    assert_close(call(x, w3, b, z), ref(w3))
    assert general == [1]
    monkeypatch.setenv(ftile.ENV, "off")  # changed after binding: the general path (BLAS) again
    assert_close(call(x, w, b, z), ref(w))
    assert general == [1, 1]


@pytest.mark.parametrize("xs, ws, attrs, with_b", [
    ((1, 32, 1, 1), (8, 32, 1, 1), {}, True),  # EfficientNet-B0's first squeeze
    ((2, 48, 1, 1), (1152, 48, 1, 1), {"activation": "Sigmoid"}, True),  # the excitation, batch 2
    ((1, 440, 1, 1), (110, 440, 1, 1), {"activation": "Relu"}, False),  # RegNetY's, no bias
    ((1, 16, 1, 1), (24, 16, 1, 1), {"activation": "Clip", "activation_params": [0.0, 6.0]}, True),
])
def test_serial_call_on_one_pixel_maps(rng, monkeypatch, xs, ws, attrs, with_b):
    """1x1 convolutions of 1x1 maps (squeeze-and-excitation) bind conv._gemm_pixel's product and
    epilogue (``_pixel_call``): bit for bit the general path, close to the reference; a weight that is
    not a constant and a residual leave for the general path."""
    x, w, b, _ = _case(rng, xs, ws, attrs, with_b, False)
    k = _kernel(x, w, b, None, attrs)
    call = k.bind(None)
    assert "_pixel_call" in call.__qualname__
    inputs = _inputs(x, w, b, None)
    want = k.execute(*inputs)
    ref = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
    general = []
    run = k.run
    monkeypatch.setattr(k, "run", lambda inputs, out: general.append(1) or run(inputs, out))
    for _ in range(2):
        out = np.full(want.shape, np.nan, np.float32)
        assert call(*inputs, out=out) is out
        np.testing.assert_array_equal(out, want)
        assert_close(out, ref)
    np.testing.assert_array_equal(call(*inputs), want)
    assert not general
    w2 = rng.standard_normal(ws).astype(np.float32)  # writable (a graph input): the general path
    assert_close(call(x, w2, b), run_single_op("Conv", _inputs(x, w2, b, None), attrs, vendors=["reference"])[0])
    assert general == [1]
    zk = _kernel(x, w, b, want, attrs)  # a fused residual: not this call
    assert "_pixel_call" not in zk.bind(None).__qualname__


def test_serial_call_is_not_bound_where_the_general_path_decides(rng):
    """A 3x3 dense convolution (Winograd), a strided 1x1 whose end pad is read and a padded one of a 1x1
    map keep the general bound call; so does any convolution of a two-thread budget whose work is above the
    serial limit."""
    x = rng.standard_normal((1, 96, 112, 112)).astype(np.float32)
    w = _ro(rng.standard_normal((96, 96, 1, 1)).astype(np.float32))
    assert "_tiles_call" not in _kernel(x, w, None, None, {}, threads=2).bind(None).__qualname__
    for xs, ws, attrs in [((1, 8, 10, 10), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
                          ((1, 16, 10, 10), (16, 16, 1, 1), {"strides": [2, 2], "pads": [0, 0, 1, 1]}),
                          ((1, 8, 1, 1), (5, 8, 1, 1), {"pads": [0, 0, 1, 1], "strides": [2, 2]}),
                          ((1, 8, 1, 1), (5, 8, 1, 1), {"pads": [0, 0, 1, 1]})]:  # a 2x2 output
        x = rng.standard_normal(xs).astype(np.float32)
        w = _ro(rng.standard_normal(ws).astype(np.float32))
        name = _kernel(x, w, None, None, attrs).bind(None).__qualname__
        assert not any(p in name for p in ("_tiles_call", "_depthwise_call", "_implicit_call", "_pixel_call"))


# (x shape, weight shape, attrs, thread budget at two threads): the serial limits per layer kind
# (conv.serial_flops): MobileNetV2's layers and ResNet's 1x1/2 shortcuts stay on the calling thread,
# ResNet's 3x3 layers, its 7x7/2 stem and ResNet-50's 1x1 layers of 103 MFLOP go to the pool
LIMITS = [
    ((1, 16, 112, 112), (96, 16, 1, 1), {}, 1),  # 1x1 at 112x112, 38.5 MFLOP
    ((1, 32, 112, 112), (16, 32, 1, 1), {}, 1),  # the 112x112 projection, 12.8 MFLOP
    ((1, 24, 56, 56), (144, 24, 1, 1), {}, 1),  # 1x1 at 56x56, 21.7 MFLOP
    ((1, 320, 7, 7), (1280, 320, 1, 1), {}, 1),  # the 7x7 head layer, 40 MFLOP
    ((1, 960, 7, 7), (320, 960, 1, 1), {}, 1),
    ((1, 3, 224, 224), (32, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, 1),  # stem, 21.7 MFLOP
    ((1, 128, 28, 28), (256, 128, 1, 1), {"strides": [2, 2]}, 1),  # ResNet's 1x1/2 shortcut, 12.8 MFLOP
    ((1, 64, 56, 56), (256, 64, 1, 1), {}, 2),  # ResNet-50's 1x1 at 56x56, 103 MFLOP
    ((1, 512, 7, 7), (512, 512, 3, 3), {"pads": [1, 1, 1, 1]}, 2),  # 231 MFLOP on a 7x7 map
    ((1, 64, 28, 28), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, 2),  # 3x3, 58 MFLOP (PRODUCT_FLOPS)
    ((1, 3, 224, 224), (64, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, 2),  # ResNet's stem
    ((1, 144, 56, 56), (144, 1, 3, 3), {"group": 144, "pads": [1, 1, 1, 1]}, 1),  # depthwise (dwtile's rule)
]


@pytest.mark.parametrize("xs, ws, attrs, want", LIMITS)
def test_serial_limits_per_layer_kind(rng, xs, ws, attrs, want):
    """At two threads a convolution below its kind's serial limit gets a budget of one thread when the
    session binds it (no pool job: the serial fast path where it has one), those above get two."""
    x = rng.standard_normal(xs).astype(np.float32)
    w = _ro(rng.standard_normal(ws).astype(np.float32))
    k = _kernel(x, w, None, None, attrs, threads=2)
    assert k.static_threads() == want
    name = k.bind(None).__qualname__
    serial = any(p in name for p in ("_tiles_call", "_depthwise_call", "_implicit_call"))
    if want == 1 and ftile.choice()[0] is not None and (ws[1] > 1 or dwtile.enabled()):
        assert serial
    if want == 2:
        assert not serial


@needs_tiles
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("xs, ws, attrs, with_b, with_z", CASES + [
    ((1, 192, 56, 56), (192, 192, 1, 1), {"activation": "Clip", "activation_params": [0.0, 6.0]}, True, True),
    ((1, 640, 7, 7), (1280, 640, 1, 1), {}, True, False),
    ((4, 96, 112, 112), (96, 1, 3, 3), {"group": 96, "pads": [1, 1, 1, 1], "strides": [2, 2]}, True, False)])
def test_bound_compute_on_several_threads(rng, threads, xs, ws, attrs, with_b, with_z):
    """On more threads the bound call's compute is conv_serial's (the same drivers through
    ftile.run_sharded / dwtile.run, arguments bound once): bit-equal to ``execute``, close to the
    reference, a second call (constants bound) too."""
    if ws[1] == 1 and not dwtile.enabled():
        pytest.skip("no AVX-512 window tiles on this CPU")
    x, w, b, z = _case(rng, xs, ws, attrs, with_b, with_z)
    k = _kernel(x, w, b, z, attrs, threads=threads)
    assert _path(ws).replace("NumbaKernel.bind", "Conv.compute") in k.bound_compute().__qualname__
    call = k.bind(None)
    inputs = _inputs(x, w, b, z)
    want = k.execute(*inputs)
    for _ in range(2):
        np.testing.assert_array_equal(call(*inputs), want)
    assert_close(want, run_single_op("Conv", inputs, attrs, vendors=["reference"])[0])


def test_a_bad_switch_raises_at_the_call_as_before(rng, monkeypatch):
    """A bad KERNELKIT_F32_GEMM / KERNELKIT_F32_DEPTHWISE value at bind time leaves the node on the
    general path, which raises the ConfigError at the call (not while the session binds)."""
    from kernelkit.errors import ConfigError

    for env, ws, attrs in [(ftile.ENV, (8, 8, 1, 1), {}),
                           (dwtile.ENV, (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]})]:
        monkeypatch.setenv(env, "bogus")
        x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
        w = _ro(rng.standard_normal(ws).astype(np.float32))
        k = _kernel(x, w, None, None, attrs)
        call = k.bind(None)
        with pytest.raises(ConfigError):
            call(x, w)
        monkeypatch.delenv(env)


# (x shape, weight shape, attrs, with bias, with z): 1x1 layers whose output channels are not a multiple of the cols
# tiles' lanes, on cols tiles for the channels down to a multiple of the lanes and one rows panel for the rest
# (conv_serial.cols_tail): RegNetY's 440 -> 440 at 7x7 (bias + Relu, and with a residual), its 208 -> 440 1x1/2
# shortcut from 14x14, a single full cols panel ahead of the tail (56 = 48 + 8), a map whose last cols tile is
# partial (5x5: 25 = 3 x 7 + 4), K past one COLS_KC chunk (K = 600), batch 2, tails of 4 and 12 (more than
# one rows panel on avx512: no tail)
TAIL_CASES = [
    ((1, 440, 7, 7), (440, 440, 1, 1), {"activation": "Relu"}, True, False),
    ((1, 440, 7, 7), (440, 440, 1, 1), {}, True, True),
    ((1, 208, 14, 14), (440, 208, 1, 1), {"strides": [2, 2]}, True, False),
    ((2, 128, 3, 4), (56, 128, 1, 1), {"activation": "Clip", "activation_params": [0.0, 6.0]}, True, True),
    ((1, 136, 5, 5), (136, 136, 1, 1), {}, False, False),
    ((1, 600, 7, 7), (200, 600, 1, 1), {"activation": "Relu"}, True, True),
    ((1, 128, 7, 7), (52, 128, 1, 1), {}, True, True),  # a tail of 4 on both variants
    ((1, 160, 6, 6), (444, 160, 1, 1), {"activation": "Relu"}, True, False),  # avx2: 4; avx512: 12, no tail
]


@needs_tiles
@pytest.mark.parametrize("variant", ["auto", "avx2"])
@pytest.mark.parametrize("xs, ws, attrs, with_b, with_z", TAIL_CASES)
def test_cols_tiles_with_a_rows_tail(rng, monkeypatch, variant, xs, ws, attrs, with_b, with_z):
    """A one-thread 1x1 layer with a tail of channels (cols_tail): bound to ``_tail_call``, close to the
    reference and the general path (the rows tiles over every channel; bit for bit without a residual: each
    output is the same chain of FMAs over K); a second call reuses the bound constants, a new constant packs
    its tail again; COLS_TAIL off binds the old tiles call, and two threads never take it."""
    from kernelkit_numba.kernels import conv_serial

    if variant != "auto":
        if not ftile.available(variant):
            pytest.skip(f"no {variant} on this CPU")
        monkeypatch.setenv(ftile.ENV, variant)
    kind = ftile.choice()[0]
    if kind not in ftile.COLS_LANES:
        pytest.skip("no cols tiles for this variant")
    x, w, b, z = _case(rng, xs, ws, attrs, with_b, with_z)
    inputs = _inputs(x, w, b, z)
    ref = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
    lanes = ftile.COLS_LANES[kind]
    tail = conv_serial.cols_tail(kind, ws[0], ref.shape[2] * ref.shape[3], ws[1], True)
    assert tail == (ws[0] % lanes if ws[0] % lanes <= ftile.MR[kind] else 0)
    k = _kernel(x, w, b, z, attrs)
    call = k.bind(None)
    assert ("_tail_call" in call.__qualname__) == bool(tail)
    want = k.execute(*inputs)
    for _ in range(2):
        out = np.full(want.shape, np.nan, np.float32)
        assert call(*inputs, out=out) is out
        assert_close(out, ref)
        assert_close(out, want)
        if z is None:  # the same chain of FMAs over K, then the bias (the tiles add a residual in their own order)
            np.testing.assert_array_equal(out, want)
    w2 = _ro(rng.standard_normal(ws).astype(np.float32))  # another constant: both packings made again
    inputs2 = _inputs(x, w2, b, z)
    assert_close(call(*inputs2), run_single_op("Conv", inputs2, attrs, vendors=["reference"])[0])
    monkeypatch.setattr(conv_serial, "COLS_TAIL", False)
    old = _kernel(x, w, b, z, attrs).bind(None)
    assert "_tiles_call" in old.__qualname__ and "_tail_call" not in old.__qualname__
    assert_close(old(*inputs), ref)
    monkeypatch.setattr(conv_serial, "COLS_TAIL", True)
    assert "_tail_call" not in _kernel(x, w, b, z, attrs, threads=2).bound_compute().__qualname__


def test_cols_tail_rule(monkeypatch):
    """cols_tail: only at one thread, only a tail of at most one rows panel (MR) past a multiple of the lanes,
    at least one full cols panel ahead of it, and a shape the cols tiles take (ftile_cols: few pixels, K >=
    FTILE_COLS_MIN_K); none for the generic variant or with COLS_TAIL off."""
    from kernelkit_numba.kernels import conv_serial

    k = ftile.KIND["avx512"]
    assert conv_serial.cols_tail(k, 440, 49, 440, True) == 8
    assert conv_serial.cols_tail(k, 440, 49, 440, False) == 0  # a session of more threads
    assert conv_serial.cols_tail(k, 448, 49, 440, True) == 0  # a multiple of the lanes: the cols tiles alone
    assert conv_serial.cols_tail(k, 444, 49, 440, True) == 0  # 12 past 432: more than one 8-row panel
    assert conv_serial.cols_tail(k, 52, 49, 440, True) == 4  # one full panel of 48 ahead of the tail
    assert conv_serial.cols_tail(k, 40, 49, 440, True) == 0  # no full panel of 48 ahead of the tail
    assert conv_serial.cols_tail(k, 440, 784, 440, True) == 0  # a 28x28 map: the rows tiles
    assert conv_serial.cols_tail(k, 440, 49, 64, True) == 0  # K below FTILE_COLS_MIN_K
    assert conv_serial.cols_tail(ftile.KIND["avx2"], 444, 49, 440, True) == 4
    assert conv_serial.cols_tail(0, 440, 49, 440, True) == 0
    monkeypatch.setattr(conv_serial, "COLS_TAIL", False)
    assert conv_serial.cols_tail(k, 440, 49, 440, True) == 0


# ResNet-50's 1x1 layers and a shortcut (issue 11, session 15): the one-thread session's tile choices (the cols tiles
# at 14x14, the 12-row tiles, the cols tiles' K chunk) against the bound parallel call's own at a budget of one
HELD_CASES = [
    ((1, 1024, 14, 14), (256, 1024, 1, 1), {"activation": "Relu"}, True, False),
    ((1, 256, 14, 14), (1024, 256, 1, 1), {"activation": "Relu"}, True, True),
    ((1, 512, 7, 7), (2048, 512, 1, 1), {"activation": "Relu"}, True, True),
    ((1, 64, 56, 56), (256, 64, 1, 1), {}, True, False),
    ((1, 512, 28, 28), (1024, 512, 1, 1), {"strides": [2, 2]}, True, False),
]


@needs_tiles
@pytest.mark.parametrize("xs, ws, attrs, with_b, with_z", HELD_CASES)
def test_a_held_layer_runs_the_one_thread_call(rng, monkeypatch, quiet_server, xs, ws, attrs, with_b, with_z):
    """HELD_ONE_THREAD: a two-thread session's bound 1x1 call at a budget of one thread (the pool backed off), or
    at two with its pair refused (the helper asleep), runs the one-thread session's call of the layer: bit for bit
    its output, close to the reference; no job is published. Off, it runs its own driver, close to the reference."""
    from kernelkit_numba import config
    from kernelkit_numba.kernels import conv_serial, cpair, pairs

    # cpair.K_SOLO off: on (session 17), a refused pair that cuts its K (the 14x14 projection's, K_SPLIT_PARALLEL and
    # COLS_K_SPLIT on since session 17's F1) runs its own halves on the caller, not the one-thread call
    monkeypatch.setattr(cpair, "K_SOLO", False)
    x, w, b, z = _case(rng, xs, ws, attrs, with_b, with_z)
    inputs = _inputs(_ro(x), w, b, None if z is None else _ro(z))
    one = _kernel(x, w, b, z, attrs, threads=1).bind(None)(*inputs)
    ref = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
    call = conv_serial.bound_compute(_kernel(x, w, b, z, attrs, threads=2))
    monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", False)

    def at(threads):
        was = getattr(config._local, "threads", None)
        config._local.threads = threads
        try:
            return call(*inputs, out=np.full(one.shape, np.nan, np.float32))
        finally:
            config._local.threads = was

    assert_close(at(1), ref)  # off: the parallel call's own driver at one thread
    monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", True)
    for _ in range(2):  # (bound at the first)
        np.testing.assert_array_equal(at(1), one)
    np.testing.assert_array_equal(at(2), one)  # the pair refused: the helper asleep
    assert quiet_server.ctl[pairs.JOB] == 0
    assert_close(one, ref)


def _held_at_one(call, inputs, shape):
    """``call`` (a bound parallel call) at a budget of one thread (the pool backed off), into a fresh output."""
    from kernelkit_numba import config

    was = getattr(config._local, "threads", None)
    config._local.threads = 1
    try:
        return call(*inputs, out=np.full(shape, np.nan, np.float32))
    finally:
        config._local.threads = was


def _held_layer(rng, case=1):
    """ResNet-50's 256 -> 1024 14x14 layer of HELD_CASES (whose one-thread call differs from the parallel call's own
    driver in the last bits): its inputs, numba 1t's output, and a two-thread kernel of a tiered start."""
    xs, ws, attrs, with_b, with_z = HELD_CASES[case]
    x, w, b, z = _case(rng, xs, ws, attrs, with_b, with_z)
    inputs = _inputs(_ro(x), w, b, None if z is None else _ro(z))
    one = _kernel(x, w, b, z, attrs, threads=1).bind(None)(*inputs)
    return inputs, one, _kernel(x, w, b, z, attrs, threads=2, options={"numba_start": "tiered"})


@needs_tiles
def test_a_tiered_held_layer_binds_in_the_background(rng, monkeypatch, quiet_server):
    """HELD_ONE_THREAD under a tiered start: the first held call does not bind the one-thread call on the calling
    thread (the bind runs on the background thread, held there by an event of the test's) and runs the layer's own
    driver meanwhile, bit for bit the call with the switch off; once the bind ended, calls run numba 1t's call, bit
    for bit."""
    from kernelkit_numba import tiered
    from kernelkit_numba.kernels import conv_serial, pairs

    # the layer's own driver on the rows tiles (PAIR_COLS_MAX 0): 196, the default since session 17's F1, gives it the
    # cols tiles of cpair.COLS_WHOLE, bit for bit the one-thread call, which this test could not tell apart
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", 0)
    inputs, one, conv = _held_layer(rng)
    call = conv_serial.bound_compute(conv)
    monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", False)
    own = _held_at_one(call, inputs, one.shape)  # off
    assert not np.array_equal(own, one)  # (so that the bit-for-bit checks below tell the two calls apart)
    threads, go, me = [], threading.Event(), threading.current_thread()
    bind = conv_serial._one_thread_call

    def held_bind(c, step):
        threads.append(threading.current_thread())
        assert threads[-1] is me or go.wait(60)
        return bind(c, step)

    monkeypatch.setattr(conv_serial, "_one_thread_call", held_bind)
    monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", True)
    try:
        np.testing.assert_array_equal(_held_at_one(call, inputs, one.shape), own)  # asked: the bind queued
        np.testing.assert_array_equal(_held_at_one(call, inputs, one.shape), own)  # pending: its own driver again
    finally:
        go.set()
    assert tiered.wait(60)
    assert len(threads) == 1 and threads[0] is not me and threads[0].daemon
    for _ in range(2):
        np.testing.assert_array_equal(_held_at_one(call, inputs, one.shape), one)
    assert len(threads) == 1
    assert quiet_server.ctl[pairs.JOB] == 0


def _fails_to_bind(c, step):
    raise RuntimeError("no bind")


def _fails_to_run(c, step):
    def run(*args, out=None):
        raise RuntimeError("no run")

    return run


@needs_tiles
@pytest.mark.parametrize("fake", [_fails_to_bind, _fails_to_run])
def test_a_failed_background_bind_keeps_the_own_call(rng, monkeypatch, quiet_server, fake):
    """An error in the background bind (binding, or its first run there) leaves the layer on its own driver (bit for
    bit the call with the switch off) and gives one KernelkitWarning at the next held call, not an error."""
    from kernelkit.errors import KernelkitWarning
    from kernelkit_numba import tiered
    from kernelkit_numba.kernels import conv_serial

    inputs, one, conv = _held_layer(rng)
    call = conv_serial.bound_compute(conv)
    monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", False)
    own = _held_at_one(call, inputs, one.shape)
    monkeypatch.setattr(conv_serial, "_one_thread_call", fake)
    monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", True)
    go = threading.Event()
    tiered.background(lambda: go.wait(60))  # the thread busy: the bind ends after the first call
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (not yet)
            np.testing.assert_array_equal(_held_at_one(call, inputs, one.shape), own)
    finally:
        go.set()
    assert tiered.wait(60)
    with pytest.warns(KernelkitWarning, match="no bind|no run"):
        np.testing.assert_array_equal(_held_at_one(call, inputs, one.shape), own)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        np.testing.assert_array_equal(_held_at_one(call, inputs, one.shape), own)


@needs_tiles
def test_a_pending_bind_outlives_its_session(rng, monkeypatch, quiet_server):
    """A layer collected while its background bind waits in the queue: the queue does not keep it alive, the bind
    then ends without binding anything, and the background thread goes on (the next job runs)."""
    from kernelkit_numba import tiered
    from kernelkit_numba.kernels import conv_serial

    inputs, one, conv = _held_layer(rng)
    call = conv_serial.bound_compute(conv)
    go, binds = threading.Event(), []
    blocker = tiered.background(lambda: go.wait(60))  # the thread busy: the layer's bind waits in the queue
    monkeypatch.setattr(conv_serial, "_one_thread_call", lambda c, step: binds.append(c))
    monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", True)
    try:
        assert_close(_held_at_one(call, inputs, one.shape), one)
        gone = weakref.ref(conv)
        del conv, call
        gc.collect()
        assert gone() is None
    finally:
        go.set()
    assert tiered.wait(60) and blocker.error is None
    assert binds == []
    ran = []
    tiered.background(lambda: ran.append(1))
    assert tiered.wait(60) and ran == [1]


def test_a_queued_background_job_does_not_hold_the_exit():
    """tiered.background's thread is a daemon: a process whose job never ends still exits at once."""
    code = ("import threading, kernelkit_numba.tiered as t; t.background(threading.Event().wait); "
            "import time; time.sleep(0.2); print('exit')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "exit", done.stderr


def _residual_block(rng, n_n, c_n, m_n, hw, second=False):
    """x -> Relu -> 1x1 Conv (m_n) -> a; x -> 1x1 Conv (m_n) -> z; Relu(a' + z) with a' = 1x1 Conv(a) -> 1x1
    Conv -> y: fuse_residual moves the Add into the third Conv, whose residual z dies there; y after it keeps
    that Conv's output in the arena (a graph output never is). ``second``: z has a second reader after that Conv
    (1x1 Conv -> y2, a second graph output), so it does not die there."""
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper, numpy_helper

    def weight(name, m, c):
        return numpy_helper.from_array((rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32), name)

    def bias(name, m):
        return numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), name)

    inits = [weight("w1", m_n, c_n), weight("w2", m_n, c_n), weight("w3", m_n, m_n), weight("w4", 24, m_n),
             bias("b1", m_n), bias("b2", m_n), bias("b3", m_n)]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Conv", ["r", "w1", "b1"], ["a"]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["z"]),
             helper.make_node("Conv", ["a", "w3", "b3"], ["c"]),
             helper.make_node("Add", ["c", "z"], ["d"]),
             helper.make_node("Relu", ["d"], ["e"]),
             helper.make_node("Conv", ["e", "w4"], ["y"])]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n_n, c_n, hw, hw]),
          helper.make_tensor_value_info("y", TensorProto.FLOAT, [n_n, 24, hw, hw])]
    if second:
        nodes.append(helper.make_node("Conv", ["z", "w4"], ["y2"]))
        io.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [n_n, 24, hw, hw]))
    proto = helper.make_model(helper.make_graph(nodes, "block", io[:1], io[1:], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    return convert(proto), rng.standard_normal((n_n, c_n, hw, hw)).astype(np.float32)


@needs_avx512
@pytest.mark.parametrize("n_n,c_n,m_n,hw", [(1, 40, 136, 28), (2, 33, 100, 15), (1, 64, 72, 17)])
def test_residual_in_place_plan(rng, monkeypatch, n_n, c_n, m_n, hw):
    """conv_serial.RESIDUAL_IN_PLACE (issue 11, session 15): in a one-thread session the memory plan writes the
    fused-residual 1x1 Conv's output over its residual (one in-place step more), and the model's output is bit
    for bit the switch's off output and within the reference's tolerance: 12-row panels (136 channels: packed
    pixels) and 8-row (100, 72: in place), odd K, partial tiles (15x15, 17x17), batch 2; at two threads the plan
    keeps them apart (and the output the same)."""
    import kernelkit

    monkeypatch.setenv(ftile.ENV, "avx512")
    model, x = _residual_block(rng, n_n, c_n, m_n, hw)
    want = kernelkit.Session(model, vendors=["reference"]).run(None, {"x": x})[0]
    for threads in (1, 2):
        got, steps = {}, {}
        for on in (False, True):
            monkeypatch.setattr(conv_serial, "RESIDUAL_IN_PLACE", on)
            sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=threads)
            assert sess.passes_fired.get("fuse_residual") == 1
            got[on] = sess.run(None, {"x": x})[0]
            got[on, 2] = sess.run(None, {"x": x})[0]  # the arena's second run: the residual rewritten first
            steps[on] = sess.memory({"x": x.shape})["inplace_steps"]
            assert_close(got[on], want)
        assert steps[True] == steps[False] + (threads == 1), (threads, steps)
        for key in (True, (False, 2), (True, 2)):
            np.testing.assert_array_equal(got[key], got[False])


@needs_avx512
@pytest.mark.parametrize("case", ["rows", "chunks", "cols", "general", "two threads"])
def test_residual_in_place_calls(rng, monkeypatch, case):
    """Every path of a bound 1x1 call with the fused residual handed as its own output (out = z, as the memory
    plan places it under RESIDUAL_IN_PLACE): the serial rows driver of one K chunk in place, K in chunks (the
    earlier chunks' sums would overwrite the residual), the cols tiles (7x7), the general path
    (KERNELKIT_F32_GEMM=off: compute) and two threads take a copy of it first; each bit for bit the call with
    its own output and within the reference's tolerance; residual_over's answer for the case."""
    monkeypatch.setenv(ftile.ENV, "off" if case == "general" else "avx512")
    hw, m_n, k_n = (7, 128, 256) if case == "cols" else (15, 100, 70)
    if case == "chunks":
        monkeypatch.setattr(ftile, "KC", 32)
        monkeypatch.setattr(ftile, "KC12", 32)
    monkeypatch.setattr(conv_serial, "RESIDUAL_IN_PLACE", True)
    x = rng.standard_normal((1, k_n, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((m_n, k_n, 1, 1)) / np.sqrt(k_n)).astype(np.float32)
    b = rng.standard_normal(m_n).astype(np.float32)
    z = rng.standard_normal((1, m_n, hw, hw)).astype(np.float32)
    attrs = {"activation": "Relu"}
    k = _kernel(x, w, b, z, attrs, threads=2 if case == "two threads" else 1)
    specs = [TensorSpec(a.shape, "float32") for a in (x, w, b, z)]
    assert (k.output_over_input(specs) == 3) == (case == "rows"), case
    call = k.bind(None) if case != "general" else (lambda *a, out=None: k.execute(*a, out=out))
    inputs = [_ro(x), _ro(w), _ro(b), _ro(z)]
    ref = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    for _ in range(2):  # the first call binds the constants, the second reuses them
        apart = call(*inputs, out=np.empty_like(z))
        over = z.copy()
        got = call(inputs[0], inputs[1], inputs[2], over, out=over)
        assert got is over
        np.testing.assert_array_equal(got, apart)
        assert_close(got, ref)


@needs_avx512
@pytest.mark.parametrize("n_n,c_n,m_n,hw,second", [
    (1, 40, 136, 28, False), (2, 33, 100, 15, False), (1, 64, 72, 17, False), (1, 48, 128, 7, False),
    (1, 40, 128, 14, False), (2, 64, 144, 7, False), (1, 40, 136, 28, True), (1, 48, 128, 7, True)])
def test_residual_in_place_beyond(rng, monkeypatch, n_n, c_n, m_n, hw, second):
    """conv_serial.RESIDUAL_PARALLEL and RESIDUAL_COLS (issue 11, session 16): with both on, the memory plan writes
    the fused-residual 1x1 Conv's output over its residual at one and two threads, on the rows tiles (136, 100 and
    72 channels at 28x28, 15x15, 17x17: 12- and 8-row panels, odd K, batch 2) and on the cols tiles (7x7 and
    14x14, 7x7 at batch 2), one in-place step more than with both off, no call copying the residual first; the
    output bit for bit the switches' off output, on the arena's second run too (the residual rewritten first), and
    within the reference's tolerance. A residual with a second reader after the Conv (``second``) is never written
    over: the steps the same as off."""
    monkeypatch.setenv(ftile.ENV, "avx512")
    model, x = _residual_block(rng, n_n, c_n, m_n, hw, second)
    steps = _in_place_ab(monkeypatch, model, x, ("RESIDUAL_PARALLEL", "RESIDUAL_COLS"))
    for threads, (off, on) in steps.items():
        assert on == off + (not second and (threads == 2 or hw <= 14)), (threads, steps)


def _in_place_ab(monkeypatch, model, x, switches) -> dict:
    """The residual switches' A/B for a model of one input ``x``: at one and two threads, a session with conv_serial's
    ``switches`` off, then on, each run twice (the arena's second run: the residual rewritten first), each output
    within the reference's tolerance, no call copying a residual the plan placed under its output, and every run bit
    for bit the switches' off first run. Gives {threads: (in-place steps off, on)}."""
    import kernelkit

    # (a back-off keeps the two-thread kernels: a load-triggered back-off between the sessions otherwise changes the
    # last bits whatever the switches, docs/numba.md "The first run's bits at two threads")
    monkeypatch.setattr(config, "KEEP_BUDGET", True)
    want = kernelkit.Session(model, vendors=["reference"]).run(None, {"x": x})
    steps = {}
    for threads in (1, 2):
        got, placed = {}, {}
        for on in (False, True):
            for name in switches:
                monkeypatch.setattr(conv_serial, name, on)
            sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=threads)
            assert sess.passes_fired.get("fuse_residual") == 1
            copies = conv_serial._copies[0]
            got[on] = sess.run(None, {"x": x})
            got[on, 2] = sess.run(None, {"x": x})
            assert conv_serial._copies[0] == copies, (threads, on)  # (a plan's residual the call copied first)
            placed[on] = sess.memory({"x": x.shape})["inplace_steps"]
            for a, b in zip(got[on], want):
                assert_close(a, b)
        for key in (True, (False, 2), (True, 2)):
            for a, b in zip(got[key], got[False]):
                np.testing.assert_array_equal(a, b)
        steps[threads] = (placed[False], placed[True])
    return steps


@needs_avx512
@pytest.mark.parametrize("case", ["rows", "chunks", "cols", "cols chunks", "pool", "pair", "pair cols",
                                  "batch pair", "held", "k split", "cols k split", "general"])
def test_residual_in_place_calls_parallel(rng, monkeypatch, quiet_server, case):
    """A two-thread bound 1x1 call handed the fused residual as its own output (out = z, as the memory plan places
    it under RESIDUAL_PARALLEL): the pair's halves (the caller running both: the helper never comes) by channels on
    the rows tiles, on the cols tiles (7x7) and by images (batch 2), the pool's shards (rnpair.ON off), the
    refused pair's call on the caller (rows, cols), at a budget of one thread (HELD_ONE_THREAD: the one-thread
    call, once bound; the shards meanwhile), in place (the cols tiles with K in chunks too: their sums apart); K in
    chunks on the rows tiles, a serial pair whose sides cut K (cpair.K_SPLIT: side 0's partial sums go into the
    output before the residual is added), the bound pair's cols halves cutting K (cpair.COLS_K_SPLIT, on by
    default; off in the other cols cases, whose 160 -> 144 it would cut) and the general path
    (KERNELKIT_F32_GEMM=off) copy it first. Each bit for
    bit the call with its own output and within the reference's tolerance; residual_over's answer with both
    switches on; the helper's half run by hand over the residual writes its part only, equal to it."""
    from _conv_layers import _at
    from kernelkit_numba import config
    from kernelkit_numba.kernels import cpair, fpair, pairs, rnpair
    from test_rnpair import _cpair_of

    monkeypatch.setenv(ftile.ENV, "off" if case == "general" else "avx512")
    monkeypatch.setattr(conv_serial, "RESIDUAL_PARALLEL", True)
    monkeypatch.setattr(conv_serial, "RESIDUAL_COLS", True)
    cols = "cols" in case
    n_n = 2 if case == "batch pair" else 1
    hw, m_n, k_n = (7, 144, 160) if cols else (15, 136, 70)
    if "chunks" in case:
        monkeypatch.setattr(ftile, "KC", 32)
        monkeypatch.setattr(ftile, "COLS_KC", 32)
    if case == "pool":
        monkeypatch.setattr(rnpair, "ON", False)
    if case == "held":
        monkeypatch.setattr(conv_serial, "HELD_ONE_THREAD", True)
    if case == "k split":  # (a projection: 256 -> 64 at 14x14, a serial call of a two-thread session)
        monkeypatch.setattr(cpair, "K_SPLIT", 196)
        hw, m_n, k_n = 14, 64, 256
    if cols and case != "cols k split":  # (the cols halves' K cut off: 160 -> 144 at 7x7 is a projection)
        monkeypatch.setattr(cpair, "COLS_K_SPLIT", False)
    budget = 1 if case == "held" else 2
    x = rng.standard_normal((n_n, k_n, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((m_n, k_n, 1, 1)) / np.sqrt(k_n)).astype(np.float32)
    b = rng.standard_normal(m_n).astype(np.float32)
    z = rng.standard_normal((n_n, m_n, hw, hw)).astype(np.float32)
    attrs = {"activation": "Relu"}
    k = _kernel(x, w, b, z, attrs, threads=2)
    specs = [TensorSpec(a.shape, "float32") for a in (x, w, b, z)]
    assert (k.output_over_input(specs) == 3) == (case not in ("chunks", "general")), case
    fn = conv_serial.serial_call(k, None) if case == "k split" else conv_serial.bound_compute(k)
    pair = _cpair_of(fn)
    paired = case in ("pair", "pair cols", "batch pair", "k split", "cols k split")
    if case != "general":
        assert pair is not None and pair.desc[cpair.OP] == (cpair.COLS if cols else cpair.ROWS)
        assert (pair.desc[cpair.KS_CUT] > 0) == case.endswith("k split")
    srv = quiet_server
    inputs = [_ro(x), _ro(w), _ro(b), _ro(z)]
    ref = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    for _ in range(3):  # the first call binds the constants (and the held call), the next reuse them
        srv.ctl[pairs.AWAKE] = int(paired)  # (asleep: the pair refused, the caller's one-thread driver)
        srv._misses = srv._recent = 0
        alone = srv.stats["alone"]
        apart = _at(budget, fn, inputs, z.shape)
        over = z.copy()
        copies = conv_serial._copies[0]
        with config.num_threads(budget):
            got = fn(inputs[0], inputs[1], inputs[2], _ro_view(over), out=over)
        assert got is over
        assert conv_serial._copies[0] - copies == (case in ("chunks", "k split", "cols k split", "general")), case
        assert srv.stats["alone"] - alone == 2 * paired  # (both calls' halves on the caller)
        np.testing.assert_array_equal(got, apart)
        assert_close(got, ref)
    if paired and n_n == 1 and not case.endswith("k split"):  # the helper's half by hand over a fresh residual:
        # its part written, the rest z's
        y = z.copy()
        desc = pair.desc
        desc[cpair.YA] = desc[cpair.ZA] = y.ctypes.data
        srv.ctl[pairs.DESC] = desc.ctypes.data
        srv.ctl[pairs.STATE] = 9 * 4 + pairs.OPEN
        assert fpair.pair_serve(srv.ctl, 1 << 22, 1 << 40) == 0
        mine = y != z
        assert mine.any() and not mine.all()
        np.testing.assert_array_equal(y[mine], apart[mine])


def _ro_view(a):
    """A read-only view of ``a`` (the residual as the session hands it: the same memory as the output)."""
    v = a.view()
    v.setflags(write=False)
    return v


def _wino_block(rng, n_n, c_n, hw):
    """ResNet-18's basic block, small: x -> 3x3 Conv (c_n) -> Relu -> a; Relu(3x3 Conv(a) + x) -> 1x1 Conv -> y:
    fuse_residual moves the Add into the second 3x3 Conv, whose residual (the block's input, a 1x1 Conv's output
    here so that it is an arena value, not the graph input) dies there."""
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper, numpy_helper

    def weight(name, m, c, k):
        return numpy_helper.from_array((rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32),
                                       name)

    inits = [weight("w0", c_n, c_n, 1), weight("w1", c_n, c_n, 3), weight("w2", c_n, c_n, 3),
             weight("w3", 16, c_n, 1), numpy_helper.from_array(rng.standard_normal(c_n).astype(np.float32), "b2")]
    pads = {"pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["z"]),
             helper.make_node("Conv", ["z", "w1"], ["c"], **pads),
             helper.make_node("Relu", ["c"], ["a"]),
             helper.make_node("Conv", ["a", "w2", "b2"], ["d"], **pads),
             helper.make_node("Add", ["d", "z"], ["e"]),
             helper.make_node("Relu", ["e"], ["f"]),
             helper.make_node("Conv", ["f", "w3"], ["y"])]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n_n, c_n, hw, hw]),
          helper.make_tensor_value_info("y", TensorProto.FLOAT, [n_n, 16, hw, hw])]
    proto = helper.make_model(helper.make_graph(nodes, "block", io[:1], io[1:], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    return convert(proto), rng.standard_normal((n_n, c_n, hw, hw)).astype(np.float32)


@needs_avx512
@pytest.mark.parametrize("n_n,c_n,hw,wino", [(1, 64, 28, 4), (1, 64, 30, 4), (1, 128, 14, 2), (2, 32, 14, 4),
                                              (1, 64, 7, 0)])
def test_residual_in_place_wino(rng, monkeypatch, n_n, c_n, hw, wino):
    """conv_serial.RESIDUAL_WINO (issue 11, session 16): the fused-residual 3x3 Conv of a basic block writes its
    output over its residual at one and two threads (with RESIDUAL_PARALLEL: rnpair's Winograd pairs) on F(4x4)
    (28x28, 30x30: partial tiles, batch 2) and F(2x2) (128 channels at 14x14): one in-place step more than with
    the switches off, no residual copied first; the 7x7 layer (fdirect's direct convolution) keeps them apart. The
    output bit for bit the switches' off output, on the arena's second run too, within the reference's tolerance."""
    monkeypatch.setenv(ftile.ENV, "avx512")
    model, x = _wino_block(rng, n_n, c_n, hw)
    steps = _in_place_ab(monkeypatch, model, x, ("RESIDUAL_PARALLEL", "RESIDUAL_WINO"))
    for threads, (off, on) in steps.items():
        assert on == off + bool(wino), (threads, steps)


@needs_avx512
@pytest.mark.parametrize("hw,c_n", [(28, 64), (14, 128), (7, 64)])
def test_residual_in_place_wino_pair(rng, monkeypatch, quiet_server, hw, c_n):
    """A two-thread bound 3x3 call handed the fused residual as its own output: rnpair's F(4x4) pair (28x28) and
    F(2x2) pair (14x14), the caller running both halves (the helper never comes), in place; its direct pair
    (7x7) and the general path (the pair refused: Conv.compute) copy it first where they are not Winograd. Each
    bit for bit the call with its own output, within the reference's tolerance; wino_over's answer."""
    from _conv_layers import _at
    from kernelkit_numba import config
    from kernelkit_numba.kernels import pairs, rnpair
    from test_rnpair import _pair_of

    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(conv_serial, "RESIDUAL_PARALLEL", True)
    monkeypatch.setattr(conv_serial, "RESIDUAL_WINO", True)
    x = rng.standard_normal((1, c_n, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((c_n, c_n, 3, 3)) / np.sqrt(9 * c_n)).astype(np.float32)
    b = rng.standard_normal(c_n).astype(np.float32)
    z = rng.standard_normal((1, c_n, hw, hw)).astype(np.float32)
    attrs = {"activation": "Relu", "pads": [1, 1, 1, 1]}
    k = _kernel(x, w, b, z, attrs, threads=2)
    specs = [TensorSpec(a.shape, "float32") for a in (x, w, b, z)]
    assert (k.output_over_input(specs) == 3) == (hw != 7)
    fn = conv_serial.bound_compute(k)
    pair = _pair_of(fn)
    assert pair is not None and pair.desc[rnpair.OP] == {28: rnpair.OP_WINO, 14: rnpair.OP_WINO2,
                                                         7: rnpair.OP_DIRECT}[hw]
    srv = quiet_server
    inputs = [_ro(x), _ro(w), _ro(b), _ro(z)]
    ref = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    for awake in (1, 0, 1):  # the pair (the caller alone), refused (the helper asleep: Conv.compute), the pair
        srv.ctl[pairs.AWAKE] = awake
        srv._misses = srv._recent = 0
        apart = _at(2, fn, inputs, z.shape)
        over = z.copy()
        v = over.view()
        v.setflags(write=False)
        copies = conv_serial._copies[0]
        with config.num_threads(2):
            got = fn(inputs[0], inputs[1], inputs[2], v, out=over)
        assert got is over
        assert conv_serial._copies[0] - copies == (hw == 7), awake
        np.testing.assert_array_equal(got, apart)
        assert_close(got, ref)


@needs_avx512
@pytest.mark.parametrize("k,hw", [(1, 28), (1, 7), (3, 28)])
def test_residual_in_place_graph_input(rng, monkeypatch, k, hw):
    """With every residual switch on, a fused-residual Conv whose residual is the graph input (the caller's array)
    and whose output is the graph output never writes over either: no in-place step, the caller's input unchanged
    after two runs, the output bit for bit the switches' off output; at one and two threads, 1x1 (rows and cols
    tiles) and 3x3 (Winograd)."""
    import kernelkit
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper, numpy_helper

    monkeypatch.setenv(ftile.ENV, "avx512")
    c_n = 128
    w = numpy_helper.from_array((rng.standard_normal((c_n, c_n, k, k)) / np.sqrt(c_n * k * k)).astype(np.float32),
                                "w")
    pads = {"pads": [k // 2] * 4}
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Conv", ["r", "w"], ["c"], **pads),
             helper.make_node("Add", ["c", "x"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c_n, hw, hw]) for n in ("x", "y")]
    model = convert(helper.make_model(helper.make_graph(nodes, "g", io[:1], io[1:], [w]),
                                      opset_imports=[helper.make_opsetid("", 17)]))
    x = rng.standard_normal((1, c_n, hw, hw)).astype(np.float32)
    kept = x.copy()
    monkeypatch.setattr(config, "KEEP_BUDGET", True)  # (as _in_place_ab: bits apart from the pool's back-offs)
    want = kernelkit.Session(model, vendors=["reference"]).run(None, {"x": x})[0]
    for threads in (1, 2):
        got = {}
        for on in (False, True):
            for name in ("RESIDUAL_PARALLEL", "RESIDUAL_COLS", "RESIDUAL_WINO"):
                monkeypatch.setattr(conv_serial, name, on)
            sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=threads)
            assert sess.passes_fired.get("fuse_residual") == 1
            got[on] = [sess.run(None, {"x": x})[0] for _ in range(2)]
            assert sess.memory({"x": x.shape})["inplace_steps"] == 0
            np.testing.assert_array_equal(x, kept)
            assert_close(got[on][0], want)
        for a in got[True] + got[False][1:]:
            np.testing.assert_array_equal(a, got[False][0])


# (x shape, weight shape, attrs, with bias, with z, the bound call): conv_serial.BOUND_3X3_ONE_THREAD's layers (issue
# 11, session 17): F(4x4) by tiles on ftile's products (Relu) and on BLAS (16 input channels), F(2x2) (a 14x14 map; a
# 28x28 one with a finite clamp, which F(4x4) leaves), fdirect's 3x3/2 (rows of 14) and its 3x3 on a 7x7 map
WINO_DIRECT = [
    ((1, 48, 28, 28), (64, 48, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}, True, True, "_wino_one"),
    ((1, 16, 28, 28), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}, False, False, "_wino_one"),
    ((1, 64, 14, 14), (80, 64, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}, False, True, "_wino_one"),
    ((1, 40, 28, 28), (48, 40, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Clip", "activation_params": [0.0, 6.0]},
     True, False, "_wino_one"),
    ((1, 40, 28, 28), (80, 40, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "activation": "Relu"}, True, True,
     "_direct_one"),
    ((1, 64, 7, 7), (64, 64, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}, True, True, "_direct_one"),
]


@needs_avx512
@pytest.mark.parametrize("xs, ws, attrs, with_b, with_z, path", WINO_DIRECT)
def test_one_thread_3x3_bound_matches_the_general_path(rng, monkeypatch, xs, ws, attrs, with_b, with_z, path):
    """conv_serial.BOUND_3X3_ONE_THREAD (issue 11, session 17): a one-thread session's Winograd and fdirect layers bind
    their general path's compiled calls; the bound call's output is bit for bit the general path's (Conv.compute, run
    first), twice (the constants bound, then reused), into an output and allocated, and within the tolerance of the
    reference; the general path not called. Off: the general path's call."""
    monkeypatch.setenv(ftile.ENV, "avx512")
    x, w, b, z = _case(rng, xs, ws, attrs, with_b, with_z)
    inputs = _inputs(x, w, b, z)
    k = _kernel(x, w, b, z, attrs)
    assert "NumbaKernel.bind" in k.bind(None).__qualname__
    monkeypatch.setattr(conv_serial, "BOUND_3X3_ONE_THREAD", True)
    k = _kernel(x, w, b, z, attrs)
    call = k.bind(None)
    assert path in call.__qualname__
    want = k.execute(*inputs)
    ref = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
    assert_close(want, ref)
    general = []
    run = k.run
    monkeypatch.setattr(k, "run", lambda inputs, out: general.append(1) or run(inputs, out))
    for _ in range(2):
        out = np.full(want.shape, np.nan, np.float32)
        got = call(*inputs, out=out)
        assert got is out
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(call(*inputs), want)
    assert not general  # (the bound calls ran, not the general path)

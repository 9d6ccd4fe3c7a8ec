"""The AVX-512 window tiles (kernels/dwtile.py): depthwise 3x3 Conv (stride 1, stride 2 by rows and
two output rows to a vector; pads, tails, channel multiplier, batch, bias, residual Z, activations) and MaxPool 3x3
(stride 1 and 2, pads, ceil_mode, NaN and -inf) against the reference through a Session, the Numba
loops they replace with ``KERNELKIT_F32_DEPTHWISE=off``, and 2-thread shards against 1 thread."""
import numpy as np
import pytest
from kernelkit.errors import ConfigError
from kernelkit.testing import run_single_op
from kernelkit_numba import config
from kernelkit_numba.kernels import dwtile

needs_tiles = pytest.mark.skipif(not dwtile.available("avx512"), reason="no AVX-512 on this CPU")

# (map, pads) pairs: MobileNet's maps, 7x7 and maps whose stride-2 output is at most 8 wide (two
# output rows to a vector), odd and tiny
# maps (1, 2, 3 rows or columns), maps wider than one 16-lane chunk with a partial last chunk,
# asymmetric and zero pads
MAPS = [((14, 14), [1, 1, 1, 1]), ((7, 7), [1, 1, 1, 1]), ((8, 5), [1, 1, 1, 1]), ((15, 12), [1, 1, 1, 1]),
        ((1, 1), [1, 1, 1, 1]), ((2, 2), [1, 1, 1, 1]), ((3, 3), [1, 1, 1, 1]), ((1, 9), [1, 1, 1, 1]),
        ((9, 2), [1, 1, 1, 1]), ((5, 37), [1, 1, 1, 1]), ((34, 33), [1, 1, 1, 1]), ((9, 40), [0, 1, 2, 0]),
        ((11, 7), [2, 0, 1, 1]), ((6, 19), [0, 0, 0, 0])]
ACTS = [("Clip", [0.0, 6.0]), ("", []), ("Relu", []), ("Sigmoid", [])]


@pytest.fixture(params=["auto", "off"])
def switch(request, monkeypatch):
    """Each case on the tiles (where this CPU has AVX-512) and on the Numba loops."""
    monkeypatch.setenv(dwtile.ENV, request.param)
    return request.param


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("hw, pads", MAPS)
def test_depthwise_3x3_matches_reference(check, rng, switch, stride, hw, pads):
    for n, c, mult, (act, params) in [(1, 4, 1, ACTS[0]), (2, 3, 2, ACTS[1]), (1, 17, 1, ACTS[2]),
                                      (1, 2, 1, ACTS[3])]:
        x = rng.standard_normal((n, c, *hw)).astype(np.float32)
        w = rng.standard_normal((c * mult, 1, 3, 3)).astype(np.float32)
        b = rng.standard_normal(c * mult).astype(np.float32)
        attrs = {"group": c, "pads": pads, "strides": [stride, stride], "activation": act,
                 "activation_params": params}
        check("Conv", [x, w, b], attrs, constants=(1, 2))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("hw", [(7, 7), (14, 14), (5, 37)])
@pytest.mark.parametrize("act", [("", []), ("Clip", [0.0, 6.0]), ("Tanh", [])])
def test_depthwise_3x3_fused_residual(check, rng, switch, stride, hw, act):
    """The residual Z (pass fuse_residual) added before the activation, in the tile or after it."""
    x = rng.standard_normal((2, 5, *hw)).astype(np.float32)
    w = rng.standard_normal((5, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    attrs = {"group": 5, "pads": [1, 1, 1, 1], "strides": [stride, stride]}
    y = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    z = rng.standard_normal(y.shape).astype(np.float32)
    check("Conv", [x, w, b, z], {**attrs, "activation": act[0], "activation_params": act[1]}, constants=(1, 2))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape, pads, ceil", [((1, 3, 112, 112), [1, 1, 1, 1], 0), ((2, 2, 7, 9), [0, 0, 0, 0], 1),
                                               ((1, 3, 7, 9), [0, 1, 1, 0], 0), ((1, 2, 20, 35), [1, 1, 1, 1], 1),
                                               ((1, 2, 1, 1), [1, 1, 1, 1], 0), ((1, 2, 3, 3), [2, 2, 2, 2], 0),
                                               ((2, 2, 33, 18), [0, 0, 0, 0], 1)])
def test_max_pool_3x3_matches_reference(check, rng, switch, stride, shape, pads, ceil):
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    x[-1, -1, -1, -1] = -np.inf
    attrs = {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": pads, "ceil_mode": ceil}
    check("MaxPool", [x], attrs)


@needs_tiles
def test_tiles_direct_against_numpy(rng):
    """The drivers alone: every plane of a batch written, NaN kept by the clamp, z added."""
    x = rng.standard_normal((2, 6, 9, 21)).astype(np.float32)
    x[1, 2, 4, 4] = np.nan
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = b[None, :, None, None] + sum(w[None, :, 0, i, j, None, None] * pad[:, :, i:i + 9, j:j + 21]
                                        for i in range(3) for j in range(3))
    z = rng.standard_normal(want.shape).astype(np.float32)
    y = np.full(want.shape, 7.0, np.float32)
    fn, args = dwtile.depthwise(x, w, b, y, z, 1, 1, 1, -1.0, 1.0)
    fn(*args, 0, 12)
    np.testing.assert_allclose(y, np.clip(want + z, -1, 1), rtol=1e-5, atol=1e-5)
    assert np.isnan(y[1, 2, 3:6, 3:6]).all() and np.isfinite(y[1, 2, :2]).all()
    # stride 2 with an 8-wide output: two output rows to a vector, and the same on the rows tile
    pad2 = np.pad(x[:, :, :, :15], ((0, 0), (0, 0), (1, 1), (1, 1)))
    want2 = b[None, :, None, None] + sum(w[None, :, 0, i, j, None, None] * pad2[:, :, i:i + 9:2, j:j + 15:2]
                                         for i in range(3) for j in range(3))
    outs = []
    for pairs in (None, False):
        y2 = np.full(want2.shape, 7.0, np.float32)
        fn, args = dwtile.depthwise(np.ascontiguousarray(x[:, :, :, :15]), w, b, y2, None, 2, 1, 1, -np.inf, np.inf,
                                    pairs=pairs)
        fn(*args, 0, 12)
        outs.append(y2)
    assert want2.shape[3] == 8
    for y2 in outs:
        np.testing.assert_allclose(y2, want2, rtol=1e-5, atol=1e-5)


@needs_tiles
@pytest.mark.parametrize("op", ["dw1", "dw2", "max"])
def test_two_threads_equal_one(rng, op, monkeypatch):
    """Sharded over planes at 2 threads (the work above the serial limit): bit-equal to 1 thread."""
    from kernelkit_numba import shards
    from kernelkit_numba.kernels import cpair

    monkeypatch.setattr(cpair, "BATCH", False)  # the pool's shards (a batch at two threads pairs: test_cpair)

    x = rng.standard_normal((3, 96, 112, 112)).astype(np.float32)
    if op == "max":
        attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
        inputs, consts, name = [x], (), "MaxPool"
    else:
        attrs = {"group": 96, "pads": [1, 1, 1, 1], "strides": [int(op[2])] * 2, "activation": "Clip",
                 "activation_params": [0.0, 6.0]}
        w = rng.standard_normal((96, 1, 3, 3)).astype(np.float32)
        b = rng.standard_normal(96).astype(np.float32)
        inputs, consts, name = [x, w, b], (1, 2), "Conv"
    one = run_single_op(name, inputs, attrs, constants=consts, vendors=["numba"], fallback=False, threads=1)[0]
    shards.POOL.trace = []
    try:
        with config.num_threads(2):
            two = run_single_op(name, inputs, attrs, constants=consts, vendors=["numba"], fallback=False,
                                threads=2)[0]
        assert any(r[1] > 0 for r in shards.POOL.trace)  # a second shard ran: the call was cut
    finally:
        shards.POOL.trace = None
    np.testing.assert_array_equal(one, two)


def test_switch_rejects_bad_values(monkeypatch):
    monkeypatch.setenv(dwtile.ENV, "avx2")
    with pytest.raises(ConfigError):
        dwtile.enabled()
    monkeypatch.setenv(dwtile.ENV, "off")
    assert not dwtile.enabled()
    monkeypatch.setenv(dwtile.ENV, " AUTO ")
    assert dwtile.enabled() == dwtile.available("avx512")

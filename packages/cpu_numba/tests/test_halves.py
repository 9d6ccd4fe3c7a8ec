"""Two shares of a product at two threads (kernels/halves.py): the 1x1 convolutions on ftile's rows
tiles (split by output channels or by pixels) and cols tiles, and fgemm's products (split by column
panels), each as one two-shard job, against the reference / a float64 product, bit-equal to the
sharded path they replace, and the caller's share."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba import config
from kernelkit_numba.kernels import conv, epilogue, fgemm, ftile, halves
from kernelkit_numba.kernels.conv import Conv

needs_tiles = pytest.mark.skipif(ftile.choice()[0] is None, reason="no AVX2/AVX-512 float32 tiles on this CPU")


@pytest.fixture
def shares(monkeypatch):
    """Counts the two-share jobs (halves.run calls); fgemm's products stay on the pool's shares (not
    fpair's compiled hand-over: test_fpair.py)."""
    monkeypatch.setenv("KERNELKIT_F32_PAIR", "off")
    calls = []
    real = halves.run

    def counted(first, second, flops=0.0):
        calls.append(1)
        real(first, second, flops)

    monkeypatch.setattr(halves, "run", counted)
    return calls


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _conv(x, w, b, z, attrs, threads):
    names = ["x", "w", "b", "z"][:3 + (z is not None)]
    k = Conv()
    k.context = KernelContext(Node("Conv", names, ["y"], {}, "n"), None, {}, threads)
    specs = [TensorSpec(x.shape, "float32"), TensorSpec(w.shape, "float32"), TensorSpec(b.shape, "float32")]
    if z is not None:
        specs.append(TensorSpec(z.shape, "float32"))
    k.prepare(specs, attrs)
    return k


def test_caller_parts():
    assert halves.caller_parts(2, 1e12) == 1
    assert halves.caller_parts(18, 1e12) == 9
    assert halves.caller_parts(18, 2e7) == 10  # 0.55 of 18
    assert halves.caller_parts(18, 1e3) == 14  # at most MAX_SHARE (0.75)
    assert halves.caller_parts(3, 1e3) == 2  # the worker keeps one part
    assert halves.usable(2) == halves.ON and not halves.usable(3) and not halves.usable(1)


# 1x1 layers above the serial limit (conv.POINTWISE_FLOPS, lowered to 1.2e7): rows tiles with M not a multiple of 8
# (a partial last panel in the worker's share), a pixel count with a tail tile, the residual; the
# cols tiles at 7x7 with a narrow last panel (320 = 6 x 48 + 32)
CASES = [
    ((1, 192, 56, 56), (196, 192, 1, 1), {"activation": "Clip", "activation_params": [0.0, 6.0]}, True),
    ((1, 96, 58, 58), (200, 96, 1, 1), {"activation": "Relu"}, False),
    ((2, 640, 7, 7), (1280, 640, 1, 1), {}, True),
    ((1, 960, 7, 7), (320, 960, 1, 1), {}, False),
]


@needs_tiles
@pytest.mark.parametrize("axis", ["channels", "pixels"])
@pytest.mark.parametrize("xs, ws, attrs, with_z", CASES)
def test_conv_shares(shares, monkeypatch, axis, xs, ws, attrs, with_z):
    monkeypatch.setattr(halves, "CONV_AXIS", axis)
    monkeypatch.setattr(conv, "POINTWISE_FLOPS", 1.2e7)  # 960 -> 320 at 7x7 (30 MFLOP) on the pool too
    monkeypatch.setattr(halves, "LEAD_FLOPS", 4e7)  # an uneven split: the caller's share larger
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.standard_normal(xs).astype(np.float32)
    w = _ro((rng.standard_normal(ws) / np.sqrt(ws[1])).astype(np.float32))
    b = _ro(rng.standard_normal(ws[0]).astype(np.float32))
    ys = (xs[0], ws[0], xs[2], xs[3])
    z = rng.standard_normal(ys).astype(np.float32) if with_z else None
    inputs = [x, w, b] + ([z] if with_z else [])
    k = _conv(x, w, b, z, attrs, 2)
    call = k.bind(None)
    got = [call(*inputs).copy() for _ in range(2)]
    assert len(shares) == 2 * xs[0]  # one two-share job per image and call
    monkeypatch.setattr(halves, "ON", False)
    off = _conv(x, w, b, z, attrs, 2).bind(None)(*inputs)
    assert len(shares) == 2 * xs[0]
    for y in got:
        np.testing.assert_array_equal(y, off)  # the same tiles, the same sums
    assert_close(got[0], run_single_op("Conv", inputs, attrs, vendors=["reference"])[0])


def _want(a, b, bias, lo, hi):
    return np.clip(a.astype(np.float64) @ b.astype(np.float64) + bias, lo, hi).astype(np.float32)


@needs_tiles
@pytest.mark.parametrize("m, k, n, block_bytes", [(128, 256, 1024, None), (128, 1024, 256, None),
                                                  (53, 70, 99, 1 << 10), (9, 40, 33, None)])
def test_fgemm_shares(shares, monkeypatch, m, k, n, block_bytes):
    """Column-panel shares, several row blocks (BLOCK_BYTES lowered), a partial last panel."""
    kind = ftile.choice()[0]
    if block_bytes:
        monkeypatch.setattr(fgemm, "BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = fgemm.Packed(b, b, kind)
    for lead in (0.0, 1e9):
        monkeypatch.setattr(halves, "LEAD_FLOPS", lead)
        out = np.full((m, n), np.nan, np.float32)
        with config.num_threads(2):
            fgemm.gemm(kind, packed, a, out, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf), 4)
        assert_close(out, _want(a, b, bias, 0, np.inf))
    assert len(shares) == 2
    with config.num_threads(3):  # more threads: the shards as before
        fgemm.gemm(kind, packed, a, out, 1.0, bias)
    assert len(shares) == 2


@needs_tiles
def test_gemm_node_at_two_threads(shares):
    """A Gemm node of the transformer's FFN shape with a fused Relu at two threads, through a session."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 256)).astype(np.float32)
    b = _ro((rng.standard_normal((256, 1024)) / 16).astype(np.float32))
    c = _ro(rng.standard_normal(1024).astype(np.float32))
    got = run_single_op("Gemm", [a, b, c], {}, constants=(1, 2), vendors=["numba"], threads=2)[0]
    want = run_single_op("Gemm", [a, b, c], {}, constants=(1, 2), vendors=["reference"])[0]
    assert_close(got, want)
    assert shares


def test_conv_axis():
    assert halves.conv_axis(576, 196) == "channels"  # 14x14 expansion: weights outweigh the input
    assert halves.conv_axis(144, 3136) == "pixels"  # 56x56
    assert halves.conv_axis(24, 3136) == "pixels"


@needs_tiles
def test_conv_auto_axis_and_a_sleeping_worker(shares, monkeypatch):
    """The default axis on a 14x14 expansion (channels) and a 56x56 one (pixels); with the worker
    asleep both shares run on the caller, no job, the same result."""
    monkeypatch.setattr(conv, "POINTWISE_FLOPS", 1.2e7)
    pool = config._POOL
    rng = np.random.default_rng(3)
    for xs, ws in [((1, 96, 14, 14), (576, 96, 1, 1)), ((1, 24, 56, 56), (144, 24, 1, 1))]:
        x = rng.standard_normal(xs).astype(np.float32)
        w = _ro((rng.standard_normal(ws) / np.sqrt(ws[1])).astype(np.float32))
        b = _ro(rng.standard_normal(ws[0]).astype(np.float32))
        attrs = {"activation": "Clip", "activation_params": [0.0, 6.0]}
        want = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
        call = _conv(x, w, b, None, attrs, 2).bind(None)
        assert_close(call(x, w, b), want)
        asleep, jobs = halves.stats["asleep"], pool.stats["jobs"]
        monkeypatch.setattr(halves, "worker_asleep", lambda: True)
        assert_close(call(x, w, b), want)
        monkeypatch.setattr(halves, "worker_asleep", lambda: False)
        assert pool.stats["jobs"] == jobs and halves.stats["asleep"] == asleep + 1
    assert len(shares) == 4


@needs_tiles
def test_a_large_product_wakes_a_sleeping_worker(shares, monkeypatch):
    """A product of at least halves.WAKE_FLOPS is published although the worker sleeps (its publication
    wakes it: issue 11, session 10), the same result; under it, both shares on the caller, no job."""
    pool = config._POOL
    rng = np.random.default_rng(4)
    xs, ws = (1, 64, 56, 56), (256, 64, 1, 1)  # 103 MFLOP: over conv.POINTWISE_FLOPS, on the pool
    x = rng.standard_normal(xs).astype(np.float32)
    w = _ro((rng.standard_normal(ws) / np.sqrt(ws[1])).astype(np.float32))
    b = _ro(rng.standard_normal(ws[0]).astype(np.float32))
    want = run_single_op("Conv", [x, w, b], {}, vendors=["reference"])[0]
    call = _conv(x, w, b, None, {}, 2).bind(None)
    assert_close(call(x, w, b), want)
    monkeypatch.setattr(halves, "worker_asleep", lambda: True)
    for wake, job in ((1.0e8, 1), (2.0e8, 0), (0.0, 0)):
        monkeypatch.setattr(halves, "WAKE_FLOPS", wake)
        stats, jobs = dict(halves.stats), pool.stats["jobs"]
        assert_close(call(x, w, b), want)
        assert pool.stats["jobs"] == jobs + job
        assert halves.stats["woken"] == stats["woken"] + job and halves.stats["asleep"] == stats["asleep"] + 1 - job
    assert len(shares) == 4


@pytest.mark.parametrize("heads", [4, 3])
def test_attention_in_two_shards(monkeypatch, heads):
    """At two threads a batch-1 Attention node runs its heads as two shards (an odd count: the caller's
    share the larger), against the reference."""
    import kernelkit as kk
    from kernelkit_numba.kernels import tpair

    monkeypatch.setattr(tpair, "ATTENTION", False)  # (at two threads the heads pair on fpair's helper: test_tpair)
    counts = []
    real = config.run_shards
    monkeypatch.setattr(config, "run_shards", lambda fn, count: (counts.append(count), real(fn, count)))
    rng = np.random.default_rng(heads)
    q, k, v = (rng.uniform(-1, 1, (1, 64, heads * 16)).astype(np.float32) for _ in range(3))
    attrs = {"q_num_heads": heads, "kv_num_heads": heads}
    want = kk.testing.run_single_op("Attention", [q, k, v], attrs, vendors=["reference"], fallback=False)[0]
    monkeypatch.setattr(config, "SERIAL_WORK", 0)
    got = kk.testing.run_single_op("Attention", [q, k, v], attrs, vendors=["numba"], fallback=False, threads=2)[0]
    assert_close(got, want)
    assert counts and all(c == 2 for c in counts)


@pytest.mark.parametrize("trans_b, act", [(1, None), (0, "Relu")])
def test_head_gemm_in_two_shares(shares, monkeypatch, trans_b, act):
    """A one-row Gemm with a 1280 x 1000 weight (MobileNetV2's head) at two threads: two shares of
    columns while the worker spins, one call (no job) while it does not, against the reference,
    with and without transB, bias and a fused activation."""
    rng = np.random.default_rng(trans_b)
    a = rng.standard_normal((1, 1280)).astype(np.float32)
    b = _ro((rng.standard_normal((1000, 1280) if trans_b else (1280, 1000)) / 36).astype(np.float32))
    c = _ro(rng.standard_normal(1000).astype(np.float32))
    attrs = {"transB": trans_b, "alpha": 0.5, "beta": 2.0}
    want = run_single_op("Gemm", [a, b, c], attrs, constants=(1, 2), vendors=["reference"])[0]
    if act:
        want = np.maximum(want, 0)
    from kernelkit.invoke import KernelContext as Ctx
    from kernelkit_numba.kernels.gemm import Gemm

    k = Gemm()
    k.context = Ctx(Node("Gemm", ["a", "b", "c"], ["y"], {}, "g"), None, {}, 2)
    k.prepare([TensorSpec(a.shape, "float32"), TensorSpec(b.shape, "float32"), TensorSpec(c.shape, "float32")],
              dict(attrs, **({"activation": act} if act else {})))
    call = k.bind(None)
    monkeypatch.setattr(halves, "worker_spinning", lambda: False)
    assert_close(call(a, b, c), want)
    assert not shares
    monkeypatch.setattr(halves, "worker_spinning", lambda: True)
    for _ in range(2):
        assert_close(call(a, b, c), want)
    assert len(shares) == 2

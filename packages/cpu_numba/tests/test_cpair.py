"""float32 1x1 and depthwise convolutions of a batch-1 image as two halves on two cores
(kernels/cpair.py): the caller alone, the helper's half, a busy slot, the back-off, the switches, and
an inverted-residual block through a two-thread session. The 1x1 halves equal the one-thread path
bit for bit (the same drivers over parts of the output); the depthwise halves run dwtile's plane
drivers compiled inside the pair's code (fast-math reassociation there may round the last bit of a
window's sum differently), so they are checked against the reference within the fp32 tolerances,
and the caller's and the helper's copies of a half bit for bit against each other."""
from __future__ import annotations

import functools
import time
import warnings

import numpy as np
import pytest
from _conv_layers import _graph_conv
from kernelkit import Session
from kernelkit.builder import GraphBuilder
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba.kernels import cpair, dwtile, fpair, ftile, qpair
from kernelkit_numba.kernels.conv import Conv

pytestmark = [pytest.mark.skipif(not qpair.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != cpair.KIND or not dwtile.enabled(),
                                 reason="conv pairs run on the AVX-512 tiles")]

CLIP6 = {"activation": "Clip", "activation_params": [0.0, 6.0]}


def _dw(c, stride=1):
    return {"group": c, "pads": [1, 1, 1, 1], "strides": [stride, stride], **CLIP6}


# (x shape, weight shape, attrs, bias, residual): MobileNetV2's kinds of layer: the 3x3/2 stem (implicit
# GEMM, output channels), expansions on the rows
# tiles (channel halves), projections of 16 and 24 channels (2 panels: channels; 3 panels: pixel
# halves), with the residual, 7x7 layers on the cols tiles (960 = 20 panels of 48; 320 = 7 panels),
# depthwise stride 1 and 2 (the pairs tile at 7-wide outputs), with the residual
LAYERS = [
    ((1, 3, 224, 224), (32, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], **CLIP6}, True, False),
    ((1, 16, 112, 112), (96, 16, 1, 1), CLIP6, True, False),
    ((1, 32, 112, 112), (16, 32, 1, 1), {}, True, False),
    ((1, 144, 56, 56), (24, 144, 1, 1), {}, True, True),
    ((1, 384, 14, 14), (64, 384, 1, 1), {}, False, True),
    ((1, 160, 7, 7), (960, 160, 1, 1), CLIP6, True, False),
    ((1, 960, 7, 7), (320, 960, 1, 1), {}, True, False),
    ((1, 144, 56, 56), (144, 1, 3, 3), _dw(144), True, False),
    ((1, 96, 112, 112), (96, 1, 3, 3), _dw(96, 2), True, False),
    ((1, 576, 14, 14), (576, 1, 3, 3), _dw(576, 2), True, False),
    ((1, 960, 7, 7), (960, 1, 3, 3), {"group": 960, "pads": [1, 1, 1, 1]}, False, True),
]


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _kernel(x, w, b, z, attrs, threads):
    """A prepared numba Conv of these static inputs in a session of ``threads`` (test_conv_serial's)."""
    names = ["x", "w", "b", "z"][:2 + (b is not None or z is not None) + (z is not None)]
    k = Conv()
    k.context = KernelContext(Node("Conv", names, ["y"], {}, "n"), None, {}, threads)
    specs = [TensorSpec(x.shape, "float32"), TensorSpec(w.shape, "float32")]
    if len(names) > 2:
        specs.append(None if b is None else TensorSpec(b.shape, "float32"))
    if z is not None:
        specs.append(TensorSpec(z.shape, "float32"))
    k.prepare(specs, attrs)
    return k


def _inputs(x, w, b, z):
    return [x, w] + ([b] if b is not None or z is not None else []) + ([z] if z is not None else [])


def _out_shape(xs, ws, attrs):
    s = attrs.get("strides", [1, 1])[0]
    return (xs[0], ws[0], (xs[2] - 1) // s + 1, (xs[3] - 1) // s + 1)


@pytest.fixture(autouse=True)
def two_thread_tiles(monkeypatch):
    """The one-thread path on the two-thread sessions' tiles (a 1x1 layer of a 14x14 map takes the cols
    tiles at one thread only: conv.FTILE_COLS_MAX_ONE_THREAD), so that a pair's halves, the one-thread
    driver over parts, equal it bit for bit."""
    from kernelkit_numba.kernels import conv

    monkeypatch.setattr(conv, "FTILE_COLS_MAX_ONE_THREAD", conv.FTILE_COLS_MAX)


def _pool():
    from kernelkit_numba import shards

    return shards.POOL


def _layer(case, seed=0):
    xs, ws, attrs, bias, res = case
    rng = np.random.default_rng(seed)
    x = _ro(rng.standard_normal(xs).astype(np.float32))
    w = _ro(rng.standard_normal(ws).astype(np.float32) * np.float32(0.3))
    b = _ro(rng.standard_normal(ws[0]).astype(np.float32)) if bias or res else None
    z = _ro(rng.standard_normal(_out_shape(xs, ws, attrs)).astype(np.float32)) if res else None
    return x, w, b, z, attrs


def _reference(x, w, b, z, attrs):
    act = attrs.get("activation")
    conv_attrs = {k: v for k, v in attrs.items() if not k.startswith("activation")}
    (y,) = run_single_op("Conv", [x, w] + ([b] if b is not None else []), conv_attrs, vendors=["reference"])
    if z is not None:
        y = y + z
    if act == "Clip":
        y = np.clip(y, *attrs["activation_params"])
    elif act == "Relu":
        y = np.maximum(y, 0)
    return y.astype(np.float32)


def _calls(x, w, b, z, attrs):
    """(one-thread serial call, two-thread serial call and its pair) of the layer."""
    k1, k2 = _kernel(x, w, b, z, attrs, 1), _kernel(x, w, b, z, attrs, 2)
    f1, f2 = k1.serial_call(None), k2.serial_call(None)
    assert f1 is not None and f2 is not None
    return f1, f2


def _run(f, x, w, b, z, shape):
    return f(*_inputs(x, w, b, z), out=np.full(shape, np.nan, np.float32))


# a batch (issue 11, session 11): image halves (an even batch) and channel halves of every image (an odd one):
# an expansion, projections by pixels with the residual and by channels, the cols tiles, depthwise stride 1
# (with the residual) and 2, the stem (even: each side its images' phases; odd: one image a hand-over, the
# helper's half checked on the last image)
BATCH_LAYERS = [
    ((2, 3, 64, 64), (32, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], **CLIP6}, True, False),
    ((3, 3, 64, 64), (32, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], **CLIP6}, True, False),
    ((2, 16, 28, 28), (96, 16, 1, 1), CLIP6, True, False),
    ((3, 144, 28, 28), (24, 144, 1, 1), {}, True, True),
    ((3, 384, 14, 14), (64, 384, 1, 1), {}, True, False),
    ((2, 160, 7, 7), (960, 160, 1, 1), CLIP6, True, False),
    ((3, 960, 7, 7), (320, 960, 1, 1), {}, True, False),
    ((3, 144, 28, 28), (144, 1, 3, 3), _dw(144), True, True),
    ((2, 96, 56, 56), (96, 1, 3, 3), _dw(96, 2), True, False),
]


@pytest.mark.parametrize("case", LAYERS, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}x{c[1][1]}")
def test_caller_alone_and_helper_half(case, quiet_server, monkeypatch):
    """With the helper 'spinning' but never coming the caller claims the second half itself; the
    helper's spin run by hand claims a published job's second half: both halves written, equal to
    each other bit for bit, to the one-thread path bit for bit (1x1) and to the reference (the halves of
    output channels or pixels: K_SPLIT off; its cut: test_cpair_even.py)."""
    monkeypatch.setattr(cpair, "K_SPLIT", 0)
    _check_halves(case, quiet_server)


@pytest.mark.parametrize("case", BATCH_LAYERS, ids=lambda c: f"b{c[0][0]}-{c[0][1]}x{c[0][2]}-{c[1][0]}x{c[1][1]}")
def test_batch_caller_alone_and_helper_half(case, quiet_server):
    """The same for a batch of 2 or 3 images at two threads (cpair.BATCH)."""
    _check_halves(case, quiet_server)


def _last_desc(srv, call):
    """The descriptor of the job the caller published last: an array over the words of ``call``'s pair, which keeps
    ``call`` (and so those words) alive while it lives."""
    words = (np.ctypeslib.ctypes.c_int64 * cpair.NDESC).from_address(int(srv.ctl[qpair.DESC]))
    words.call = call
    return np.ctypeslib.as_array(words)


def _alone(case, srv):
    """(the layer, its output shape, the one-thread path's output, the two-thread call's output with the caller
    alone (the helper 'spinning' but never coming), that call's descriptor: _last_desc)."""
    x, w, b, z, attrs = layer = _layer(case)
    shape = _out_shape(x.shape, w.shape, attrs)
    f1, f2 = _calls(x, w, b, z, attrs)
    want = _run(f1, x, w, b, z, shape)
    srv.ctl[qpair.AWAKE] = 1
    alone = _run(f2, x, w, b, z, shape)
    return layer, shape, want, alone, _last_desc(srv, f2)


def _check_halves(case, srv):
    (x, w, b, z, attrs), shape, want, alone, desc = _alone(case, srv)
    stem = w.shape[1] > 1 and w.shape[2] > 1  # an odd batch's stem: one hand-over an image
    jobs = x.shape[0] if stem and not (cpair.by_images(x.shape[0]) and cpair.IMPLICIT_IMAGES) else 1
    assert srv.stats["alone"] == jobs and srv.stats["paired"] == 0
    assert srv.ctl[qpair.STATE] == jobs * 4 + qpair.TAKEN and srv.ctl[qpair.SLOT] == 0
    assert not np.isnan(alone).any()
    assert_close(alone, _reference(x, w, b, z, attrs), np.float32)
    if w.shape[1] > 1:  # 1x1 and the stem: the one-thread drivers over parts
        np.testing.assert_array_equal(alone, want)
    else:
        assert_close(alone, want, np.float32)
    # the helper's half: the job the caller published last, republished and served on this thread
    if desc[cpair.OP] == cpair.IMPLICIT and not desc[cpair.IMGS]:  # one image a hand-over: the last one
        shape, alone = (1,) + shape[1:], alone[-1:]
    y = np.full(shape, np.nan, np.float32)
    desc[cpair.YA] = y.ctypes.data
    if desc[cpair.DYN]:  # images claimed one at a time: the helper's are the second half's
        desc[cpair.CLAIM] = (int(desc[cpair.DYN]) << 32) | (int(desc[cpair.DYN]) + 1) // 2
    srv.ctl[qpair.STATE] = 9 * 4 + qpair.OPEN
    assert fpair.pair_serve(srv.ctl, 1 << 22, 1 << 40) == 0  # fpair's loop: the half reached by address
    assert srv.ctl[qpair.STATE] == 9 * 4 + qpair.DONE
    written = ~np.isnan(y)
    assert written.any() and not written.all()  # the second half only
    np.testing.assert_array_equal(y[written], alone[written])  # the helper's copy = the caller's


def test_batch_image_stall(quiet_server, monkeypatch):
    """Images claimed one at a time (cpair.DYNAMIC): a paired call that waited past STALL_S plus one of the
    caller's images backs off (IMAGE_STALL), a shorter wait does not; fpair's slack (half the caller's own
    half) lets the longer wait pass."""
    x, w, b, z, attrs = _layer(((4, 16, 28, 28), (96, 16, 1, 1), CLIP6, True, False))
    shape = _out_shape(x.shape, w.shape, attrs)
    f2 = _kernel(x, w, b, z, attrs, 2).serial_call(None)
    pair = next(v for v in map(_contents, f2.__closure__ or ()) if isinstance(v, cpair.Pair))
    if not pair.desc[cpair.DYN]:
        pytest.skip("images claimed in fixed halves (cpair.DYNAMIC off)")
    srv = quiet_server
    srv.ctl[qpair.AWAKE] = 1
    _run(f2, x, w, b, z, shape)  # (the first call: compiled, the entry point looked up)
    own = 1 << 20

    def paired(wait):  # the helper 'ran' the second half; the caller ran all 4 images, waited ``wait``
        def fn(*args):
            srv.ctl[qpair.WAITED], srv.ctl[fpair.OWN] = srv.stall + wait, own
            pair.desc[cpair.CLAIM] = (4 << 32) | 4
            return 1
        return fn

    pair.fn = paired(own // 5)  # under one image (own / 4): no stall
    _run(f2, x, w, b, z, shape)
    assert srv.stats["stalls"] == 0
    pair.fn = paired(own // 3)  # past one image: a stall, a back-off
    _run(f2, x, w, b, z, shape)
    assert srv.stats["stalls"] == 1 and srv.stats["backoffs"] == 1
    srv.until = 0.0
    monkeypatch.setattr(cpair, "IMAGE_STALL", False)
    _run(f2, x, w, b, z, shape)  # fpair's slack (own / 2)
    assert srv.stats["stalls"] == 1


def test_busy_slot_and_back_off(quiet_server):
    """A held slot: the serial path runs (the same result, no job); MISSES unclaimed jobs in a row: a
    back-off, during which the layer runs on the caller without publishing a job."""
    x, w, b, z, attrs = _layer(LAYERS[0])
    shape = _out_shape(x.shape, w.shape, attrs)
    f1, f2 = _calls(x, w, b, z, attrs)
    want = _run(f1, x, w, b, z, shape)
    srv = quiet_server
    srv.ctl[qpair.AWAKE] = 1
    srv.ctl[qpair.SLOT] = 1
    np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), want)
    assert srv.ctl[qpair.JOB] == 0 and srv.stats["alone"] == 0
    srv.ctl[qpair.SLOT] = 0
    for _ in range(qpair.MISSES):
        np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), want)
    assert srv.stats["backoffs"] == 1 and srv.until > time.perf_counter()
    jobs = srv.ctl[qpair.JOB]
    np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), want)
    assert srv.ctl[qpair.JOB] == jobs
    srv.until = 0.0
    srv.ctl[qpair.WAITED] = srv.stall + 1  # a stall: the helper's half came late (cpair's strict rule:
    srv.ctl[fpair.OWN] = 1 << 40  # no slack for the caller's own half, as the conv pairs call it)
    srv.result(1, strict=True)
    assert srv.stats["stalls"] == 1 and srv.until > time.perf_counter()
    srv.until = 0.0
    srv.ctl[qpair.AWAKE] = 0  # asleep: the caller runs alone and asks for a wake-up
    np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), want)
    assert srv.ctl[qpair.JOB] == jobs
    srv.ctl[qpair.AWAKE] = 1
    with pytest.MonkeyPatch.context() as mp:  # the pool's worker spinning (a model with pooled layers)
        mp.setattr(_pool(), "workers_spinning", lambda: True)
        np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), want)
    assert srv.ctl[qpair.JOB] == jobs


def _contents(cell):
    """A closure cell's value (None for an empty one: a name the closure assigns later)."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


def test_switches_and_sizes(monkeypatch):
    """No pair at one thread, for a batch at 3+ threads or with cpair.BATCH off, for layers below MIN_US,
    under KERNELKIT_F32_PAIR=off or KERNELKIT_NUMBA_SPIN_US=0 (the halves' axes with K_SPLIT off)."""
    monkeypatch.setattr(cpair, "K_SPLIT", 0)
    def pair_of(xs, ws, attrs, threads=2):
        x, w, b, z, attrs = _layer((xs, ws, attrs, True, False))
        k = _kernel(x, w, b, z, attrs, threads)
        fn = k.serial_call(None)
        cells = {v for v in map(_contents, fn.__closure__ or ()) if isinstance(v, cpair.Pair)}
        return next(iter(cells), None)

    big = ((1, 16, 112, 112), (96, 16, 1, 1), CLIP6)
    assert pair_of(*big) is not None

    def split(xs, ws):  # the second side's first pixel: 0 for halves of the output channels
        return int(pair_of(xs, ws, {}).desc[cpair.SIDE0 + cpair.SIDE_N + cpair.S_P0])

    assert split((1, 16, 112, 112), (96, 16, 1, 1)) == 0  # an expansion: channels (as the depthwise after it)
    assert split((1, 32, 112, 112), (16, 32, 1, 1)) > 0  # projections on 16+ pixel tiles: pixels
    assert split((1, 192, 28, 28), (32, 192, 1, 1)) > 0
    assert split((1, 384, 14, 14), (64, 384, 1, 1)) == 0  # 7 pixel tiles, 8 panels: channels
    assert split((1, 384, 14, 14), (24, 384, 1, 1)) > 0  # 3 panels: pixels
    assert pair_of(*big, threads=1) is None
    assert pair_of((2, 16, 56, 56), (96, 16, 1, 1), {}) is not None  # a batch at two threads (cpair.BATCH)
    assert pair_of((2, 16, 56, 56), (96, 16, 1, 1), {}, threads=3) is None  # (more threads: the pool)
    images = pair_of((2, 16, 56, 56), (96, 16, 1, 1), {}).desc  # an even batch: image halves
    assert tuple(images[cpair.SIDE0 + cpair.SIDE_N + cpair.S_N0:][:2]) == (1, 2)
    assert images[cpair.DYN] == (2 if cpair.DYNAMIC else 0)  # (claimed one at a time from both ends)
    channels = pair_of((3, 16, 56, 56), (96, 16, 1, 1), {}).desc  # an odd one: channel halves of every image
    assert tuple(channels[cpair.SIDE0 + cpair.SIDE_N + cpair.S_N0:][:2]) == (0, 3)
    monkeypatch.setattr(cpair, "BATCH", False)
    assert pair_of((2, 16, 56, 56), (96, 16, 1, 1), {}) is None
    monkeypatch.setattr(cpair, "BATCH", True)
    assert pair_of((1, 16, 8, 8), (32, 16, 1, 1), {}) is None
    assert pair_of((1, 32, 14, 14), (32, 1, 3, 3), _dw(32)) is None
    monkeypatch.setenv(cpair.ENV, "off")
    assert pair_of(*big) is None
    monkeypatch.delenv(cpair.ENV)
    monkeypatch.setenv("KERNELKIT_NUMBA_SPIN_US", "0")
    assert pair_of(*big) is None


def _block_model(rng, batch=1):
    """An inverted-residual block of MobileNetV2 (24 -> 144 at 56x56, depthwise, 144 -> 24, the
    residual) and its input."""
    g = GraphBuilder("block")
    x = g.input("x", (batch, 24, 56, 56))

    conv = functools.partial(_graph_conv, g, rng)

    e = g.op("Clip", conv(x, 144, 24, 1), g.constant(np.float32(0)), g.constant(np.float32(6)))
    d = g.op("Clip", conv(e, 144, 1, 3, group=144, pads=[1, 1, 1, 1]), g.constant(np.float32(0)),
             g.constant(np.float32(6)))
    p = conv(d, 24, 144, 1)
    g.output(g.op("Add", p, x))
    return g.build(), {"x": rng.standard_normal((batch, 24, 56, 56)).astype(np.float32)}


def test_batch_block_through_a_two_thread_session(monkeypatch, session_pair_calls):
    """A batch of 4 (its 1x1 layers above the serial limit: the pooled bind) at two threads pairs by image
    halves and starts no pool job (the pool's worker not spinning: pair, or the caller alone where the helper
    refuses), equal to the reference and the one-thread run within the fp32 tolerances."""
    rng = np.random.default_rng(7)
    model, feeds = _block_model(rng, batch=4)
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    one = Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    monkeypatch.setattr(_pool(), "workers_spinning", lambda: False)  # (another test's worker may spin or
    monkeypatch.setattr(_pool(), "workers_asleep", lambda: False)  # sleep: a model with pooled layers)
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    tried, jobs = session_pair_calls(sess, feeds, want, one, 15)
    assert tried >= 15 and jobs == 0


def test_block_through_a_two_thread_session(session_pair_calls):
    """The block in a two-thread session pairs its three layers (the helper's thread running) and
    equals the reference within the fp32 tolerances on every run, paired or not."""
    rng = np.random.default_rng(5)
    model, feeds = _block_model(rng)
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    one = Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    assert session_pair_calls(sess, feeds, want, one, 30)[0] >= 30


def _head_model(rng):
    """A MobileNetV2-like tail and its input: a 1x1 expansion, a depthwise 3x3, a 1x1 projection (cpair's
    pairs), then a Gemm head on fgemm's tiles (fpair's pair): the projection's 64 channels as rows
    (a batch-1 head of one row runs on BLAS, fgemm.wins) by 1000 columns."""
    g = GraphBuilder("tail")
    x = g.input("x", (1, 32, 14, 14))

    conv = functools.partial(_graph_conv, g, rng)

    def clip(t):
        return g.op("Clip", t, g.constant(np.float32(0)), g.constant(np.float32(6)))

    e = clip(conv(x, 192, 32, 1))
    d = clip(conv(e, 192, 1, 3, group=192, pads=[1, 1, 1, 1]))
    p = conv(d, 64, 192, 1)
    f = g.op("Reshape", p, g.constant(np.array([64, 196], np.int64)))
    w = g.constant((rng.standard_normal((196, 1000)) * (1 / np.sqrt(196))).astype(np.float32))
    c = g.constant(rng.standard_normal(1000).astype(np.float32) * np.float32(0.1))
    g.output(g.op("Gemm", f, w, c))
    return g.build(), {"x": rng.standard_normal((1, 32, 14, 14)).astype(np.float32)}


def _pair_threads() -> list:
    """The pair helper threads alive now (float32 and int8: one since session 10's second round)."""
    import threading

    return [t for t in threading.enumerate() if "-pair-" in t.name]


def test_convs_and_gemm_head_share_one_helper(monkeypatch):
    """At two threads the conv layers (cpair) and the Gemm head (fgemm, fpair) pair on ONE helper thread
    (fpair's: issue 11, session 10, second round), and the result equals the one-thread run and the
    reference within the fp32 tolerances on every run."""
    if not fpair.enabled():
        pytest.skip("float32 pairs are off in this process")
    rng = np.random.default_rng(11)
    model, feeds = _head_model(rng)
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    gemm_pairs = []
    run = fpair.run

    def counted(desc, a, out):
        done = run(desc, a, out)
        gemm_pairs.append(done)
        return done

    monkeypatch.setattr(fpair, "run", counted)
    with warnings.catch_warnings():  # the Reshape (a view) on the reference kernels
        warnings.simplefilter("ignore")
        sess = Session(model, vendors=["numba"], threads=2)
    srv = fpair.server()
    before = srv.stats["paired"] + srv.stats["alone"]
    deadline = time.perf_counter() + 60
    while True:
        got = sess.run(None, feeds)[0]
        assert_close(got, want, np.float32)
        assert_close(got, one, np.float32)
        tried = srv.stats["paired"] + srv.stats["alone"] - before
        gemm = sum(gemm_pairs)
        if (gemm >= 10 and tried - gemm >= 30) or time.perf_counter() > deadline:
            break
        srv.until = 0.0  # a loaded test machine's back-off: try again
    assert gemm >= 10 and tried - gemm >= 30  # both families paired, on fpair's server
    helpers = _pair_threads()
    assert len(helpers) == 1 and helpers[0].name.startswith("kernelkit-f32-pair"), [t.name for t in helpers]
    assert cpair.server() is srv

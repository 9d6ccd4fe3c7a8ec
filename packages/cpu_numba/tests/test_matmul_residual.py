"""numba's MatMul with a fused residual Z (core's fuse_matmul_residual: Add(MatMul(A, W, bias), r) -> one
MatMul(A, W, bias, r)): fgemm's tiles starting their accumulators from r at one thread (one K chunk and
two, a masked last panel), the BLAS path, the shards at three threads, with and without a bias and a
fused activation, Z broadcast either way, and the memory plan writing the output over r's block; against
the reference kernel and against the unfused graph on the reference."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit.passes import matmul_bias
from kernelkit.testing import assert_close
from kernelkit_numba import config
from kernelkit_numba.kernels import epilogue, fgemm, fpair, ftile, gemm, pairs


def _r(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.fixture(autouse=True)
def _fusion_on(monkeypatch):
    """The pass on (its default since issue 11, session 13: docs/numba.md), whatever a test before set."""
    monkeypatch.setattr(matmul_bias, "RESIDUAL_ENABLED", True)


@pytest.fixture
def resid_calls(monkeypatch):
    """The shapes of the fgemm products run with a residual in the accumulators."""
    calls = []
    real = fgemm.gemm

    def spy(kind, packed, a2, out, *args, **kw):
        resid = kw.get("resid", args[6] if len(args) > 6 else False)
        if resid:
            calls.append(out.shape)
        return real(kind, packed, a2, out, *args, **kw)

    monkeypatch.setattr(fgemm, "gemm", spy)
    return calls


SHAPES = [
    ((2, 5, 8), (8, 6), False),  # BLAS
    ((2, 16, 64), (64, 48), True),  # fgemm's tiles, a masked last panel
    ((1, 20, 1100), (1100, 40), True),  # two K chunks: the first starts from Z, the second from the partial sums
]
ACTS = [{}, {"activation": "Relu"}, {"activation": "Gelu"}, {"activation": "Gelu", "activation_params": (1.0,)}]


@pytest.mark.parametrize("a_shape, b_shape, tiles", SHAPES)
@pytest.mark.parametrize("attrs", ACTS)
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("ahead", [1, 0])
def test_residual_matches_reference(rng, monkeypatch, resid_calls, a_shape, b_shape, tiles, attrs, with_bias, ahead):
    monkeypatch.setattr(fgemm, "RESID_PREFETCH", ahead)  # with and without the next tile's prefetch
    out_shape = a_shape[:-1] + b_shape[-1:]
    inputs = [_r(rng, *a_shape), _r(rng, *b_shape), _r(rng, b_shape[-1]) if with_bias else None, _r(rng, *out_shape)]
    want = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["reference"], fallback=False)[0]
    got = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["numba"], fallback=False, threads=1)[0]
    assert_close(got, want)
    # the reference's fused node is the unfused pair's arithmetic: (A @ B + bias) + Z, then the activation
    unfused = np.matmul(inputs[0], inputs[1]) + (inputs[2] if with_bias else 0) + inputs[3]
    if not attrs:
        np.testing.assert_array_equal(want, unfused)
    assert resid_calls == ([(int(np.prod(out_shape[:-1])), out_shape[-1])] if tiles else [])


@pytest.mark.parametrize("a_shape, b_shape, tiles", SHAPES)
@pytest.mark.parametrize("attrs", [{}, {"activation": "Relu"}])
@pytest.mark.parametrize("threads_too", [True, False])
def test_residual_in_shards(rng, monkeypatch, resid_calls, a_shape, b_shape, tiles, attrs, threads_too):
    """At three threads (every product cut into shards) each shard's tiles start from its block of Z
    (RESIDUAL_THREADS), or the product runs as without Z, then Z is added."""
    monkeypatch.setattr(gemm, "RESIDUAL_THREADS", threads_too)
    monkeypatch.setattr(config, "SERIAL_WORK", 0)
    monkeypatch.setattr(config, "MIN_SHARD_WORK", 0)
    out_shape = a_shape[:-1] + b_shape[-1:]
    inputs = [_r(rng, *a_shape), _r(rng, *b_shape), _r(rng, b_shape[-1]), _r(rng, *out_shape)]
    want = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["reference"], fallback=False)[0]
    got = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["numba"], fallback=False, threads=3)[0]
    assert_close(got, want)
    assert resid_calls == ([(int(np.prod(out_shape[:-1])), out_shape[-1])] if tiles and threads_too else [])


@pytest.mark.parametrize("z_shape, out_shape", [((1, 16, 48), (2, 16, 48)), ((16, 48), (2, 16, 48)),
                                                ((3, 2, 16, 48), (3, 2, 16, 48))])
def test_residual_broadcasts_as_the_add(rng, resid_calls, z_shape, out_shape):
    """Z broadcast up to the product, or the product up to Z: the Add's shapes, on the path after the product."""
    inputs = [_r(rng, 2, 16, 64), _r(rng, 64, 48), _r(rng, 48), _r(rng, *z_shape)]
    want = kk.testing.run_single_op("MatMul", inputs, {}, vendors=["reference"], fallback=False)[0]
    got = kk.testing.run_single_op("MatMul", inputs, {}, vendors=["numba"], fallback=False, threads=1)[0]
    assert got.shape == want.shape == out_shape
    assert_close(got, want)
    assert resid_calls == []


def residual_model(k=64, n=48, seq=16, act=None, extra_reader=False):
    """x (N, seq, k) @ W + b + Relu(r) -> [act] -> LayerNormalization (the product's sum lives in the arena)."""
    rng = np.random.default_rng(3)
    g = GraphBuilder("residual")
    x = g.input("x", ("N", seq, k))
    r = g.input("r", ("N", seq, n))
    h = g.op("Relu", r)
    w = g.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    b = g.constant(rng.uniform(-1, 1, (n,)).astype(np.float32))
    mm = g.op("MatMul", x, w)
    y = g.op("Add", mm, b)
    s = g.op("Add", h, y)
    if act:
        s = g.op(act, s)
    g.output(g.op("LayerNormalization", s, g.constant(np.ones(n, np.float32)), g.constant(np.zeros(n, np.float32)),
                  axis=-1))
    if extra_reader:
        g.output(g.op("Neg", y))
    return g.build()


def _feeds(seq=16, k=64, n=48):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((2, seq, k)).astype(np.float32),
            "r": rng.standard_normal((2, seq, n)).astype(np.float32)}


@pytest.mark.parametrize("k", [64, 1100])
@pytest.mark.parametrize("act", [None, "Relu"])
@pytest.mark.parametrize("threads, tiles", [(1, True), (1, False), (2, True)])
def test_pass_fuses_on_numba_and_writes_over_r(monkeypatch, resid_calls, k, act, threads, tiles):
    """The fused node writes over r's block (the plan's in-place step): on the tiles from r at one thread
    and at two (RESIDUAL_THREADS), else the product into scratch first (RESIDUAL_TILES off), then r added
    into its block."""
    monkeypatch.setattr(gemm, "RESIDUAL_TILES", tiles)
    if threads > 1:  # the product on two threads, small as it is
        monkeypatch.setattr(config, "SERIAL_WORK", 0)
        monkeypatch.setattr(config, "MIN_SHARD_WORK", 0)
    model = residual_model(k=k, act=act)
    feeds = _feeds(k=k)
    sess = Session(model, vendors=["numba", "reference"], threads=threads, fallback=False)
    got = sess.run(None, feeds)[0]
    assert sess.passes_fired.get("fuse_matmul_residual") == 1
    steps = sess.plan.kernel_steps()
    assert [s.op for s in steps] == ["Relu", "MatMul", "LayerNormalization"]
    fused = steps[1]
    assert fused.inputs[3] == steps[0].outputs[0] and fused.key.vendor == "numba"
    # the product's name (fuse_matmul_bias's: the bias Add's), the output of the residual Add (or of the
    # activation after it, which fuse_activation then takes too)
    assert fused.name == [n.name for n in model.graph.nodes if n.op_id == "Add"][0]
    assert list(fused.outputs) == list([n.outputs for n in model.graph.nodes if n.op_id == (act or "Add")][-1])
    mem = sess._executor.last_memory
    at = {s.name: i for i, s in enumerate(sess.plan.steps)}[fused.name]
    assert mem.inplace == {at: fused.input_slots[3]}  # written over Relu(r)'s block
    assert resid_calls == ([(32, 48)] if tiles else [])
    want = Session(model, vendors=["reference"], passes=False).run(None, feeds)[0]
    assert_close(got, want)
    again = sess.run(None, feeds)[0]  # the arena's r block is written again by the Relu: the same result
    np.testing.assert_array_equal(again, got)


def test_reference_session_keeps_the_add():
    """The reference's MatMul does not opt in (``residual_input``): its session runs the graph's Add."""
    sess = Session(residual_model(), vendors=["reference"], fallback=False)
    assert "fuse_matmul_residual" not in sess.passes_fired
    assert [s.op for s in sess.plan.kernel_steps()] == ["Relu", "MatMul", "Add", "LayerNormalization"]


def test_pass_leaves_a_product_read_elsewhere():
    model = residual_model(extra_reader=True)
    sess = Session(model, vendors=["numba", "reference"], threads=1, fallback=False)
    got = sess.run(None, _feeds())
    assert "fuse_matmul_residual" not in sess.passes_fired
    want = Session(model, vendors=["reference"], passes=False).run(None, _feeds())
    for g_, w_ in zip(got, want):
        assert_close(g_, w_)


def test_switch_off(monkeypatch):
    monkeypatch.setattr(matmul_bias, "RESIDUAL_ENABLED", False)
    sess = Session(residual_model(), vendors=["numba", "reference"], threads=1, fallback=False)
    assert "fuse_matmul_residual" not in sess.passes_fired


@pytest.mark.parametrize("threads", [1, 2])
def test_residual_produced_between_product_and_add(rng, threads):
    """r's producer listed after the product (the fused node takes the Add's place, so the passes after,
    trim_dead's sweep among them, keep it), with a batched B: the serial call at one thread."""
    g = GraphBuilder("late")
    x = g.input("x", (2, 4, 6, 8))
    r = g.input("r", (2, 4, 6, 5))
    mm = g.op("MatMul", x, g.constant(_r(rng, 4, 8, 5)))  # listed before Relu(r)
    g.output(g.op("Neg", g.op("Add", mm, g.op("Relu", r))))
    model = g.build()
    feeds = {"x": _r(rng, 2, 4, 6, 8), "r": _r(rng, 2, 4, 6, 5)}
    sess = Session(model, vendors=["numba", "reference"], threads=threads, fallback=False)
    got = sess.run(None, feeds)[0]
    assert sess.passes_fired.get("fuse_matmul_residual") == 1
    assert [s.op for s in sess.plan.kernel_steps()] == ["Relu", "MatMul", "Neg"]
    assert sess.memory()["inplace_steps"] >= 1
    assert_close(got, Session(model, vendors=["reference"], passes=False).run(None, feeds)[0])


def test_residual_chain_each_fused_node_in_its_adds_place(rng):
    """Four layers of x = Neg(Add(Relu(x), MatMul(x, W))), each r (the Relu) listed between its product and its
    Add, then an Add of two products: one sweep fuses the five (the node list's places kept current across the
    fusions: each fused MatMul where its Add was, after the node that writes its r; of two products the Add's
    first input is the one fused, the other its r), and the session computes what the unfused graph does."""
    g = GraphBuilder("chain")
    x = g.input("x", ("N", 6, 8))
    for _ in range(4):
        mm = g.op("MatMul", x, g.constant(_r(rng, 8, 8)))
        x = g.op("Neg", g.op("Add", g.op("Relu", x), mm))
    first, second = (g.op("MatMul", x, g.constant(_r(rng, 8, 8))) for _ in range(2))
    g.output(g.op("Add", first, second))
    model = g.build()
    feeds = {"x": _r(rng, 2, 6, 8)}
    sess = Session(model, vendors=["numba", "reference"], threads=1, fallback=False)
    got = sess.run(None, feeds)[0]
    assert sess.passes_fired.get("fuse_matmul_residual") == 5
    steps = sess.plan.kernel_steps()
    assert [s.op for s in steps] == ["Relu", "MatMul", "Neg"] * 4 + ["MatMul", "MatMul"]
    assert [s.name for s in steps[-2:]] == [second.name, first.name]
    assert_close(got, Session(model, vendors=["reference"], passes=False).run(None, feeds)[0])


def test_constant_is_not_a_residual(rng):
    """Add(MatMul, a constant) is a bias (fuse_matmul_bias's per column, or one per element as here): not fused."""
    g = GraphBuilder("const")
    x = g.input("x", ("N", 6, 8))
    y = g.op("Add", g.op("MatMul", x, g.constant(_r(rng, 8, 5))), g.constant(_r(rng, 6, 5)))
    g.output(g.op("Neg", y))
    sess = Session(g.build(), vendors=["numba", "reference"], threads=1, fallback=False)
    sess.run(None, {"x": _r(rng, 2, 6, 8)})
    assert "fuse_matmul_residual" not in sess.passes_fired


# fpair's halves with the residual in their accumulators (fgemm.RESID_PAIRS): two threads

@pytest.mark.parametrize("axis", ["columns", "rows"])
@pytest.mark.parametrize("m, k, n", [(128, 256, 256), (53, 1100, 99)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("ahead", [1, 0])
@pytest.mark.parametrize("post", [epilogue.NONE, epilogue.GELU])
@pytest.mark.skipif(not pairs.X86 or ftile.choice()[0] is None, reason="pairs need x86-64 and the float32 tiles")
def test_pair_halves_start_from_r(quiet_server, monkeypatch, axis, m, k, n, with_bias, ahead, post):
    """fgemm.gemm with a residual at two threads pairs (RESID_PAIRS): the caller alone (the helper
    'spinning' but never coming) runs both halves, each from its own rows or columns of r; the helper's
    half, served by fpair's loop over the same descriptor, writes its part the same bit for bit. Both equal
    the one-thread tiles from r bit for bit and the float64 product + bias + r within the fp32 tolerances
    (K 1100: two chunks, the second from the partial sums; 99 columns: a masked last panel)."""
    monkeypatch.setattr(fpair, "AXIS", axis)
    monkeypatch.setattr(fgemm, "RESID_PREFETCH", ahead)
    kind = ftile.choice()[0]
    rng = np.random.default_rng(m + n)
    a = _r(rng, m, k)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = _r(rng, n) if with_bias else None
    z = _r(rng, m, n)
    packed = fgemm.Packed(b, b, kind)
    p0 = 0.0
    one = z.copy()
    with config.num_threads(1):
        fgemm.gemm(kind, packed, a, one, 1.0, bias, post, p0, 0.0, resid=True)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    alone = z.copy()
    with config.num_threads(2):
        fgemm.gemm(kind, packed, a, alone, 1.0, bias, post, p0, 0.0, resid=True)
    assert srv.stats["alone"] == 1 and srv.stats["paired"] == 0  # the pair ran, the caller on both sides
    np.testing.assert_array_equal(alone, one)
    y64 = a.astype(np.float64) @ b.astype(np.float64) + (0 if bias is None else bias) + z
    if post == epilogue.GELU:
        from math import erf
        y64 = y64 * 0.5 * (1 + np.vectorize(erf)(y64 / np.sqrt(2)))
    assert_close(alone, y64.astype(np.float32), np.float32)
    # the helper's half: the job the caller published, republished over a fresh r and served on this thread
    desc = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_int64 * fpair.NDESC).from_address(int(srv.ctl[pairs.DESC])))
    assert desc[fpair.MODE] == (fpair.ROWS if axis == "rows" else fpair.COLUMNS)
    y = z.copy()
    desc[fpair.OUT] = y.ctypes.data
    desc[fpair.AP] = a.ctypes.data
    srv.ctl[pairs.STATE] = 9 * 4 + pairs.OPEN
    assert fpair.pair_serve(srv.ctl, 1 << 22, 1 << 40) == 0
    assert srv.ctl[pairs.STATE] == 9 * 4 + pairs.DONE
    cut = int(desc[fpair.CUT])
    mine, theirs = (np.s_[:cut], np.s_[cut:]) if axis == "rows" else (np.s_[:, :cut], np.s_[:, cut:])
    np.testing.assert_array_equal(y[mine], z[mine])  # side 0 untouched: still r
    np.testing.assert_array_equal(y[theirs], one[theirs])  # side 1 from its own part of r


def test_pair_key_keeps_resid_apart(monkeypatch):
    """A weight's product with a residual and without get their own descriptors (halves of their own)."""
    kind = ftile.choice()[0]
    if kind is None or not pairs.X86:
        pytest.skip("pairs need x86-64 and the float32 tiles")
    rng = np.random.default_rng(2)
    a, b, z = _r(rng, 64, 128), _r(rng, 128, 96), _r(rng, 64, 96)
    packed = fgemm.Packed(b, b, kind)
    monkeypatch.setattr(fpair, "run", lambda desc, a_flat, out_flat: False)  # descriptors made, no pair run
    with config.num_threads(2):
        plain = np.empty_like(z)
        fgemm.gemm(kind, packed, a, plain, resid=False)
        fused = z.copy()
        fgemm.gemm(kind, packed, a, fused, resid=True)
    made = list(packed.pairs.values())
    assert len(made) == 2 and made[0] is not False and made[1] is not False
    assert made[0].desc[fpair.FN] != made[1].desc[fpair.FN]  # two halves: plain and from r
    assert_close(plain, a @ b, np.float32)
    assert_close(fused, a @ b + z, np.float32)


def test_residual_pairs_through_a_two_thread_session(session_pair_calls, resid_calls):
    """The transformer's residual product (128 x 256 x 256 + bias + r) fused in a two-thread session pairs on
    fpair's helper from r's block, equal to the reference and the one-thread run on every run, paired or
    not (a refused pair: the two shares from r, as the unfused product's; a loaded box's pool job is theirs)."""
    model = residual_model(k=256, n=256, seq=128)
    feeds = _feeds(seq=128, k=256, n=256)
    want = Session(model, vendors=["reference"], passes=False).run(None, feeds)[0]
    one = Session(model, vendors=["numba", "reference"], threads=1).run(None, feeds)[0]
    sess = Session(model, vendors=["numba", "reference"], fallback=False, threads=2)
    assert sess.passes_fired.get("fuse_matmul_residual") == 1
    before = len(resid_calls)
    tried, _jobs = session_pair_calls(sess, feeds, want, one, 10)
    assert tried >= 10 and resid_calls[before:] and set(resid_calls[before:]) == {(256, 256)}  # from r

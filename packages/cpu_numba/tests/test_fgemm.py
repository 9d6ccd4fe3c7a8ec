"""The float32 GEMM micro-kernels with a constant B (fgemm.py): every variant this CPU has against a
float64 NumPy product (tails in M, N and K, K chunks, alpha, bias, Relu/Clip in the registers, the
other activations over each tile, NaN kept, shards at two threads, a transposed A), and the Gemm and
MatMul kernels forced onto each variant through a Session against the reference kernels."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_numba import config
from kernelkit_numba.kernels import epilogue, fgemm, ftile

VARIANTS = ["generic", "avx2", "avx512"]
_ACT = getattr(epilogue.act, "py_func", epilogue.act)  # one activated value, in Python


def _need(name):
    if not ftile.available(name):
        missing = [f for f in ftile._NEEDS[name] if f not in ftile.host_features()]
        why = f"this CPU lacks {', '.join(missing)}" if missing else "NUMBA_DISABLE_JIT=1: no compiled tiles"
        pytest.skip(f"{why} ({name} cannot run here)")


def _want(a, b, alpha, bias, code, p0, p1):
    v = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if bias is not None:
        v = v + bias
    v = v.astype(np.float32)
    out = np.empty_like(v)
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            out[i, j] = _ACT(v[i, j], code, p0, p1) if code else v[i, j]
    return out


SHAPES = [(1, 1, 1), (5, 3, 7), (8, 16, 32), (9, 17, 33), (13, 300, 100), (64, 300, 70), (70, 64, 49), (3, 600, 31),
          (130, 40, 10)]


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_tiles_against_float64(name, m, k, n, monkeypatch):
    _need(name)
    kind = ftile.KIND[name]
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)  # sums of order 1, as trained layers'
    bias = rng.standard_normal(n).astype(np.float32)
    packed = fgemm.Packed(b, b, kind)
    f = np.float32
    cases = [(1.0, None, epilogue.NONE, f(0), f(0), None, 1), (0.5, bias, epilogue.CLIP, f(0), f(np.inf), 7, 2),
             (2.0, bias, epilogue.CLIP, f(-0.5), f(0.5), 64, 3), (1.0, bias, epilogue.GELU, f(0), f(0), None, 2)]
    for alpha, bb, code, p0, p1, kc, threads in cases:
        if kc is not None:
            monkeypatch.setattr(fgemm, "KC", kc)
        out = np.full((m, n), np.nan, np.float32)
        with config.num_threads(threads):
            fgemm.gemm(kind, packed, a, out, alpha, bb, code, p0, p1)
        assert_close(out, _want(a, b, alpha, bb, code, p0, p1), err_msg=f"{name} K {k} code {code} kc {kc}")
        monkeypatch.setattr(fgemm, "KC", 1024)
    # A given transposed (a strided view, as Gemm's transA passes it)
    at = np.ascontiguousarray(a.T)
    out = np.empty((m, n), np.float32)
    fgemm.gemm(kind, packed, at.T, out, 1.0, bias)
    assert_close(out, _want(a, b, 1.0, bias, 0, 0, 0))


@pytest.mark.parametrize("m", [1, 5, 8, 12, 16, 20, 28, 40, 64, 77, 128])
def test_mixed_12_and_8_row_tiles(m, monkeypatch):
    """avx512 with 12-row tiles (fgemm.MR[2] = 12): the last rows on 0-2 tiles of 8 (row_tiles), A
    read in place and packed, K chunks, bias and clamp, at one and two threads, against float64."""
    _need("avx512")
    monkeypatch.setattr(fgemm, "MR", {**fgemm.MR, 2: 12})
    tall, short = fgemm.row_tiles(m, 12)
    assert tall * 12 + short * 8 >= m and tall * 12 + short * 8 - m < 4 + 4 * (m < 8) and short <= 2
    rng = np.random.default_rng(m)
    k, n = 70, 45
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = fgemm.Packed(b, b, 2)
    f = np.float32
    for kc, threads, direct in [(1024, 1, True), (16, 2, True), (1024, 1, False), (32, 2, False)]:
        monkeypatch.setattr(fgemm, "KC", kc)
        monkeypatch.setattr(fgemm, "DIRECT_A", direct)
        out = np.full((m, n), np.nan, np.float32)
        with config.num_threads(threads):
            fgemm.gemm(2, packed, a, out, 1.0, bias, epilogue.CLIP, f(0), f(np.inf))
        assert_close(out, _want(a, b, 1.0, bias, epilogue.CLIP, f(0), f(np.inf)), err_msg=f"kc {kc} direct {direct}")
    assert fgemm.row_tiles(64, 12) == (4, 2) and fgemm.row_tiles(128, 12) == (10, 1)
    assert fgemm.row_tiles(96, 12) == (8, 0) and fgemm.row_tiles(64, 8) == (8, 0)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("code", [epilogue.SIGMOID, epilogue.TANH, epilogue.LEAKY_RELU, epilogue.HARD_SWISH])
def test_other_activations_over_the_tile(name, code):
    _need(name)
    kind = ftile.KIND[name]
    rng = np.random.default_rng(code)
    a, b = rng.standard_normal((19, 45)).astype(np.float32), rng.standard_normal((45, 37)).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    out = np.empty((19, 37), np.float32)
    fgemm.gemm(kind, fgemm.Packed(b, b, kind), a, out, 1.0, bias, code, np.float32(0.1), np.float32(0))
    assert_close(out, _want(a, b, 1.0, bias, code, np.float32(0.1), np.float32(0)))


@pytest.mark.parametrize("name", VARIANTS)
def test_nan_kept_and_inf_clamped(name):
    _need(name)
    kind = ftile.KIND[name]
    a = np.ones((9, 4), np.float32)
    a[2, 1] = np.nan
    a[5, 0] = np.inf
    b = np.ones((4, 20), np.float32)
    out = np.empty((9, 20), np.float32)
    fgemm.gemm(kind, fgemm.Packed(b, b, kind), a, out, 1.0, None, epilogue.CLIP, np.float32(0), np.float32(6))
    assert np.isnan(out[2]).all() and (out[5] == 6).all() and (out[0] == 4).all()


GEMM_CASES = [
    ((64, 200), (300, 200), {"transB": 1, "activation": "Relu"}),  # an MLP layer (smaller: NUMBA_DISABLE_JIT job)
    ((33, 70), (70, 45), {"alpha": 0.5, "beta": 2.0}),
    ((20, 19), (50, 19), {"transB": 1, "activation": "Gelu"}),
    ((40, 24), (24, 17), {"transA": 1, "activation": "Clip", "activation_params": [-0.5, 0.5]}),
    ((9, 300), (300, 130), {}),
]


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("a_shape, b_shape, attrs", GEMM_CASES)
@pytest.mark.parametrize("with_c", [False, True])
def test_gemm_session_on_each_variant(check, rng, monkeypatch, name, a_shape, b_shape, attrs, with_c):
    _need(name)
    monkeypatch.setenv(ftile.ENV, name)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in (a_shape, b_shape))
    if attrs.get("transA"):
        a = np.ascontiguousarray(a.T)
    n = b_shape[0] if attrs.get("transB") else b_shape[1]
    inputs = [a, b] + ([rng.standard_normal(n).astype(np.float32)] if with_c else [])
    check("Gemm", inputs, attrs, constants=(1, 2) if with_c else (1,))


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("a_shape, activation", [((2, 30, 48), ""), ((70, 33), "Relu"), ((3, 5, 16), "Gelu")])
def test_matmul_session_on_each_variant(check, rng, monkeypatch, name, a_shape, activation):
    _need(name)
    monkeypatch.setenv(ftile.ENV, name)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal((a_shape[-1], 40)).astype(np.float32)
    check("MatMul", [a, b], {"activation": activation} if activation else {}, constants=(1,))


def test_b_as_a_graph_input_stays_correct(rng):
    """A B that is not a constant (a fresh array each run) is packed on the first call and then left
    to BLAS: every run agrees with the product of its own B."""
    import kernelkit
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Gemm", ["a", "b"], ["y"])]
    io = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [32, 40]),
          helper.make_tensor_value_info("b", TensorProto.FLOAT, [40, 48])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 48])]
    model = convert(helper.make_model(helper.make_graph(nodes, "g", io, out),
                                      opset_imports=[helper.make_opsetid("", 21)]))
    sess = kernelkit.Session(model, vendors=["numba"], fallback=False)
    a = rng.standard_normal((32, 40)).astype(np.float32)
    for _ in range(3):
        b = rng.standard_normal((40, 48)).astype(np.float32)
        assert_close(sess.run(None, {"a": a, "b": b})[0], a @ b)


def test_default_choice_by_shape(monkeypatch):
    monkeypatch.setenv(ftile.ENV, "off")
    assert fgemm.kind_for(64, 784, 1024) is None
    monkeypatch.setenv(ftile.ENV, "auto")
    kind = ftile.select()
    assert fgemm.kind_for(64, 784, 1024) == kind
    assert fgemm.kind_for(64, 1024, 10) is None  # ten columns: BLAS (bench_fgemm.py)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("threads, shards", [(1, None), (2, None), (2, 5)])
def test_row_blocks_and_panel_groups(name, threads, shards, monkeypatch):
    """Several row blocks (BLOCK_BYTES lowered) times column-panel groups, serially and on the pool."""
    _need(name)
    kind = ftile.KIND[name]
    monkeypatch.setattr(fgemm, "BLOCK_BYTES", 1 << 10)
    rng = np.random.default_rng(threads)
    a, b = rng.standard_normal((53, 70)).astype(np.float32), rng.standard_normal((70, 99)).astype(np.float32)
    bias = rng.standard_normal(99).astype(np.float32)
    assert fgemm.plan(kind, 53, 70, 99, 2)[1] > 1  # more than one row block
    out = np.empty((53, 99), np.float32)
    with config.num_threads(threads):
        fgemm.gemm(kind, fgemm.Packed(b, b, kind), a, out, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf),
                   shards)
    assert_close(out, _want(a, b, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf)))


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("threads, kc, pfs", [(1, 1024, 16), (1, 32, 16), (2, 1024, 16), (1, 1024, 4), (1, 32, 4)])
def test_prefetch_of_the_next_panel(name, threads, kc, pfs, monkeypatch):
    """PREFETCH (the first row tiles of a panel prefetch the next panel's K chunk) changes no value:
    one thread with whole K and in K chunks, two threads (fpair's halves or the pool's shares), the
    bound serial call and a masked last panel, on drivers cached under their own key."""
    _need(name)
    kind = ftile.KIND[name]
    monkeypatch.setattr(fgemm, "PREFETCH", pfs)
    monkeypatch.setattr(fgemm, "KC", kc)
    rng = np.random.default_rng(kc + threads)
    a, b = rng.standard_normal((20, 100)).astype(np.float32), rng.standard_normal((100, 90)).astype(np.float32)
    bias = rng.standard_normal(90).astype(np.float32)
    packed = fgemm.Packed(b, b, kind)
    want = _want(a, b, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf))
    out = np.empty((20, 90), np.float32)
    with config.num_threads(threads):
        fgemm.gemm(kind, packed, a, out, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf))
    assert_close(out, want)
    out2 = np.empty((20, 90), np.float32)
    fgemm.serial(kind, packed, 20, 1.0, bias, epilogue.CLIP, 0.0, np.inf)(a, out2)
    assert_close(out2, want)
    if pfs == 4 and kc == 1024 and name == "avx512":  # Gemm's one-thread bound call: PREFETCH_ONE_THREAD
        out2[:] = np.nan
        fgemm.serial(kind, packed, 20, 1.0, bias, epilogue.CLIP, 0.0, np.inf, 8)(a, out2)
        assert_close(out2, want)
    from kernelkit_numba.cache import CLOSURE_KEY

    d = fgemm.driver(kind, epilogue.NONE, fgemm.MR[kind])
    assert d is not fgemm.driver(kind, epilogue.NONE, fgemm.MR[kind], 0)
    assert getattr(getattr(d, "py_func", d), CLOSURE_KEY).endswith(f".pf{pfs}")


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("m,mr", [(20, None), (64, 12)])
def test_one_thread_b_ahead_and_packed_a(name, m, mr, monkeypatch):
    """The bound one-thread call's switches (B_AHEAD_ONE_THREAD: each tile prefetches its panel's row k + ahead
    into L1; PACK_A_ONE_THREAD: A packed into row tiles; WHOLE_ONE_THREAD: whole row tiles on tiles without the
    last-row selects, a last partial one on the general tile) change no value: a masked last panel, K in chunks
    and whole, 8-row and mixed 12/8-row tiles, against the float64 product; the L1 prefetch's and the whole
    tiles' drivers are cached under their own keys."""
    _need(name)
    kind = ftile.KIND[name]
    if mr is not None:
        if kind != 2:
            pytest.skip("12-row tiles: avx512 only")
        monkeypatch.setitem(fgemm.MR, kind, mr)
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, 300)).astype(np.float32), rng.standard_normal((300, 90)).astype(np.float32)
    bias = rng.standard_normal(90).astype(np.float32)
    packed = fgemm.Packed(b, b, kind)
    want = _want(a, b, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf))
    for kc in (1024, 128):
        monkeypatch.setattr(fgemm, "KC", kc)
        for ahead, pack, whole in ((8, False, 0), (0, True, 0), (16, True, 1), (8, False, 1), (8, False, 2),
                                   (0, True, 2)):
            out = np.full((m, 90), np.nan, np.float32)
            fgemm.serial(kind, packed, m, 1.0, bias, epilogue.CLIP, 0.0, np.inf, 8, ahead, pack, whole)(a, out)
            assert_close(out, want, err_msg=f"kc {kc} ahead {ahead} packed A {pack} whole {whole}")
    from kernelkit_numba.cache import CLOSURE_KEY

    d = fgemm.driver(kind, epilogue.NONE, fgemm.MR[kind], 8, 8)
    assert getattr(getattr(d, "py_func", d), CLOSURE_KEY).endswith(".pf8.a8")
    for whole in (1, 2):
        d = fgemm.driver(kind, epilogue.NONE, fgemm.MR[kind], 8, 8, whole=whole)
        assert getattr(getattr(d, "py_func", d), CLOSURE_KEY).endswith(".pf8.a8" + (f".w{whole}" if kind else ""))


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("m,k,mr,every,copied", [(64, 1024, 12, 4096, True), (37, 1024, 12, 4096, True),
                                                 (9, 512, None, 2048, True), (64, 512, 12, 4096, False),
                                                 (37, 301, 12, 2048, False), (64, 784, 12, 4096, False)])
def test_one_thread_padded_a(name, m, k, mr, every, copied, monkeypatch):
    """The bound one-thread call's copy of A into rows K + pad apart (PAD_A_ONE_THREAD) where K * 4 is a multiple
    of PAD_A_EVERY and N at least PAD_A_MIN_N, and only there: the same values bit for bit as the call without it
    (the same tiles, the same order), at the whole and general tiles, K whole and in chunks, bias and Relu, M not a
    multiple of the tiles; against the float64 product."""
    _need(name)
    kind = ftile.KIND[name]
    mr = mr if kind == 2 else None
    rng = np.random.default_rng(m + k)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, 90)).astype(np.float32)
    bias = rng.standard_normal(90).astype(np.float32)
    packed = fgemm.Packed(b, b, kind)
    want = _want(a, b, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf))
    strides = []
    copy = fgemm.copy_rows
    monkeypatch.setattr(fgemm, "copy_rows", lambda a2, m_n, k_n, ap, ldp: strides.append(ldp) or
                        copy(a2, m_n, k_n, ap, ldp))
    monkeypatch.setattr(fgemm, "PAD_A_EVERY", every)
    monkeypatch.setattr(fgemm, "PAD_A_MIN_N", 91)  # (90 columns: no copy)
    fgemm.serial(kind, packed, m, 1.0, bias, epilogue.CLIP, 0.0, np.inf, 8, 8, False, 1, mr, 16)(a, np.empty((m, 90),
                                                                                                     np.float32))
    assert strides == []
    monkeypatch.setattr(fgemm, "PAD_A_MIN_N", 90)
    for kc in (1024, 200):
        monkeypatch.setattr(fgemm, "KC", kc)
        for whole in (0, 1, 2):
            outs = []
            for pad in (0, 16, 8):
                strides.clear()
                out = np.full((m, 90), np.nan, np.float32)
                run = fgemm.serial(kind, packed, m, 1.0, bias, epilogue.CLIP, 0.0, np.inf, 8, 8, False, whole, mr, pad)
                for _ in range(2):
                    run(a, out)
                assert strides == ([k + pad] * 2 if copied and pad else [])
                assert_close(out, want, err_msg=f"kc {kc} whole {whole} pad {pad}")
                outs.append(out)
            for out in outs[1:]:
                np.testing.assert_array_equal(out, outs[0])  # the copy changes no arithmetic
    assert fgemm.padded_lda(1024, 16, 4096) == 1040 and fgemm.padded_lda(1024, 0, 4096) == 1024
    assert fgemm.padded_lda(784, 16, 2048) == 784 and fgemm.padded_lda(512, 16, 2048) == 528


@pytest.mark.parametrize("m", [64, 37, 9])
@pytest.mark.parametrize("n", [1024, 90, 80, 64, 48, 10])
def test_one_thread_wide_tiles(m, n, monkeypatch):
    """The one-thread call on the WIDE tiles (8 rows x 48 columns; the last panel of at most 16 or 32 columns on tiles
    of one or two vectors over the 48-float rows, of 33-47 on the masked three-vector tile): the same values bit for
    bit as the 8 x 32 tiles (the same FMAs in the same order), K whole and in chunks, whole and general row tiles
    inlined and apart, the L1 prefetch, A packed and A's rows copied apart; against the float64 product; the
    drivers cached under their own keys."""
    _need("avx512")
    from kernelkit_numba.cache import CLOSURE_KEY

    wide = fgemm.WIDE
    k = 1024 if n == 1024 else 300
    rng = np.random.default_rng(m * n)
    a, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    want = _want(a, w.T, 1.0, bias, epilogue.CLIP, np.float32(0), np.float32(np.inf))
    narrow, packed = fgemm.Packed(w, w.T, 2, 64), fgemm.Packed(w, w.T, wide, 64)
    assert packed.bp.size == -(-n // 48) * 48 * k and packed.bp.ctypes.data % 64 == 0
    settings = ((8, False, 0, 0), (8, False, 1, 0), (8, False, 2, 0), (0, True, 1, 0), (8, False, 1, 16),
                (16, False, 2, 16))
    for kc in (1024, 128):
        monkeypatch.setattr(fgemm, "KC", kc)
        for ahead, pack, whole, pad in settings:
            if kc == 128 and whole == 2:
                continue
            out, base = np.full((m, n), np.nan, np.float32), np.full((m, n), np.nan, np.float32)
            args = (1.0, bias, epilogue.CLIP, 0.0, np.inf, 8, ahead, pack, whole)
            fgemm.serial(wide, packed, m, *args, None, pad)(a, out)
            fgemm.serial(2, narrow, m, *args, 8, pad)(a, base)
            msg = f"kc {kc} ahead {ahead} packed A {pack} whole {whole} pad {pad}"
            assert_close(out, want, err_msg=msg)
            np.testing.assert_array_equal(out, base, err_msg=msg)
    for whole in (0, 1, 2):
        d = fgemm.driver(wide, epilogue.NONE, 8, 8, 8, whole=whole)
        assert getattr(getattr(d, "py_func", d), CLOSURE_KEY) == "fgemm.gemm.4.8.0.pf8.a8" + (f".w{whole}" if whole
                                                                                               else "")
    monkeypatch.setattr(fgemm, "WIDE_ONE_THREAD", 0)
    assert [fgemm.one_thread_kind(kd) for kd in (0, 1, 2, fgemm.NARROW)] == [0, 1, 2, fgemm.NARROW]
    monkeypatch.setattr(fgemm, "WIDE_ONE_THREAD", 1)
    assert [fgemm.one_thread_kind(kd) for kd in (0, 1, 2, fgemm.NARROW)] == [0, 1, wide, fgemm.NARROW]


def test_drivers_are_cached_under_their_variant():
    """The drivers close over LLVM IR intrinsics, which pickle differently in every process: each is
    cached under a key naming its variant, tile height and activation (cache.CLOSURE_KEY), so that the
    next process loads it instead of compiling it again."""
    from kernelkit_numba.cache import CLOSURE_KEY

    drivers = [fgemm.driver(kind, post, mr) for kind, mr in ((0, 4), (1, 6), (2, 8), (2, 12))
               for post in (epilogue.NONE, epilogue.GELU)]
    keys = {getattr(getattr(d, "py_func", d), CLOSURE_KEY) for d in drivers}  # py_func: unless NUMBA_DISABLE_JIT
    assert len(keys) == 8 and all(k.startswith("fgemm.gemm.") for k in keys)


@pytest.mark.parametrize("narrow", [True, False])
def test_few_columns_head_at_one_thread(rng, monkeypatch, narrow):
    """A Gemm of 2-16 columns with a constant B at one thread (the MLP's 64 x 1024 x 10 head) runs
    fgemm's NARROW tiles in its bound serial call (gemm.HEAD_NARROW; off: np.matmul, as the reference),
    with the bias and Relu, against the float64 product over several runs."""
    import kernelkit
    from kernelkit_converters.onnx import convert
    from kernelkit_numba.kernels import gemm
    from onnx import TensorProto, helper, numpy_helper

    monkeypatch.setattr(gemm, "HEAD_NARROW", narrow)
    b = (rng.standard_normal((256, 10)) / 16).astype(np.float32)
    c = rng.standard_normal(10).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["g"]), helper.make_node("Relu", ["g"], ["y"])]
    io = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [24, 256])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [24, 10])]
    graph = helper.make_graph(nodes, "g", io, out, [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
    model = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=1)
    for _ in range(3):
        a = rng.standard_normal((24, 256)).astype(np.float32)
        assert_close(sess.run(None, {"a": a})[0], _want(a, b, 1.0, c, epilogue.CLIP, np.float32(0), np.float32(np.inf)))
    gemm_kernel = next(s.kernel for s in sess.plan.kernel_steps() if s.op == "Gemm")
    packed = gemm_kernel._const_b.packed  # B packed at the bound call's first run
    if narrow and ftile.available("avx512") and ftile.select() == ftile.KIND["avx512"]:
        assert packed is not None and packed.kind == fgemm.NARROW
    elif not narrow:
        assert packed is None  # np.matmul


@pytest.mark.parametrize("name", ["avx2", "avx512"])
@pytest.mark.parametrize("k,n", [(512, 1000), (1280, 1000), (2048, 1000), (300, 70), (40, 130)])
def test_row_heads_streams_prefetch_and_alignment(name, k, n, monkeypatch):
    """fgemm.row's one-row head (the four CNNs' heads: 512 / 1280 / 2048 x 1000, and small ones whose panels
    do not fill a group of streams) at every setting of its switches (ROW_STREAMS: several panels read at
    once, the panels left over one at a time and the last one masked; ROW_STREAMS_AHEAD: the streams' rows
    prefetched K steps ahead; ROW_PREFETCH: the next panel into L2; PACK_ALIGN: the panels packed at a page
    boundary, or a huge page's), with and without the bias, alpha, Relu (in the registers) and Sigmoid
    (after), B given (K, N) and transposed (N, K), against the float64 product; the streams' drivers are
    cached under their own keys."""
    _need(name)
    kind = ftile.KIND[name]
    rng = np.random.default_rng(k + n)
    a = rng.standard_normal((1, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)  # (N, K), as exported (transB)
    bias = rng.standard_normal(n).astype(np.float32)
    f = np.float32
    cases = [(1.0, bias, epilogue.NONE, f(0), f(0)), (0.5, None, epilogue.CLIP, f(0), f(np.inf)),
             (2.0, bias, epilogue.SIGMOID, f(0), f(0))]
    for align in (1, 4096, fgemm.HUGE_PAGE):  # (1: where NumPy puts them)
        monkeypatch.setattr(fgemm, "PACK_ALIGN", align)
        for b2 in (w.T, np.ascontiguousarray(w.T)):  # transB's view of (N, K), and a (K, N) weight
            packed = fgemm.Packed(w, b2, kind)
            huge = align >= fgemm.HUGE_PAGE and packed.bp.nbytes >= fgemm.HUGE_PAGE
            assert packed.bp.ctypes.data % (align if huge or align < fgemm.HUGE_PAGE else 4096) == 0
            for alpha, bb, code, p0, p1 in cases:
                want = _want(a, w.T, alpha, bb, code, p0, p1)
                for streams, prefetch, ahead in ((1, 0, 0), (1, 32, 0), (2, 0, 0), (4, 0, 0), (8, 0, 0), (4, 0, 16),
                                                 (8, 0, 3)):
                    out = np.full((1, n), np.nan, np.float32)
                    monkeypatch.setattr(fgemm, "ROW_STREAMS_AHEAD", ahead)  # (read when the call binds)
                    fgemm.row(kind, packed, alpha, bb, code, p0, p1, prefetch=prefetch, streams=streams)(a, out)
                    assert_close(out, want, err_msg=f"{name} streams {streams} prefetch {prefetch} ahead {ahead} "
                                                    f"align {align}")
    from kernelkit_numba.cache import CLOSURE_KEY

    d = fgemm._rows_driver(kind, epilogue.NONE, 4)
    assert getattr(getattr(d, "py_func", d), CLOSURE_KEY) == f"fgemm.rows.{kind}.{epilogue.NONE}.s4"
    d = fgemm._rows_driver(kind, epilogue.NONE, 4, 16, 2)
    assert getattr(getattr(d, "py_func", d), CLOSURE_KEY) == f"fgemm.rows.{kind}.{epilogue.NONE}.s4.a16h2"


@pytest.mark.parametrize("name", ["avx2", "avx512"])
@pytest.mark.parametrize("k,n", [(1280, 1000), (512, 1000), (64, 31 * 32), (40, 130), (24, 7 * 16 + 5)])
def test_row_heads_rest_in_groups_bit_for_bit(name, k, n, monkeypatch):
    """ROW_STREAMS_REST: the whole panels left over after the groups of ROW_STREAMS run in groups of a half, then a
    quarter, of the streams; every column's sum is the same chain of FMAs as on the single-panel tiles, so the
    output is bit for bit the rest-off driver's (1000 columns: 31 whole panels on avx512, 8 streams leave 7 = 4 + 2 +
    1), with the bias, alpha and Relu's clamp, at both alignments; against the float64 product; the driver is cached
    under its own key."""
    _need(name)
    kind = ftile.KIND[name]
    rng = np.random.default_rng(k * n)
    a = rng.standard_normal((1, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    f = np.float32
    for align in (4096, fgemm.HUGE_PAGE):
        packed = fgemm.Packed(w, w, kind, align)
        for alpha, bb, code, p0, p1 in ((1.0, bias, epilogue.NONE, f(0), f(0)),
                                        (0.5, None, epilogue.CLIP, f(0), f(6))):
            want = _want(a, w, alpha, bb, code, p0, p1)
            for streams in (2, 4, 8, 12):
                outs = []
                for rest in (False, True):
                    monkeypatch.setattr(fgemm, "ROW_STREAMS_REST", rest)  # (read when the call binds)
                    out = np.full((1, n), np.nan, np.float32)
                    fgemm.row(kind, packed, alpha, bb, code, p0, p1, streams=streams)(a, out)
                    outs.append(out)
                assert_close(outs[1], want, err_msg=f"{name} streams {streams} align {align}")
                np.testing.assert_array_equal(outs[1], outs[0], err_msg=f"{name} streams {streams} align {align}")
    from kernelkit_numba.cache import CLOSURE_KEY

    d = fgemm._rows_driver(kind, epilogue.NONE, 8, 0, 3, True)
    assert getattr(getattr(d, "py_func", d), CLOSURE_KEY) == f"fgemm.rows.{kind}.{epilogue.NONE}.s8.r"


def test_row_head_streams_keep_nan_and_inf():
    """The streams' tiles keep NaN and clamp +-inf as the other tiles do (Relu6's clamp in the registers)."""
    _need("avx512")
    k, n = 64, 256
    a = np.ones((1, k), np.float32)
    a[0, 3] = np.nan
    b = np.ones((k, n), np.float32)
    b[:, 100:] = 0
    b[3, 100:] = 0  # NaN * 0 is NaN: every column sees the NaN
    out = np.empty((1, n), np.float32)
    fgemm.row(2, fgemm.Packed(b, b, 2), 1.0, None, epilogue.CLIP, np.float32(0), np.float32(6), streams=4)(a, out)
    assert np.isnan(out).all()
    a[0, 3] = np.inf
    b[3, 100:] = 1
    fgemm.row(2, fgemm.Packed(b, b, 2), 1.0, None, epilogue.CLIP, np.float32(0), np.float32(6), streams=4)(a, out)
    assert np.array_equal(out, np.full((1, n), 6, np.float32))


@pytest.mark.parametrize("system", ["no_thp", "windows"])
def test_huge_page_weights_where_the_system_has_none(system, monkeypatch):
    """gemm.HEAD_ALIGN's default (fgemm.HUGE_PAGE) where the system has no transparent huge pages: a Linux kernel
    built without them refuses MADV_HUGEPAGE (EINVAL, which Python's madvise raises), and Windows' mmap has no
    MAP_* flags and takes no ``flags``. aligned_empty still gives the aligned array (the same values packed, on 4 KiB
    pages), and pack_b the same panels as at 4096, read-only (issue 11, session 18's review: both raised before)."""
    import errno
    import mmap

    real = mmap.mmap
    if system == "no_thp":
        class NoThp(real):
            def madvise(self, *args):
                raise OSError(errno.EINVAL, "Invalid argument")

        monkeypatch.setattr(mmap, "mmap", NoThp)
    else:
        def windows(fileno, length, tagname=None, access=mmap.ACCESS_DEFAULT, offset=0):
            return real(fileno, length)  # (Windows' signature: no flags; -1 an anonymous mapping)

        monkeypatch.setattr(mmap, "mmap", windows)
        for name in [n for n in dir(mmap) if n.startswith(("MAP_", "MADV_"))]:
            monkeypatch.delattr(mmap, name)
    out = fgemm.aligned_empty(1000, fgemm.HUGE_PAGE)
    assert out.dtype == np.float32 and out.size == 1000 and out.ctypes.data % fgemm.HUGE_PAGE == 0
    out[:] = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32))
    rng = np.random.default_rng(18)
    w = rng.standard_normal((1280, 1000)).astype(np.float32)  # (5 MB packed: past HUGE_PAGE, MobileNetV2's head)
    nr = fgemm.NR[2]
    huge, page = fgemm.pack_b(w, nr, fgemm.HUGE_PAGE), fgemm.pack_b(w, nr, 4096)
    assert huge.ctypes.data % fgemm.HUGE_PAGE == 0 and not huge.flags.writeable
    np.testing.assert_array_equal(huge, page)

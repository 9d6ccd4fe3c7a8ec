"""Property tests: Gemm (transposes, alpha/beta, every C broadcast form, fused activation) and
MatMul (2-D, batched, broadcast batch dims, 1-D operands)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# every example builds a Session; a few dozen cover the space without slowing CI (kept per test,
# not as a global hypothesis profile, so other packages' tests keep their settings)
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

ACTS = [("", ()), ("Relu", ()), ("Clip", (0.0, 6.0)), ("Sigmoid", ()), ("Gelu", (0.0,)), ("LeakyRelu", (0.1,))]


@FEW
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.booleans(), st.booleans(),
       st.sampled_from([None, "n", "1n", "m1", "mn", "1", "scalar"]), st.sampled_from([1.0, 0.5, -2.0]),
       st.sampled_from([1.0, 0.0, 0.25]), st.sampled_from(ACTS), st.integers(0, 2**16))
def test_gemm_matches_reference(check, m, k, n, trans_a, trans_b, c_form, alpha, beta, act, seed):
    r = np.random.default_rng(seed)
    a = r.uniform(-1, 1, (k, m) if trans_a else (m, k)).astype(np.float32)
    b = r.uniform(-1, 1, (n, k) if trans_b else (k, n)).astype(np.float32)
    c_shape = {None: None, "n": (n,), "1n": (1, n), "m1": (m, 1), "mn": (m, n), "1": (1,), "scalar": ()}[c_form]
    c = None if c_shape is None else r.uniform(-1, 1, c_shape).astype(np.float32)
    attrs = {"transA": int(trans_a), "transB": int(trans_b), "alpha": alpha, "beta": beta,
             "activation": act[0], "activation_params": list(act[1])}
    check("Gemm", [a, b, c], attrs, constants=(1, 2))


batch = st.lists(st.integers(1, 3), max_size=2)


@FEW
@given(batch, batch, st.integers(1, 7), st.integers(1, 7), st.integers(1, 7), st.sampled_from(["2d", "vec_a", "vec_b"]),
       st.sampled_from(ACTS), st.integers(0, 2**16))
def test_matmul_matches_reference(check, batch_a, batch_b, m, k, n, form, act, seed):
    r = np.random.default_rng(seed)
    # make the batch dims broadcastable: where both have an axis, one of them is 1 or they agree
    rank = min(len(batch_a), len(batch_b))
    for i in range(1, rank + 1):
        if batch_a[-i] != batch_b[-i] and 1 not in (batch_a[-i], batch_b[-i]):
            batch_b[-i] = 1
    a_shape = (k,) if form == "vec_a" else (*batch_a, m, k)
    b_shape = (k,) if form == "vec_b" else (*batch_b, k, n)
    a = r.uniform(-1, 1, a_shape).astype(np.float32)
    b = r.uniform(-1, 1, b_shape).astype(np.float32)
    check("MatMul", [a, b], {"activation": act[0], "activation_params": list(act[1])})


def test_gemm_nt_rows_and_columns(check):
    """gemm_nt (transB, 2 to NT_MAX_ROWS rows, 16+ columns; 64 rows: the BLAS path): row counts
    around its blocks of four, column counts with a narrower last group, an odd K, C per column /
    full / none, alpha, activations."""
    r = np.random.default_rng(11)
    for m, k, n in [(2, 7, 16), (3, 1, 17), (5, 33, 19), (8, 64, 22), (13, 9, 1000), (16, 130, 23), (64, 130, 23)]:
        a = r.uniform(-1, 1, (m, k)).astype(np.float32)
        b = r.uniform(-1, 1, (n, k)).astype(np.float32)
        check("Gemm", [a, b, r.uniform(-1, 1, n).astype(np.float32)], {"transB": 1, "activation": "Relu"},
              constants=(1, 2))
        check("Gemm", [a, b, r.uniform(-1, 1, (m, n)).astype(np.float32)], {"transB": 1, "alpha": -0.5,
                                                                           "beta": 2.0}, constants=(1,))
        check("Gemm", [a, b, None], {"transB": 1, "activation": "Gelu"}, constants=(1,))


def test_gemm_nt_kernel_ranges():
    """gemm_nt writes exactly the column groups it is given (shards meet without overlap)."""
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels.gemm_nt import gemm_nt

    r = np.random.default_rng(3)
    a = r.uniform(-1, 1, (6, 21)).astype(np.float32)
    b = r.uniform(-1, 1, (23, 21)).astype(np.float32)
    y = np.full((6, 23), np.nan, np.float32)
    gemm_nt(a, b, y, 0, 2)
    assert np.isnan(y[:, 8:]).all() and not np.isnan(y[:, :8]).any()
    gemm_nt(a, b, y, 2, 6)
    assert_close(y, a @ b.T)


def test_one_row_products_take_the_row_call(check):
    """Batch-1 Gemm (M = 1: classifier heads, MLP layers at batch 1) on one thread binds ``serial_call``
    (np.matmul into the output, the bias in place): every C form per column, transposes, alpha,
    beta, activations, against the reference; a C that is not one value per column, or two rows,
    keeps the general path."""
    from kernelkit.invoke import KernelContext
    from kernelkit.ir import Node, TensorSpec
    from kernelkit_numba.kernels.gemm import Gemm

    r = np.random.default_rng(5)
    k, n = 37, 50
    for trans_a, trans_b, c_shape, alpha, beta, act in [
            (0, 1, (n,), 1.0, 1.0, ("", ())), (0, 0, (1, n), 0.5, 2.0, ("Relu", ())),
            (1, 1, None, -2.0, 1.0, ("Gelu", (0.0,))), (1, 0, (n,), 1.0, 0.0, ("Clip", (-0.2, 0.3))),
            (0, 1, (n,), 1.0, 0.25, ("Sigmoid", ())), (0, 0, (1, 1), 1.0, 1.0, ("", ())),
            (0, 1, (n,), 1.0, 1.0, ("Tanh", ())), (0, 0, (1, n), 1.0, 0.5, ("Tanh", ())),
            (1, 0, None, 0.5, 1.0, ("Tanh", ()))]:  # Tanh: NumPy's tanh after the bias (BERT's pooler)
        a = r.uniform(-1, 1, (k, 1) if trans_a else (1, k)).astype(np.float32)
        b = r.uniform(-1, 1, (n, k) if trans_b else (k, n)).astype(np.float32)
        c = None if c_shape is None else r.uniform(-1, 1, c_shape).astype(np.float32)
        attrs = {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta, "activation": act[0],
                 "activation_params": list(act[1])}
        check("Gemm", [a, b, c], attrs, constants=(1, 2))
        kernel = Gemm()
        kernel.context = KernelContext(Node("Gemm", ["a", "b", "c"], ["y"], {}, "n"), None, {}, 1)
        specs = [TensorSpec(x.shape, "float32") for x in (a, b) + (() if c is None else (c,))]
        kernel.prepare(specs, attrs)
        row = c is None or c.size == n
        assert kernel.bind(None).__qualname__.startswith("Gemm.serial_call.") == row
        if row:
            want = kernel.execute(a, b, c) if c is not None else kernel.execute(a, b)
            out = np.full((1, n), np.nan, np.float32)
            got = kernel.bind(None)(a, b, c, out=out) if c is not None else kernel.bind(None)(a, b, out=out)
            assert got is out
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    kernel = Gemm()  # two rows by B (k, n): BLAS's row call too (session 10: the MLP's 64 x 1024 x 10 head)
    kernel.context = KernelContext(Node("Gemm", ["a", "b"], ["y"], {}, "n"), None, {}, 1)
    kernel.prepare([TensorSpec((2, k), "float32"), TensorSpec((k, n), "float32")], {})
    assert kernel.bind(None).__qualname__.startswith("Gemm.serial_call.")
    kernel = Gemm()  # two rows by a transposed B: gemm_nt's dot products, the general path
    kernel.context = KernelContext(Node("Gemm", ["a", "b"], ["y"], {}, "n"), None, {}, 1)
    kernel.prepare([TensorSpec((2, k), "float32"), TensorSpec((n, k), "float32")], {"transB": 1})
    assert not kernel.bind(None).__qualname__.startswith("Gemm.serial_call.")


@pytest.mark.parametrize("trans_b, act, alpha, beta, with_c", [(1, "", 1.0, 1.0, True), (0, "Relu", 0.5, 2.0, True),
                                                              (1, "Sigmoid", 1.0, 1.0, False)])
def test_one_row_heads_on_the_row_tiles(monkeypatch, trans_b, act, alpha, beta, with_c):
    """A one-row Gemm by constant weights (a classifier head) at one thread runs fgemm.row (gemm.HEAD_ROW:
    the weights packed once, 1-row tiles over them; a masked last panel) with alpha, beta, the bias and
    the activation, against the reference kernels over several runs; a head the switch leaves off runs
    np.matmul."""
    import kernelkit
    from kernelkit_converters.onnx import convert
    from kernelkit_numba.kernels import fgemm, ftile, gemm
    from onnx import TensorProto, helper, numpy_helper

    rows = []
    made = fgemm.row
    monkeypatch.setattr(fgemm, "row", lambda *args, **kw: rows.append(args) or made(*args, **kw))
    monkeypatch.setattr(gemm, "HEAD_ROW_BYTES", 4 * 300 * 70)
    r = np.random.default_rng(trans_b)
    for n in (70, 69):  # 70 x 300 floats: on; 69: below HEAD_ROW_BYTES, np.matmul
        b = r.uniform(-1, 1, (n, 300) if trans_b else (300, n)).astype(np.float32)
        inits = [numpy_helper.from_array(b, "b")]
        if with_c:
            inits.append(numpy_helper.from_array(r.uniform(-1, 1, n).astype(np.float32), "c"))
        node = helper.make_node("Gemm", ["a", "b"] + (["c"] if with_c else []), ["g"], transB=trans_b, alpha=alpha,
                                beta=beta)
        nodes = [node] + ([helper.make_node(act, ["g"], ["y"])] if act else [])
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 300])],
                                  [helper.make_tensor_value_info("y" if act else "g", TensorProto.FLOAT, [1, n])],
                                  inits)
        model = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
        sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=1)
        ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
        for _ in range(3):
            a = {"a": r.uniform(-1, 1, (1, 300)).astype(np.float32)}
            np.testing.assert_allclose(sess.run(None, a)[0], ref.run(None, a)[0], rtol=1e-5, atol=1e-5)
    assert len(rows) == (1 if ftile.choice()[0] in (1, 2) else 0)


@pytest.mark.parametrize("k", [512, 1280, 2048])
@pytest.mark.parametrize("trans_b, with_c", [(1, True), (0, True), (1, False)])
def test_model_heads_on_the_row_tiles_at_each_setting(monkeypatch, k, trans_b, with_c):
    """The heads of ResNet-18, MobileNetV2 / EfficientNet-B0 and ResNet-50 (1 x K x 1000 by a constant
    weight, transB both ways, with and without the bias) at one thread on fgemm.row at both settings of
    each of its switches (fgemm.ROW_STREAMS 1 and 4, fgemm.ROW_PREFETCH 0 and 32, gemm.HEAD_ALIGN 0,
    4096 and a huge page; read when the node binds), against the reference kernel over several runs."""
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_converters.onnx import convert
    from kernelkit_numba.kernels import fgemm, ftile, gemm
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(k + trans_b)
    n = 1000
    b = (r.standard_normal((n, k) if trans_b else (k, n)) / np.sqrt(k)).astype(np.float32)
    inits = [numpy_helper.from_array(b, "b")]
    if with_c:
        inits.append(numpy_helper.from_array(r.standard_normal(n).astype(np.float32), "c"))
    node = helper.make_node("Gemm", ["a", "b"] + (["c"] if with_c else []), ["y"], transB=trans_b)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    model = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
    drivers, made = [], fgemm._rows_driver
    monkeypatch.setattr(fgemm, "_rows_driver", lambda *args: drivers.append(args[2]) or made(*args))
    for streams, prefetch, align in ((1, 0, 1), (4, 0, 4096), (1, 32, fgemm.HUGE_PAGE), (4, 0, 1)):
        monkeypatch.setattr(fgemm, "ROW_STREAMS", streams)
        monkeypatch.setattr(fgemm, "ROW_PREFETCH", prefetch)
        monkeypatch.setattr(gemm, "HEAD_ALIGN", align)
        sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=1)
        for _ in range(3):
            a = {"a": r.uniform(-1, 1, (1, k)).astype(np.float32)}
            assert_close(sess.run(None, a)[0], ref.run(None, a)[0],
                         err_msg=f"streams {streams} prefetch {prefetch} align {align}")
        packed = next(s.kernel for s in sess.plan.kernel_steps() if s.op == "Gemm")._const_b.packed
        huge = packed is not None and align >= fgemm.HUGE_PAGE and packed.bp.nbytes >= fgemm.HUGE_PAGE
        assert packed is None or packed.bp.ctypes.data % (align if huge or align < fgemm.HUGE_PAGE else 4096) == 0
    assert drivers == ([4, 4] if ftile.choice()[0] in (1, 2) else [])  # the row tiles: avx2 / avx512


def _tanh_head(r, k: int, n: int, trans_b: int, c_shape, **gemm_attrs):
    """A converted one-row Gemm (1 x k x n, B constant, C of ``c_shape`` or absent) + Tanh: BERT's pooler's shape."""
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper, numpy_helper

    b = (r.standard_normal((n, k) if trans_b else (k, n)) / np.sqrt(k)).astype(np.float32)
    inits, ins = [numpy_helper.from_array(b, "b")], ["a", "b"]
    if c_shape is not None:
        inits.append(numpy_helper.from_array(r.uniform(-1, 1, c_shape).astype(np.float32), "c"))
        ins.append("c")
    nodes = [helper.make_node("Gemm", ins, ["g"], transB=trans_b, **gemm_attrs), helper.make_node("Tanh", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


@pytest.mark.parametrize("trans_b, with_c", [(0, True), (1, True), (0, False)])
def test_tanh_head_on_the_row_tiles(monkeypatch, trans_b, with_c):
    """A one-row Gemm + Tanh by constant weights (BERT's pooler, 1 x 768 x 768) at one thread: with
    gemm.HEAD_ROW_TANH on, fgemm.row's tiles with the bias in the registers and np.tanh over the output after;
    off, np.matmul, the bias and np.tanh (no row tiles); both against the reference kernels over several runs."""
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import fgemm, ftile, gemm

    k = n = 768
    r = np.random.default_rng(11 + trans_b)
    model = _tanh_head(r, k, n, trans_b, (n,) if with_c else None)
    ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
    rows, made = [], fgemm.row
    monkeypatch.setattr(fgemm, "row", lambda *args, **kw: rows.append(args) or made(*args, **kw))
    for on in (False, True):
        monkeypatch.setattr(gemm, "HEAD_ROW_TANH", on)  # (read when the node binds)
        sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=1)
        assert [s.kernel.act[0] for s in sess.plan.kernel_steps() if s.op == "Gemm"] == [gemm.TANH]  # (fused)
        for _ in range(3):
            a = {"a": r.uniform(-3, 3, (1, k)).astype(np.float32)}
            assert_close(sess.run(None, a)[0], ref.run(None, a)[0], err_msg=f"HEAD_ROW_TANH {on}")
        assert len(rows) == (int(on) if ftile.choice()[0] in (1, 2) else 0)
    assert all(args[4] == gemm.NONE for args in rows)  # (the tiles' epilogue: the bias alone)


def test_matmul_blas_call_binding(check):
    """Static MatMul on one thread: batched products (the attention's) and a 2-D B that fgemm does
    not take bind ``serial_call`` (one np.matmul + the activation), against the reference; a 2-D B
    of a shape fgemm takes keeps the general path (the micro-kernels for a constant weight)."""
    from kernelkit.invoke import KernelContext
    from kernelkit.ir import Node, TensorSpec
    from kernelkit_numba.kernels import fgemm
    from kernelkit_numba.kernels.gemm import MatMul

    r = np.random.default_rng(3)
    for a_shape, b_shape, act, fast in [((1, 4, 16, 8), (1, 4, 8, 16), ("", ()), True),
                                        ((2, 3, 5, 7), (3, 7, 4), ("Relu", ()), True),
                                        ((6, 5), (5, 3), ("Gelu", (0.0,)), True),
                                        ((64, 40), (40, 48), ("", ()), fgemm.kind_for(64, 40, 48) is None)]:
        a = r.uniform(-1, 1, a_shape).astype(np.float32)
        b = r.uniform(-1, 1, b_shape).astype(np.float32)
        attrs = {"activation": act[0], "activation_params": list(act[1])} if act[0] else {}
        check("MatMul", [a, b], attrs)
        check("MatMul", [a, b], attrs, constants=(1,))
        kernel = MatMul()
        kernel.context = KernelContext(Node("MatMul", ["a", "b"], ["y"], {}, "n"), None, {}, 1)
        kernel.prepare([TensorSpec(a.shape, "float32"), TensorSpec(b.shape, "float32")], attrs)
        call = kernel.bind(None)
        assert call.__qualname__.startswith("MatMul.serial_call.") == fast
        if fast:
            out = np.full(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), np.nan,
                          np.float32)
            assert call(a, b, out=out) is out
            np.testing.assert_allclose(out, kernel.execute(a, b), rtol=1e-5, atol=1e-6)


def _mlp_model(r, m, sizes):
    """Gemm (transB, bias) -> Relu layers and a last Gemm without activation: the MLP b64's chain at ``m`` rows."""
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, x = [], [], "x"
    for i, (fin, fout) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [numpy_helper.from_array((r.standard_normal((fout, fin)) / np.sqrt(fin)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(r.uniform(-0.1, 0.1, fout).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        x = f"g{i}"
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, sizes[0]])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [m, sizes[-1]])], inits)
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


@pytest.mark.parametrize("m, sizes", [(64, (1024, 1024, 512, 10)), (37, (512, 1024, 10)), (9, (1024, 300, 10))])
def test_mlp_one_thread_padded_a(monkeypatch, m, sizes):
    """An MLP's Gemm chain at one thread with fgemm.PAD_A_ONE_THREAD: the bound calls whose K * 4 is a multiple of
    PAD_A_EVERY (4096; 2048) and N at least PAD_A_MIN_N broadcast from a copy of A with rows K + pad apart, the
    others (the 10-column heads) from A itself; the outputs bit for bit those of the switch off and close to the
    reference's, bias and Relu in the epilogue, M not a multiple of the tiles, over several runs."""
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import fgemm, ftile, gemm

    r = np.random.default_rng(m + sizes[0] + 1)
    model = _mlp_model(r, m, sizes)
    ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
    feeds = [{"x": r.standard_normal((m, sizes[0])).astype(np.float32)} for _ in range(3)]
    strides = []
    copy = fgemm.copy_rows
    monkeypatch.setattr(fgemm, "copy_rows", lambda a2, m_n, k_n, ap, ldp: strides.append(ldp) or
                        copy(a2, m_n, k_n, ap, ldp))
    got = {}
    for pad, every in ((0, 4096), (16, 4096), (16, 2048)):
        monkeypatch.setattr(fgemm, "PAD_A_ONE_THREAD", pad)
        monkeypatch.setattr(fgemm, "PAD_A_EVERY", every)
        strides.clear()
        sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=1)
        got[pad, every] = [sess.run(None, feed)[0] for feed in feeds]
        for y, feed in zip(got[pad, every], feeds):
            assert_close(y, ref.run(None, feed)[0], err_msg=f"pad {pad} every {every}")
        if ftile.choice()[0] in (1, 2):  # the tiles (generic: BLAS for these shapes)
            ks = [(k, n) for k, n in zip(sizes[:-1], sizes[1:])
                  if fgemm.kind_for(m, k, n, gemm.HEAD_NARROW) is not None]
            padded = [k + pad for k, n in ks if pad and (4 * k) % every == 0 and n >= fgemm.PAD_A_MIN_N]
            assert sorted(set(strides)) == sorted(set(padded))
            assert len(strides) == len(padded) * len(feeds)
    for key, ys in got.items():
        for y, y0 in zip(ys, got[0, 4096]):
            np.testing.assert_array_equal(y, y0, err_msg=f"pad, every {key}")  # the copy changes no arithmetic


@pytest.mark.parametrize("m, sizes", [(64, (784, 1024, 1024, 10)), (37, (301, 130, 80, 10)), (9, (67, 40, 10))])
def test_mlp_one_thread_wide_tiles(monkeypatch, m, sizes):
    """An MLP's Gemm chain at one thread with fgemm.WIDE_ONE_THREAD: the bound calls that would run the avx512 tiles
    run the WIDE ones (8 x 48, the packed B in 48-column panels), the 10-column heads the NARROW tiles as before;
    the outputs bit for bit those of the 8-row avx512 tiles (MR_ONE_THREAD 8) and close to the reference's, bias and
    Relu in the epilogue, M not a multiple of the tiles, with A's rows copied apart (PAD_A_ONE_THREAD) and without,
    over several runs."""
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import fgemm, ftile

    if ftile.choice()[0] != 2:
        pytest.skip("the WIDE tiles: avx512 only")
    r = np.random.default_rng(m + sizes[0] + 2)
    model = _mlp_model(r, m, sizes)
    ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
    feeds = [{"x": r.standard_normal((m, sizes[0])).astype(np.float32)} for _ in range(3)]
    monkeypatch.setattr(fgemm, "MR_ONE_THREAD", 8)
    got = {}
    for wide, pad in ((0, 0), (1, 0), (1, 16)):
        monkeypatch.setattr(fgemm, "WIDE_ONE_THREAD", wide)
        monkeypatch.setattr(fgemm, "PAD_A_ONE_THREAD", pad)
        sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=1)
        got[wide, pad] = [sess.run(None, feed)[0] for feed in feeds]
        for y, feed in zip(got[wide, pad], feeds):
            assert_close(y, ref.run(None, feed)[0], err_msg=f"wide {wide} pad {pad}")
        gemms = [s.kernel for s in sess.plan.kernel_steps() if s.op == "Gemm"]
        kinds = [g._const_b.packed.kind for g in gemms if g._const_b.packed is not None]
        assert kinds[:len(sizes) - 2] == [fgemm.WIDE if wide else 2] * (len(sizes) - 2)
        assert all(k == fgemm.NARROW for k in kinds[len(sizes) - 2:])
    for key, ys in got.items():
        for y, y0 in zip(ys, got[0, 0]):
            np.testing.assert_array_equal(y, y0, err_msg=f"wide, pad {key}")  # the same FMAs in the same order


@pytest.mark.parametrize("m, sizes", [(64, (784, 96, 257, 10)), (37, (301, 130, 33, 10)), (9, (67, 40, 10))])
def test_mlp_one_thread_products_at_each_setting(monkeypatch, m, sizes):
    """An MLP's Gemm chain at one thread (Gemm's bound serial call on fgemm's tiles, bias and Relu in the
    epilogue, the 10-column head on the NARROW tiles) at each setting of the one-thread switches
    (fgemm.PACK_ALIGN_ONE_THREAD: B packed on a cache line, NumPy's placement or a huge page; WHOLE_ONE_THREAD:
    whole row tiles on tiles without the last-row selects, inlined or each a function; KC: K in chunks;
    MR_ONE_THREAD: 8- or 12/8-row tiles;
    B_AHEAD_ONE_THREAD, PREFETCH_ONE_THREAD), M not a multiple of the tiles (a last partial row tile), K odd,
    against the reference kernels over several runs; the packed weights on the alignment asked for."""
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import fgemm, ftile, gemm

    r = np.random.default_rng(m + sizes[0])
    model = _mlp_model(r, m, sizes)
    ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
    settings = [(0, 1024, None, 8, 8, 0), (64, 1024, 8, 8, 8, 1), (64, 128, 12, 16, 4, 2),
                (fgemm.HUGE_PAGE, 200, 12, 0, 0, 0), (64, 1024, 12, 8, 8, 2), (64, 256, None, 8, 8, 1),
                (64, 1024, 12, 8, 8, 1)]
    made, driver = [], fgemm.driver
    monkeypatch.setattr(fgemm, "driver", lambda *args, **kw: made.append((args[2], kw.get("whole", 0))) or
                        driver(*args, **kw))
    for align, kc, mr, ahead, pf, whole in settings:
        made.clear()
        monkeypatch.setattr(fgemm, "PACK_ALIGN_ONE_THREAD", align)
        monkeypatch.setattr(fgemm, "WHOLE_ONE_THREAD", whole)
        monkeypatch.setattr(fgemm, "KC", kc)
        monkeypatch.setattr(fgemm, "MR_ONE_THREAD", mr)
        monkeypatch.setattr(fgemm, "B_AHEAD_ONE_THREAD", ahead)
        monkeypatch.setattr(fgemm, "PREFETCH_ONE_THREAD", pf)
        sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=1)
        for _ in range(3):
            feed = {"x": r.standard_normal((m, sizes[0])).astype(np.float32)}
            assert_close(sess.run(None, feed)[0], ref.run(None, feed)[0],
                         err_msg=f"align {align} kc {kc} mr {mr} ahead {ahead} pf {pf} whole {whole}")
        if ftile.choice()[0] in (1, 2):  # the tiles (generic: the general path's BLAS for these shapes)
            rows = mr if mr and ftile.choice()[0] == 2 else fgemm.MR[ftile.choice()[0]]
            assert (rows, whole) in made  # the bound calls' drivers: MR_ONE_THREAD's rows, WHOLE_ONE_THREAD
            gemms = [s.kernel for s in sess.plan.kernel_steps() if s.op == "Gemm"]
            packs = [g._const_b.packed for g, k, n in zip(gemms, sizes[:-1], sizes[1:])
                     if fgemm.kind_for(m, k, n, gemm.HEAD_NARROW) is not None]  # (a head of K < 256: np.matmul)
            assert len(packs) >= len(sizes) - 2 and all(p is not None for p in packs)
            for p in packs:
                at = p.bp.ctypes.data
                if align == 64:
                    assert at % 64 == 0
                elif align >= fgemm.HUGE_PAGE:
                    assert at % (align if p.bp.nbytes >= fgemm.HUGE_PAGE else 4096) == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("trans_b, alpha, beta, c_shape", [(1, 0.5, 2.0, (1, 768)), (0, 1.5, 1.0, (768,)),
                                                          (1, 1.0, 0.0, (768,)), (0, 0.75, 1.0, None)])
def test_tanh_head_alpha_beta_and_c_against_the_reference(threads, trans_b, alpha, beta, c_shape, monkeypatch):
    """gemm.HEAD_ROW_TANH (on by default since session 18) with the Gemm's alpha and beta, C as (1, N) or (N,) or
    absent, at one and two threads: the row tiles' alpha * A @ B + beta * C, then np.tanh over the node's output
    buffer, against the reference kernels on the same session (issue 11, session 18's review)."""
    import kernelkit
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import fgemm, ftile, gemm

    k = n = 768
    r = np.random.default_rng(18 + trans_b)
    model = _tanh_head(r, k, n, trans_b, c_shape, alpha=alpha, beta=beta)
    ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
    rows, made = [], fgemm.row
    monkeypatch.setattr(fgemm, "row", lambda *args, **kw: rows.append(args) or made(*args, **kw))
    monkeypatch.setattr(gemm, "HEAD_ROW_TANH", True)
    sess = kernelkit.Session(model, vendors=["numba"], fallback=False, threads=threads)
    for _ in range(3):
        a = {"a": r.uniform(-3, 3, (1, k)).astype(np.float32)}
        want = ref.run(None, a)[0]
        assert_close(sess.run(None, a)[0], want, err_msg=f"threads {threads}")
    if ftile.choice()[0] in (1, 2):
        assert len(rows) == 1 and rows[0][2] == np.float32(alpha)  # (the row tiles ran: alpha in their call)

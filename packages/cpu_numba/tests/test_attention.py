"""The numba Attention kernel against the reference, and core's fuse_attention pass: the fused
graph gives the unfused graph's result, and the pass leaves non-matching blocks alone."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.passes import passes
from kernelkit.testing import assert_close
from kernelkit_numba import config
from kernelkit_numba.kernels import attention as attention_kernel


def _r(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("q_shape, k_shape, v_shape, attrs", [
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), {}),
    ((1, 4, 9, 8), (1, 2, 6, 8), (1, 2, 6, 8), {"scale": 0.3}),  # grouped-query heads
    ((2, 5, 12), (2, 7, 12), (2, 7, 9), {"q_num_heads": 3, "kv_num_heads": 3}),
    ((1, 6, 16), (1, 4, 8), (1, 4, 8), {"q_num_heads": 4, "kv_num_heads": 2, "scale": 2.0}),
])
def test_attention_matches_reference(check, rng, q_shape, k_shape, v_shape, attrs):
    check("Attention", [_r(rng, *q_shape), 3 * _r(rng, *k_shape), _r(rng, *v_shape)], attrs)


def test_attention_row_blocks_and_shards(check, rng, monkeypatch):
    """Long key sequences are cut into blocks of query rows; with the thresholds at zero and three
    threads every block is a shard of the pool."""
    monkeypatch.setattr(attention_kernel, "SCRATCH_BYTES", 4 * 40 * 7)
    monkeypatch.setattr(config, "SERIAL_WORK", 0)
    monkeypatch.setattr(config, "MIN_SHARD_WORK", 0)
    q, k, v = _r(rng, 2, 3, 33, 8), _r(rng, 2, 3, 40, 8), _r(rng, 2, 3, 40, 4)
    want = kk.testing.run_single_op("Attention", [q, k, v], {}, vendors=["reference"], fallback=False)[0]
    got = kk.testing.run_single_op("Attention", [q, k, v], {}, vendors=["numba"], fallback=False, threads=3)[0]
    assert_close(got, want)


def test_attention_special_values(check, rng):
    """A NaN in Q makes its row NaN; an all -inf score row gives zeros (the reference's rules)."""
    q, k, v = _r(rng, 1, 2, 4, 8), _r(rng, 1, 2, 5, 8), _r(rng, 1, 2, 5, 3)
    q[0, 0, 1, 2] = np.nan
    q[0, 1, 2, :] = -np.inf
    k[0, 1] = np.abs(k[0, 1]) + 0.1
    got = check("Attention", [q, k, v], {})[0]
    assert np.isnan(got[0, 0, 1]).all() and (got[0, 1, 2] == 0).all()


@pytest.mark.parametrize("q_shape, k_shape, mask_shape, attrs", [
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 1, 1, 7), {}),  # BERT's padding bias: (batch, 1, 1, keys)
    ((1, 2, 4, 8), (1, 2, 6, 8), (4, 6), {"scale": 0.3}),  # (queries, keys)
    ((2, 5, 12), (2, 7, 12), (1, 3, 5, 7), {"q_num_heads": 3, "kv_num_heads": 3}),  # 3-D, per head
])
def test_attention_with_an_additive_mask_matches_reference(check, rng, q_shape, k_shape, mask_shape, attrs):
    mask = np.where(rng.uniform(size=mask_shape) < 0.3, np.float32(-10000), _r(rng, *mask_shape))
    check("Attention", [_r(rng, *q_shape), 3 * _r(rng, *k_shape), _r(rng, *k_shape), mask.astype(np.float32)],
          attrs)


def test_attention_mask_of_minus_inf_rows(check, rng):
    """A query row whose mask is -inf everywhere gives zeros, as the reference; -inf on some keys
    gives them no weight."""
    q, k, v = _r(rng, 1, 2, 4, 8), _r(rng, 1, 2, 5, 8), _r(rng, 1, 2, 5, 3)
    mask = np.zeros((4, 5), np.float32)
    mask[1] = -np.inf
    mask[2, :3] = -np.inf
    got = check("Attention", [q, k, v, mask], {})[0]
    assert (got[:, :, 1] == 0).all() and np.isfinite(got).all()


def test_attention_declines_masks_and_caches():
    spec = kk.TensorSpec((1, 2, 3, 4), "float32")
    ok = attention_kernel.supports
    assert ok([spec, spec, spec], {"scale": None})
    assert not ok([spec, spec, spec, kk.TensorSpec((3, 3), "bool")], {})
    assert ok([spec, spec, spec, kk.TensorSpec((1, 1, 1, 3), "float32")], {})
    assert not ok([spec, spec, spec, None, spec], {})
    assert not ok([spec, spec, spec], {"is_causal": 1})
    assert not ok([spec, spec, spec], {"softcap": 1.0})
    assert not ok([spec, spec, spec], {"scale": -1.0})


# -- fuse_attention ---------------------------------------------------------------------------
LOWEST = float(np.finfo(np.float32).min)  # GPT-2's Where value for masked scores


def _block(batch=1, seq=6, keys=None, heads=2, head=4, scale_op="Mul", scale=0.5, softmax_axis=-1,
           three_d=True, extra_reader=False, symbolic=False, two_transposes=False, mask=None, where=None,
           lowest=LOWEST):
    """A transformer's attention block written op by op (as exporters do). ``symbolic``: the batch
    axis is a symbol and the Reshapes copy it (shape entry 0); ``two_transposes``: K is split into
    heads like Q, then transposed by a second Transpose (PyTorch's exports); ``mask``: the shape of
    an additive mask input added after the scale (BERT's padding bias), None for none; ``where``: the
    shape of a boolean mask applied as Where(mask, scores, ``lowest``) (GPT-2's causal mask)."""
    keys = keys or seq
    rng = np.random.default_rng(7)
    g = kk.GraphBuilder("att")
    d = heads * head
    xq, xk, xv = (g.input(n, ("N" if symbolic else batch, s, d)) for n, s in (("q", seq), ("k", keys), ("v", keys)))
    if three_d:
        split = lambda s: g.constant(np.array([0 if symbolic else batch, s, heads, head], np.int64))  # noqa: E731
        q = g.op("Transpose", g.op("Reshape", xq, split(seq)), perm=[0, 2, 1, 3])
        if two_transposes:
            kt = g.op("Transpose", g.op("Transpose", g.op("Reshape", xk, split(keys)), perm=[0, 2, 1, 3]),
                      perm=[0, 1, 3, 2])
        else:
            kt = g.op("Transpose", g.op("Reshape", xk, split(keys)), perm=[0, 2, 3, 1])
        v = g.op("Transpose", g.op("Reshape", xv, split(keys)), perm=[0, 2, 1, 3])
    else:
        q = g.op("Reshape", xq, g.constant(np.array([batch, heads, seq, head], np.int64)))
        if two_transposes:  # K itself, transposed: the fused node reads K
            kt = g.op("Transpose", g.op("Reshape", xk, g.constant(np.array([batch, heads, keys, head], np.int64))),
                      perm=[0, 1, 3, 2])
        else:
            kt = g.op("Reshape", xk, g.constant(np.array([batch, heads, head, keys], np.int64)))
        v = g.op("Reshape", xv, g.constant(np.array([batch, heads, keys, head], np.int64)))
    scores = g.op("MatMul", q, kt)
    if scale_op:
        scores = g.op(scale_op, scores, g.constant(np.float32(scale)))
    if mask is not None:
        scores = g.op("Add", scores, g.input("mask", tuple("N" if d == "N" else d for d in mask)))
    if where is not None:
        scores = g.op("Where", g.input("keep", where, "bool"), scores, g.constant(np.float32(lowest)))
    probs = g.op("Softmax", scores, axis=softmax_axis)
    y = g.op("MatMul", probs, v)
    if three_d:
        y = g.op("Reshape", g.op("Transpose", y, perm=[0, 2, 1, 3]),
                 g.constant(np.array([-1 if symbolic else batch, seq, d], np.int64)))
    g.output(y)
    if extra_reader:
        g.output(g.op("Relu", probs))
    feeds = {"q": _r(rng, batch, seq, d), "k": _r(rng, batch, keys, d), "v": _r(rng, batch, keys, d)}
    if mask is not None:
        shape = tuple(batch if d == "N" else d for d in mask)
        feeds["mask"] = np.where(rng.uniform(size=shape) < 0.3, -10000, 0).astype(np.float32)
    if where is not None:  # causal where it covers (queries, keys), else random, each row keeping one key
        keep = rng.uniform(size=where) < 0.6
        keep[..., 0] = True
        if where[-2:] == (seq, keys):
            keep = np.broadcast_to(np.tril(np.ones((seq, keys), bool)), where).copy()
        feeds["keep"] = keep
    return g.build(), feeds


def _fused_and_plain(model, feeds, **kw):
    fused = kk.Session(model, vendors=["numba", "reference"], fallback=False, **kw)
    plain = kk.Session(model, vendors=["numba", "reference"], fallback=False,
                       passes=[p.name for p in passes() if p.default and p.name != "fuse_attention"])
    return fused, fused.run(None, feeds), plain.run(None, feeds)


@pytest.mark.parametrize("kw", [
    {}, {"scale_op": "Div", "scale": 8.0}, {"scale_op": None}, {"three_d": False},
    {"batch": 2, "seq": 5, "keys": 9, "heads": 3}, {"softmax_axis": 3},
    {"batch": 3, "symbolic": True, "two_transposes": True}, {"two_transposes": True, "three_d": False},
    {"scale_op": "Div", "scale": 8.0, "batch": 2, "symbolic": True, "mask": ("N", 1, 1, 6)},  # BERT's
    {"three_d": False, "mask": (6, 6)},
    {"scale_op": "Div", "scale": 8.0, "batch": 2, "symbolic": True, "where": (1, 1, 6, 6)},  # GPT-2's
    {"three_d": False, "where": (6, 1), "lowest": -np.inf},  # a keys axis of 1 that Where broadcasts
])
def test_fused_block_equals_unfused(kw):
    model, feeds = _block(**kw)
    fused, got, want = _fused_and_plain(model, feeds)
    assert fused.passes_fired.get("fuse_attention") == 1
    ops = [s.op for s in fused.plan.kernel_steps()]
    assert "Softmax" not in ops and ops.count("Attention") == 1
    if kw.get("three_d", True):  # heads read in place: no Transpose left
        assert "Transpose" not in ops
    elif kw.get("two_transposes"):  # K read as it was before its Transpose
        assert "Transpose" not in ops
    for g_, w in zip(got, want):
        assert_close(g_, w)


@pytest.mark.parametrize("kw", [
    {"scale": -0.5},  # the reference's Attention takes sqrt(scale)
    {"softmax_axis": 2},  # not the keys axis
    {"extra_reader": True},  # the probabilities are read elsewhere
    {"mask": (1, 1, 1, 1)},  # a mask shorter than the keys: Attention would pad it with -inf
    {"mask": (2, 1, 6, 6), "three_d": False},  # a mask that widens the scores
    {"where": (1, 1, 6, 6), "lowest": -10000.0},  # Where's value is not the lowest: not a plain mask
])
def test_pass_declines_non_matching_blocks(kw):
    model, feeds = _block(**kw)
    fused, got, want = _fused_and_plain(model, feeds)
    assert "fuse_attention" not in fused.passes_fired
    for g_, w in zip(got, want):
        assert_close(g_, w)


def test_pass_leaves_reference_sessions_alone():
    """Where only the reference would run Attention, the block stays op by op."""
    model, feeds = _block()
    sess = kk.Session(model, vendors=["reference"], fallback=False)
    assert "fuse_attention" not in sess.passes_fired


def test_transformer_block_with_the_benchmark_shapes_is_fused_and_agrees():
    """The benchmark's encoder layer shapes (seq 128, 4 heads of 64), 1 and 2 threads."""
    model, feeds = _block(seq=128, heads=4, head=64, scale=0.125)
    for threads in (1, 2):
        fused, got, want = _fused_and_plain(model, feeds, threads=threads)
        assert fused.passes_fired.get("fuse_attention") == 1
        assert_close(got[0], want[0])

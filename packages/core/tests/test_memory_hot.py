"""The hot memory plan (issue 11, session 12; ``kernelkit.memory.HOT``): the chronological placement
keeps the arena's invariants on random lifetimes, hands a block the memory freed most recently, is
kept only within ``HOT_MAX_GROWTH`` of the smaller best-fit arena and when its writers' destinations
are warmer, and changes no session's outputs; with ``HOT_FAR`` (session 15) the choice among the plans counts
the bytes older than the L2 by how much older."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit import GraphBuilder, Session, memory
from kernelkit.memory import Block, live_peak, place_best, place_blocks, place_hot, write_cost
from kernelkit.testing import assert_close, isolate_registries

REF = {"vendors": ["reference"]}


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    isolate_registries(monkeypatch)


def _disjoint_when_alive(blocks: list[Block], top: int) -> None:
    for i, a in enumerate(blocks):
        assert a.offset >= 0 and a.offset % memory.ALIGN == 0 and a.offset + a.nbytes <= top
        for b in blocks[i + 1:]:
            if a.start <= b.end and b.start <= a.end:  # alive at a common step
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset


lifetimes = st.lists(st.tuples(st.integers(1, 40), st.integers(0, 30), st.integers(0, 8)), min_size=1, max_size=40)
touched = st.lists(st.integers(0, 3 << 20), min_size=40, max_size=40)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lifetimes, touched, st.sampled_from([64 << 10, 1 << 20]), st.sampled_from([0.0, 1.0]))
def test_hot_plans_never_overlap_blocks_alive_together(spans, steps, cache, far):
    memory.HOT_FAR = far  # (put back below: hypothesis runs many examples in one test)
    try:
        _hot_plans_never_overlap(spans, steps, cache, far)
    finally:
        memory.HOT_FAR = 0.0


def _hot_plans_never_overlap(spans, steps, cache, far):
    blocks = [Block(n * 4096, s, s + d) for n, s, d in spans]
    clock = np.concatenate([[0], np.cumsum(steps)]).tolist()
    top = place_hot(blocks, clock, cache)
    _disjoint_when_alive(blocks, top)
    assert top >= live_peak(blocks, 40)
    best_fit = min(place_blocks(blocks), place_blocks(blocks, memory.by_breadth))
    top = place_best(blocks, clock, info := {})
    _disjoint_when_alive(blocks, top)
    # the bound is against best fit; the chronological plan may also come out smaller than best fit
    assert info["best_fit_bytes"] == best_fit and live_peak(blocks, 40) <= top <= best_fit * memory.HOT_MAX_GROWTH
    small = [k for k in ("size", "breadth", "hot") if info[k + "_bytes"] <= best_fit * memory.HOT_MAX_GROWTH]
    warmest = min(small, key=lambda k: (info[k + "_cost"], info[k + "_bytes"]))
    assert write_cost(blocks, clock, far=far) == info[warmest + "_cost"] and top == info[warmest + "_bytes"]
    assert info["hot"] == (warmest == "hot")


def test_the_block_freed_last_is_handed_out(monkeypatch):
    a, b = Block(1024, 0, 1), Block(1024, 0, 2)  # b is read one step after a
    c = Block(1024, 3, 4)
    clock = [k << 20 for k in range(7)]  # every step touches 1 MiB
    place_blocks([a, b, c])
    assert c.offset == a.offset  # best fit: the first of two equal gaps
    top = place_hot([a, b, c], clock)
    assert c.offset == b.offset and top == 2048  # the hot plan: the memory read last
    assert write_cost([a, b, c], clock) < write_cost([a, b, Block(1024, 3, 4, a.offset)], clock)
    monkeypatch.setattr(memory, "HOT", False)
    place_best([a, b, c], clock)
    assert c.offset == a.offset


def test_a_larger_hot_plan_is_dropped(monkeypatch):
    blocks = [Block(1024, 0, 1), Block(1024, 0, 2), Block(1024, 3, 4)]
    clock = [k << 20 for k in range(7)]
    monkeypatch.setattr(memory, "HOT_MAX_GROWTH", 1.0)
    monkeypatch.setattr(memory, "place_hot", lambda blocks, clock: [setattr(b, "offset", i * 1024)
                                                                     for i, b in enumerate(blocks)] and 3072)
    assert place_best(blocks, clock, info := {}) == 2048 and not info["hot"]


def test_bytes_older_than_the_cache_cost_by_how_much_older(monkeypatch):
    clock = [k << 20 for k in range(60)]  # every step touches 1 MiB
    monkeypatch.setattr(memory, "HOT_FAR_BYTES", 32 << 20)
    costs = {}
    for far in (0.0, 1.0, 0.5):
        hist = memory._History(clock, 1 << 20, far)
        hist.mark(0, 4096, 0)  # [0, 4096) last held at step 0, [4096, 8192) at step 9, [8192, 12288) at step 8
        hist.mark(4096, 4096, 9)
        hist.mark(8192, 4096, 8)
        costs[far] = (hist.cost(0, 4096, 10), hist.cost(4096, 4096, 10), hist.cost(8192, 4096, 10),
                      hist.cost(0, 4096, 50), hist.cost(12288, 4096, 10))
    # ages at step 10: 9 MiB, 0, 1 MiB (the cache: not older); at step 50: 49 MiB; beyond the top: never held
    assert costs[0.0] == (4096, 0, 4096, 4096, 4096 * memory.HOT_GROW)  # session 12's cost
    assert costs[1.0] == (4096 * 1.25, 0, 4096, 4096 * 2, 4096 * memory.HOT_GROW * 2)
    assert costs[0.5] == (4096 * 1.125, 0, 4096, 4096 * 1.5, 4096 * memory.HOT_GROW * 1.5)
    blocks = [Block(4096, 0, 0, 0), Block(4096, 10, 11, 0)]
    assert write_cost(blocks, clock, 1 << 20) == write_cost(blocks, clock, 1 << 20, 0.0) == 4096 * (1.05 + 1)
    assert write_cost(blocks, clock, 1 << 20, 1.0) == 4096 * (2.1 + 1.25)


def test_the_far_cost_keeps_the_plan_whose_cold_writes_are_recent(monkeypatch):
    """Four blocks whose hot plan writes the 2 MiB block at step 8 partly over bytes last held at step 3
    (70 MiB of traffic before), best fit over bytes held until step 7 (1 MiB): session 12's cost (every byte
    older than the L2 alike) keeps the hot plan, ``HOT_FAR`` best fit; each planner places as before."""
    monkeypatch.setattr(memory, "HOT_CACHE_BYTES", 1 << 20)
    steps = [4, 48, 16, 1, 48, 2, 16, 1, 1, 48, 48, 4, 0, 16]  # MiB touched by each step
    clock = np.concatenate([[0], np.cumsum(steps)]).astype(int).tolist()
    clock = [c << 20 for c in clock]

    def blocks():
        return [Block(2 << 20, 2, 6), Block(512 << 10, 5, 7), Block(2 << 20, 8, 10), Block(1536 << 10, 0, 3)]

    hot, fit = blocks(), blocks()
    place_hot(hot, clock)
    place_blocks(fit)
    kept = {}
    for far in (0.0, 1.0):
        monkeypatch.setattr(memory, "HOT_FAR", far)
        kept[far] = blocks()
        top = place_best(kept[far], clock, info := {})
        _disjoint_when_alive(kept[far], top)
        assert top == info["best_fit_bytes"] == 3670016
        assert info["hot_cost"] == pytest.approx(write_cost(hot, clock, far=far))
        assert info["size_cost"] == pytest.approx(write_cost(fit, clock, far=far))
    assert [b.offset for b in kept[0.0]] == [b.offset for b in hot] and info["hot"] is False
    assert [b.offset for b in kept[1.0]] == [b.offset for b in fit] != [b.offset for b in hot]
    assert write_cost(hot, clock) < write_cost(fit, clock) and write_cost(hot, clock, far=1.0) > write_cost(
        fit, clock, far=1.0)


def _residual_net(ws):
    """Branches, residual adds (in place), a concat and a chain: values of several sizes and lifetimes."""
    g = GraphBuilder("hot")
    h = g.op("Relu", g.input("x", (2, 8, 16), "float32"), name="r0")
    for i in range(4):
        y = g.op("Tanh", g.op("MatMul", h, g.constant(ws[i], f"w{i}"), name=f"m{i}"), name=f"t{i}")
        h = g.op("Add", h, y, name=f"a{i}")
        if i == 1:
            c = g.op("Concat", h, y, axis=2, name="c")
            h = g.op("Sigmoid", g.op("MatMul", c, g.constant(ws[4], "w4"), name="m4"), name="s")
    g.output(g.op("Neg", h, name="out"))
    return g.build()


@pytest.mark.parametrize("hot", [False, True])
def test_outputs_do_not_depend_on_the_plan(monkeypatch, hot):
    rng = np.random.default_rng(3)
    ws = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(4)]
    ws.append(rng.standard_normal((32, 16)).astype(np.float32))
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    h = np.maximum(x, 0)
    for i in range(4):
        y = np.tanh(h @ ws[i])
        h = h + y
        if i == 1:
            h = 1 / (1 + np.exp(-(np.concatenate([h, y], axis=2) @ ws[4])))
    monkeypatch.setattr(memory, "HOT", hot)
    sess = Session(_residual_net(ws), passes=False, **REF)
    mem = sess.memory()
    assert mem["inplace_steps"] >= 4 and mem["arena_bytes"] <= mem["best_fit_arena_bytes"] * (
        memory.HOT_MAX_GROWTH if hot else 1)
    monkeypatch.setattr(memory, "HOT", not hot)
    other = Session(_residual_net(ws), passes=False, **REF)
    for _ in range(2):  # the second run reuses the arena
        (out,) = sess.run(None, {"x": x})
        (out_other,) = other.run(None, {"x": x})
        assert_close(out, -h)
        np.testing.assert_array_equal(out, out_other)

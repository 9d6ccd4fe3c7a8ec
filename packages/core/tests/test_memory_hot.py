"""The hot memory plan (issue 11, session 12; ``kernelkit.memory.HOT``): the chronological placement
keeps the arena's invariants on random lifetimes, hands a block the memory freed most recently, is
kept only within ``HOT_MAX_GROWTH`` of the smaller best-fit arena and when its writers' destinations
are warmer, and changes no session's outputs."""
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
@given(lifetimes, touched, st.sampled_from([64 << 10, 1 << 20]))
def test_hot_plans_never_overlap_blocks_alive_together(spans, steps, cache):
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
    assert write_cost(blocks, clock) == info[warmest + "_cost"] and top == info[warmest + "_bytes"]
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

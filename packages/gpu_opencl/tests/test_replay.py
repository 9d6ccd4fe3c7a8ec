"""Capture and replay (capture.py): the second run of a shape is recorded, later runs replay it."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
from kernelkit.testing import assert_close
from kernelkit_opencl.capture import Replay


def _gpu(model, **options):
    return kk.Session(model, device="gpu", fallback=False, options={"opencl_tune": False, **options})


def test_replay_follows_new_feeds_and_matches_the_reference(rng, cnn):
    model = cnn(2)
    sess, ref = _gpu(model), kk.Session(model, device="cpu")
    for _ in range(4):
        x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
        keep = x.copy()
        got = sess.run(None, {"x": x})
        for g, want in zip(got, ref.run(None, {"x": x})):
            assert_close(g, want, "float32")
        np.testing.assert_array_equal(x, keep)
    replays = [r for r in sess._replayer.state.values() if isinstance(r, Replay)]
    assert len(replays) == 1 and replays[0].launches >= 6  # every node's launch is recorded


def test_replays_in_flight_keep_their_own_results(rng, cnn):
    model = cnn(1)
    sess, ref = _gpu(model), kk.Session(model, device="cpu")
    warm = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    sess.run(None, {"x": warm})
    sess.run(None, {"x": warm})  # captured
    xs = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(5)]
    wants = [ref.run(None, {"x": x}) for x in xs]
    futures = [sess.run_async(None, {"x": x}) for x in xs]
    for x in xs:
        x[...] = 0.0  # the caller may reuse its arrays once run_async returned
    for fut, want in zip(futures, wants):
        for g, w in zip(fut.result(), want):
            assert_close(g, w, "float32")


def test_a_kernel_reading_feed_values_is_not_replayed(rng):
    g = kk.GraphBuilder("gather")
    data = g.input("data", (5, 3), "float32")
    idx = g.input("idx", (4,), "int64")
    g.output(g.op("Gather", data, idx, axis=0))
    model = g.build()
    sess = _gpu(model)
    d = rng.standard_normal((5, 3)).astype(np.float32)
    for _ in range(4):
        ids = rng.integers(0, 5, 4)
        np.testing.assert_array_equal(sess.run(None, {"data": d, "idx": ids})[0], d[ids])
    assert not any(isinstance(r, Replay) for r in sess._replayer.state.values())
    ids = np.array([0, 1, 7, 2])
    try:
        sess.run(None, {"data": d, "idx": ids})
    except kk.KernelkitError as exc:
        assert "7" in str(exc) or "index" in str(exc).lower()
    else:
        raise AssertionError("an out-of-range index must stay a typed error")


def test_replay_option_off_dispatches_node_by_node(rng, cnn):
    sess = _gpu(cnn(1), replay=False)
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    assert sess._replayer is None

"""cpair.K_SPLIT_PARALLEL (issue 11, session 17; docs/numba.md, "ResNet-50's projections cut by their input channels at
two threads"): the bound parallel call's one-image pair of a 1x1 projection on the rows tiles cuts its input channels
between the sides (each side every output over its channels, side 1 into the layer's buffer, the caller adding the two
sums, the bias and the residual after the join), as cpair.K_SPLIT does for the serial pairs. The sums run in another
order, so the output is checked against the reference and the one-thread path within the fp32 tolerances; the
helper's side run by hand writes the caller's run of it bit for bit into the buffer and nothing into the output."""
from __future__ import annotations

import numpy as np
import pytest
from _conv_layers import _at, _cpair_of, _k_side_by_hand, _kernel, _one_thread, _reference
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import conv_serial, cpair, pairs

RELU = {"activation": "Relu"}

# ResNet-50's 14x14 projection at a quarter of its channels (256 -> 64), 192 -> 48 at 28x28 with the residual and
# Relu, an odd K (385) onto 36 channels (four 8-row panels and one of 4)
LAYERS = [
    ((1, 256, 14, 14), (64, 256, 1, 1), RELU, False, None),
    ((1, 192, 28, 28), (48, 192, 1, 1), RELU, True, None),
    ((1, 385, 14, 14), (36, 385, 1, 1), {}, False, None),
]


def _ids(case):
    return f"{case[0][1]}x{case[0][2]}-{case[1][0]}" + ("+Z" if case[3] else "")


def _rows_tiles(monkeypatch):
    """These tests' pairs on the rows tiles: conv_serial.PAIR_COLS_MAX 0 (on, 196, by default since session 17's F1,
    which pairs ResNet-50's 14x14 projections on the cols tiles, their K cut by cpair.COLS_K_SPLIT: test_pair_whole's
    test_cols_k_split)."""
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", 0)


@pytest.mark.parametrize("case", LAYERS, ids=_ids)
def test_k_split_parallel(case, quiet_server, monkeypatch):
    """K_SPLIT_PARALLEL 784: the bound parallel call's pair cuts K at the middle rounded to 16 (the input's writer
    unknown); the caller alone (the helper 'spinning' but never coming: the caller takes side 1, then the sums)
    equals the reference and the one-thread path within the fp32 tolerances, and so does a call whose output is the
    residual's memory (the residual is copied: side 0's sums go into the output first); the helper's side by hand
    writes the caller's partial sums bit for bit and no output element."""
    xs, ws, attrs, res, _op = case
    inputs, shape, one = _one_thread(case, 5)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 784)
    _rows_tiles(monkeypatch)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    k_n, m_n, l_n = ws[1], ws[0], shape[2] * shape[3]
    assert pair is not None and pair.desc[cpair.OP] == cpair.ROWS
    assert pair.desc[cpair.KS_CUT] == (k_n // 2 + 8) // 16 * 16
    alone = srv.stats["alone"]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == alone + 1 and srv.stats["paired"] == 0
    assert_close(got, _reference(inputs, attrs), np.float32)
    assert_close(got, one, np.float32)
    d = pair.desc
    _k_side_by_hand(srv, d, shape, m_n, l_n)
    if res:  # the output over the residual (RESIDUAL_IN_PLACE's plan): the pair gets a copy of it
        z = inputs[3].copy()
        with conv_serial.config.num_threads(2):
            over = fn(*inputs[:3], z, out=z)
        assert over is z
        assert_close(z, one, np.float32)


def test_k_split_parallel_off_and_elsewhere(quiet_server, monkeypatch):
    """No cut at 0 (196 the default since session 17), on a map above its pixels, on an expansion, below
    K_SPLIT_MIN_K input channels; the serial pairs' switch (K_SPLIT) does not cut the bound parallel call's pairs."""
    quiet_server.ctl[pairs.AWAKE] = 1
    _rows_tiles(monkeypatch)
    expansion = ((1, 64, 14, 14), (256, 64, 1, 1), RELU, True, None)
    shallow = ((1, 96, 14, 14), (24, 96, 1, 1), {}, False, None)
    for name, value, case in (("K_SPLIT_PARALLEL", 0, LAYERS[0]), ("K_SPLIT_PARALLEL", 196, LAYERS[1]),
                              ("K_SPLIT_PARALLEL", 784, expansion), ("K_SPLIT_PARALLEL", 784, shallow),
                              ("K_SPLIT", 784, LAYERS[0])):
        monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 0)
        monkeypatch.setattr(cpair, "K_SPLIT", 0)
        monkeypatch.setattr(cpair, name, value)
        xs, ws, attrs, res, _op = case
        pair = _cpair_of(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)))
        assert pair is not None and pair.desc[cpair.KS_CUT] == 0, (name, value, case)


def test_k_split_parallel_cut_at_the_writers_cut(monkeypatch):
    """A projection cuts its K where the expansion that wrote its input cut its output channels (_cuts by the
    expansion's output name), the channels each side then reads being the ones its core wrote."""
    from test_cpair import _kernel as _bare_kernel

    monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 196)
    monkeypatch.setattr(cpair, "_cuts", {})
    estep = type("Step", (), {"outputs": ("e",), "inputs": ("x",)})()
    xe = np.zeros((1, 64, 14, 14), np.float32)
    we = np.zeros((256, 64, 1, 1), np.float32)
    ek = _bare_kernel(xe, we, np.zeros(256, np.float32), None, {}, 2)
    assert cpair.tiles_pair(ek, estep, False, (1, 256, 14, 14), 64, 196, -np.inf, np.inf, False, split=True) is not None
    assert cpair._cuts[("e", 256)] == 128
    pstep = type("Step", (), {"outputs": ("p",), "inputs": ("e",)})()
    xp = np.zeros((1, 256, 14, 14), np.float32)
    wp = np.zeros((64, 256, 1, 1), np.float32)
    pk = _bare_kernel(xp, wp, np.zeros(64, np.float32), None, {}, 2)
    cpair._cuts[("e", 256)] = 144  # (as if the expansion had cut there)
    pair = cpair.tiles_pair(pk, pstep, False, (1, 64, 14, 14), 256, 196, -np.inf, np.inf, False, split=True)
    assert pair is not None and pair.desc[cpair.KS_CUT] == 144


def test_k_split_parallel_with_tail_and_follow(quiet_server, monkeypatch):
    """With TAIL and FOLLOW on as well, a projection that cuts K keeps no middle and no moving cut (their words are
    the halves' channels or pixels), and its caller-alone call still equals the one-thread path within the fp32
    tolerances."""
    case = LAYERS[0]
    xs, ws, attrs, res, _op = case
    inputs, shape, one = _one_thread(case, 7)
    quiet_server.ctl[pairs.AWAKE] = 1
    for name, value in (("K_SPLIT_PARALLEL", 196), ("TAIL", True), ("FOLLOW", True)):
        monkeypatch.setattr(cpair, name, value)
    _rows_tiles(monkeypatch)  # (TAIL and FOLLOW are the rows halves')
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair.desc[cpair.OP] == cpair.ROWS
    assert pair.desc[cpair.KS_CUT] == 128 and pair.desc[cpair.T_N] == 0 and pair.follow is None
    assert_close(_at(2, fn, inputs, shape), one, np.float32)

"""F(4x4, 3x3) on one image cut by tiles (winograd.TILES, issue 11, session 10): each thread's run of
tiles transformed, multiplied and written back in one shard, in blocks (TILE_BYTES), at one thread
too (SERIAL_TILES), against the reference."""
import numpy as np
import pytest
from kernelkit_numba import config


@pytest.fixture(autouse=True)
def many_shards(monkeypatch):
    monkeypatch.setattr(config, "SERIAL_WORK", 0)
    monkeypatch.setattr(config, "MIN_SHARD_WORK", 1)
    monkeypatch.setattr(config, "MIN_TILE_WORK", 1)
    monkeypatch.setattr(config, "PHASE_UNIT", 1)
    from kernelkit_numba.kernels import rnpair

    monkeypatch.setattr(rnpair, "ON", False)  # the pool's paths here (rnpair.py's pairs: test_rnpair.py)


def _x(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


_MAPS = [((28, 28), True), ((21, 23), False), ((20, 33), True), ((64, 60), False)]
# A thread's run in one block (0), a tile a block (1) or a few tiles a block (20000); one tile a block
# on the largest map only at two threads (its tail run).
_CASES = [(hw, residual, block_bytes, threads) for hw, residual in _MAPS for block_bytes in (0, 1, 20000)
          for threads in (1, 2, 3) if block_bytes != 1 or hw != (64, 60) or threads == 2]


@pytest.mark.parametrize("products", ["blas", "rows", "cols"])
@pytest.mark.parametrize("hw, residual, block_bytes, threads", _CASES)
def test_f4_by_tiles(check, rng, monkeypatch, threads, block_bytes, products, hw, residual):
    from kernelkit_numba.kernels import conv, ftile, halves, winograd

    if products != "blas":
        if ftile.choice()[0] is None:
            pytest.skip("no float32 micro-kernel variant on this CPU")
        monkeypatch.setattr(conv, "WINO_FTILE_MIN_C", 1)
        monkeypatch.setattr(conv, "FTILE_COLS_MIN_K", 1 if products == "cols" else 1 << 20)
        monkeypatch.setattr(conv, "FTILE_COLS_MAX", 1 << 20)
    monkeypatch.setattr(config, "default_threads", lambda: threads)
    monkeypatch.setattr(winograd, "TILE_BYTES", block_bytes)
    monkeypatch.setattr(halves, "worker_asleep", lambda: False)  # a job whatever the worker does
    runs = []
    tiles_run = winograd._tiles_run
    monkeypatch.setattr(winograd, "_tiles_run", lambda *a: runs.append(a[-2:]) or tiles_run(*a))
    m = 48 if products == "cols" else 19
    x, w, b = _x(rng, 1, 6, *hw), _x(rng, m, 6, 3, 3), _x(rng, m)
    inputs = [x, w, b] + ([_x(rng, 1, m, *hw)] if residual else [])
    check("Conv", inputs, {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1, 2))
    nt = -(-hw[0] // 4) * -(-hw[1] // 4)
    assert runs and sorted(runs)[0][0] == 0 and sum(t1 - t0 for t0, t1 in runs) % nt == 0
    assert len(runs) >= min(threads, 2)
    if threads == 2 and nt * winograd.TAIL_SHARE >= winograd.TAIL_MIN_TILES:  # 64x60: 240 tiles, a tail of 24
        assert len(runs) == 3 and sorted(runs)[-1] == (nt - int(nt * winograd.TAIL_SHARE), nt)


def test_f4_by_tiles_off_runs_phases(check, rng, monkeypatch):
    """TILES off: session 9's job of three phases."""
    from kernelkit_numba.kernels import winograd

    monkeypatch.setattr(config, "default_threads", lambda: 2)
    monkeypatch.setattr(winograd, "TILES", False)
    monkeypatch.setattr(winograd, "_tiles_run", None)  # never called
    calls = []
    run_phases = config.run_phases
    monkeypatch.setattr(config, "run_phases", lambda parts: calls.append(len(parts)) or run_phases(parts))
    check("Conv", [_x(rng, 1, 5, 28, 28), _x(rng, 7, 5, 3, 3), _x(rng, 7)], {"pads": [1, 1, 1, 1]}, constants=(1, 2))
    assert calls == [3] or (calls and set(calls) == {3})


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]])
@pytest.mark.parametrize("threads", [1, 2])
def test_f4_by_tiles_pads(check, rng, monkeypatch, pads, threads):
    """Unpadded and one-sided pads (the tiles' input rows start above or at the map's first row)."""
    from kernelkit_numba.kernels import winograd

    monkeypatch.setattr(config, "default_threads", lambda: threads)
    monkeypatch.setattr(winograd, "TILE_BYTES", 20000)
    runs = []
    tiles_run = winograd._tiles_run
    monkeypatch.setattr(winograd, "_tiles_run", lambda *a: runs.append(a[-2:]) or tiles_run(*a))
    check("Conv", [_x(rng, 1, 5, 26, 25), _x(rng, 9, 5, 3, 3), _x(rng, 9)], {"pads": pads}, constants=(1, 2))
    assert runs


@pytest.mark.parametrize("products", ["blas", "cols"])
@pytest.mark.parametrize("residual", [False, True])
def test_f4_on_one_14x14_map(check, rng, monkeypatch, products, residual):
    """winograd.F4_MIN_OUTPUTS at 196 (issue 11, session 14): a one-image 14x14 layer on F(4x4, 3x3) (16 tiles,
    the last row and column of tiles half outside the map) at one thread, against the reference; at the default
    it stays on F(2x2, 3x3)."""
    from kernelkit_numba.kernels import conv, ftile, winograd

    if products != "blas":
        if ftile.choice()[0] is None:
            pytest.skip("no float32 micro-kernel variant on this CPU")
        monkeypatch.setattr(conv, "WINO_FTILE_MIN_C", 1)
    monkeypatch.setattr(config, "default_threads", lambda: 1)
    calls = []
    f4 = winograd.conv3x3_f4
    monkeypatch.setattr(winograd, "conv3x3_f4", lambda *a, **k: calls.append(1) or f4(*a, **k))
    m = 48
    x, w, b = _x(rng, 1, 32, 14, 14), _x(rng, m, 32, 3, 3), _x(rng, m)
    inputs = [x, w, b] + ([_x(rng, 1, m, 14, 14)] if residual else [])
    check("Conv", inputs, {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1, 2))
    assert not calls
    monkeypatch.setattr(winograd, "F4_MIN_OUTPUTS", 196)
    check("Conv", inputs, {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1, 2))
    assert calls

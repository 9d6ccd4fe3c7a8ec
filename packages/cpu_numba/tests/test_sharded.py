"""The sharded paths of the kernels (tiles, row ranges, NumPy shards) against the reference.

Test tensors are small, so every call would run on the calling thread alone; here the thresholds
drop to zero and the budget is 3 threads, so each kernel cuts its work into many shards (uneven
ones too) that the shard pool runs on several threads."""
import numpy as np
import pytest
from kernelkit_numba import config


@pytest.fixture(autouse=True)
def many_shards(monkeypatch):
    monkeypatch.setattr(config, "SERIAL_WORK", 0)
    monkeypatch.setattr(config, "MIN_SHARD_WORK", 1)
    monkeypatch.setattr(config, "MIN_TILE_WORK", 1)
    monkeypatch.setattr(config, "PHASE_UNIT", 1)
    monkeypatch.setattr(config, "default_threads", lambda: 3)


def _x(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("attrs, x_shape, w_shape", [
    ({"pads": [1, 1, 1, 1], "activation": "Relu"}, (2, 5, 16, 15), (19, 5, 3, 3)),  # Winograd
    ({"pads": [1, 1, 1, 1], "activation": "Sigmoid"}, (1, 4, 14, 14), (6, 4, 3, 3)),  # Winograd + 2nd pass
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, (1, 6, 17, 17), (35, 6, 3, 3)),  # im2col tiles
    ({}, (2, 8, 20, 20), (40, 8, 1, 1)),  # 1x1: the image is the column matrix
    ({"group": 6, "pads": [1, 1, 1, 1], "activation": "Clip", "activation_params": [0.0, 6.0]},
     (1, 6, 12, 12), (6, 1, 3, 3)),  # depthwise
    ({"group": 4, "pads": [1, 1, 1, 1], "activation": "HardSwish"}, (1, 4, 9, 9), (8, 1, 3, 3)),
    ({"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]}, (2, 6, 13, 12), (6, 1, 3, 3)),  # depthwise /2
    ({"pads": [3, 3, 3, 3], "strides": [2, 2], "activation": "Relu"}, (1, 3, 40, 38), (16, 3, 7, 7)),  # blocks
    ({"pads": [1, 1, 1, 1]}, (1, 16, 7, 7), (70, 16, 3, 3)),  # 7x7 map, 64+ rows: gemm_nt_rows shards
])
def test_conv_sharded(check, rng, attrs, x_shape, w_shape, monkeypatch):
    from kernelkit_numba.kernels import conv

    monkeypatch.setattr(conv, "_COL_BYTES", 1 << 14)  # the 7x7 case packs its columns in blocks of rows
    monkeypatch.setattr(conv, "_COL_BLOCK_BYTES", 1 << 13)
    check("Conv", [_x(rng, *x_shape), _x(rng, *w_shape), _x(rng, w_shape[0])], attrs, constants=(1, 2))


def test_conv_residual_sharded(check, rng):
    """Winograd F(4x4, 3x3) with the fused residual Z, every phase cut into shards."""
    x, w, b, z = _x(rng, 2, 5, 16, 15), _x(rng, 19, 5, 3, 3), _x(rng, 19), _x(rng, 2, 19, 16, 15)
    check("Conv", [x, w, b, z], {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1, 2))


def test_gemm_and_matmul_sharded(check, rng):
    check("Gemm", [_x(rng, 33, 20), _x(rng, 70, 20), _x(rng, 70)], {"transB": 1, "alpha": 0.5,
                                                                       "activation": "Relu"}, constants=(1, 2))
    check("Gemm", [_x(rng, 20, 33), _x(rng, 20, 70), _x(rng, 33, 1)], {"transA": 1, "beta": 2.0}, constants=(1,))
    check("MatMul", [_x(rng, 3, 1, 17, 24), _x(rng, 4, 24, 90)])
    check("MatMul", [_x(rng, 2, 40, 24), _x(rng, 24, 130)], {"activation": "Gelu"})


@pytest.mark.parametrize("op, shapes", [
    ("Add", [(2, 8, 9, 10), (2, 8, 9, 10)]),
    ("Mul", [(1, 16, 9, 10), (1, 16, 1, 1)]),
    ("Div", [(4, 7, 10), (10,)]),
    ("Max", [(5, 1, 12), (1, 6, 12)]),
    ("PRelu", [(2, 9, 8, 8), (9, 1, 1)]),
])
def test_binary_sharded(check, rng, op, shapes):
    check(op, [_x(rng, *s) for s in shapes])


@pytest.mark.parametrize("op, attrs", [
    ("Sigmoid", {}), ("Tanh", {}), ("Relu", {}), ("Gelu", {}), ("Softmax", {"axis": -1}),
    ("Softmax", {"axis": 1}), ("LogSoftmax", {"axis": -1}), ("Transpose", {"perm": [0, 2, 3, 1]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}), ("GlobalAveragePool", {}),
])
def test_unary_and_window_sharded(check, rng, op, attrs):
    check(op, [_x(rng, 2, 7, 12, 13)], attrs)


def test_norms_sharded(check, rng):
    x = _x(rng, 3, 17, 32)
    check("LayerNormalization", [x, _x(rng, 32), _x(rng, 32)], {"axis": -1}, constants=(1, 2))
    x4 = _x(rng, 2, 6, 9, 9)
    c = [_x(rng, 6) for _ in range(3)] + [np.abs(_x(rng, 6)) + 0.5]
    check("BatchNormalization", [x4, *c], {}, constants=(1, 2, 3, 4))


def test_these_settings_really_shard(check, rng, monkeypatch):
    from kernelkit_numba import shards

    seen = []
    run = shards.POOL.run
    monkeypatch.setattr(shards.POOL, "run", lambda fn, count, threads, *phases: seen.append((count, threads)) or
                        run(fn, count, threads, *phases))
    check("Conv", [_x(rng, 1, 4, 14, 14), _x(rng, 6, 4, 3, 3)], {"pads": [1, 1, 1, 1]}, constants=(1,))
    assert seen and max(c for c, _ in seen) > 3 and {t for _, t in seen} == {3}


@pytest.mark.parametrize("cols_min_k", [1, 1 << 20])  # the cols tiles, the rows tiles
@pytest.mark.parametrize("residual", [False, True])
def test_winograd_products_with_their_transform_sharded(check, rng, monkeypatch, cols_min_k, residual):
    """F(2x2, 3x3) on ftile's tiles at 3 threads: shards of weight-panel groups, each running its
    products at every position and then the output transform of its channels (winograd._fused_part),
    against the reference, with a partial last panel."""
    from kernelkit_numba.kernels import conv, ftile, winograd

    if ftile.choice()[0] is None:
        pytest.skip("no float32 micro-kernel variant on this CPU")
    monkeypatch.setattr(conv, "WINO_FTILE_MIN_C", 1)
    monkeypatch.setattr(conv, "FTILE_COLS_MIN_K", cols_min_k)
    fused = []
    part = winograd._fused_part
    monkeypatch.setattr(winograd, "_fused_part", lambda *a: fused.append(part(*a)) or fused[-1])
    x, w, b = _x(rng, 1, 20, 14, 14), _x(rng, 304, 20, 3, 3), _x(rng, 304)
    inputs = [x, w, b] + ([_x(rng, 1, 304, 14, 14)] if residual else [])
    check("Conv", inputs, {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1, 2))
    assert fused and all(fused)


@pytest.mark.parametrize("x_shape", [(2, 5, 16, 15), (1, 4, 14, 14)])  # F(4x4, 3x3), F(2x2, 3x3)
@pytest.mark.parametrize("phased", [True, False])
@pytest.mark.parametrize("on_ftile", [False, True])  # the products on BLAS, on ftile's tiles
def test_winograd_as_one_job_of_phases(check, rng, monkeypatch, x_shape, phased, on_ftile):
    """At 2+ threads a Winograd convolution runs as one job of phases (input transform, products,
    output transform: winograd.PHASED), against the reference; PHASED off: the calls in a row."""
    from kernelkit_numba.kernels import conv, ftile, winograd

    if on_ftile:
        if ftile.choice()[0] is None:
            pytest.skip("no float32 micro-kernel variant on this CPU")
        monkeypatch.setattr(conv, "WINO_FTILE_MIN_C", 1)
        monkeypatch.setattr(winograd, "FUSED_OUT", False)  # the products, then the transform
        monkeypatch.setattr(ftile, "SHARD_UNIT", 1)
    monkeypatch.setattr(winograd, "PHASED", phased)
    calls = []
    run_phases = config.run_phases
    monkeypatch.setattr(config, "run_phases", lambda parts: calls.append([c for _, c in parts]) or run_phases(parts))
    check("Conv", [_x(rng, *x_shape), _x(rng, 19, x_shape[1], 3, 3), _x(rng, 19)],
          {"pads": [1, 1, 1, 1], "activation": "Relu"}, constants=(1, 2))
    if phased:
        assert calls and all(len(c) == 3 and min(c) >= 2 for c in calls)
    else:
        assert not calls


@pytest.mark.parametrize("attrs, x_shape, w_shape", [
    ({"pads": [1, 1, 1, 1], "strides": [2, 2], "activation": "Relu"}, (1, 40, 14, 14), (64, 40, 3, 3)),  # im2col
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, (1, 24, 13, 13), (96, 24, 3, 3)),  # im2col, cols tiles (7x7 out)
    ({"pads": [3, 3, 3, 3], "strides": [2, 2], "activation": "Relu"}, (1, 3, 64, 64), (16, 3, 7, 7)),  # implicit
])
@pytest.mark.parametrize("phased", [True, False])
def test_copies_and_product_as_one_job_of_phases(check, rng, monkeypatch, attrs, x_shape, w_shape, phased):
    """At 2+ threads ftile's strided convolutions run their copy (im2col, the implicit GEMM's padded
    phases) and their product as one job of two phases (conv.PHASED), against the reference."""
    from kernelkit_numba.kernels import conv, ftile

    name = ftile.variant_name()
    if name is None:
        pytest.skip("no float32 micro-kernel variant on this CPU")
    monkeypatch.setenv("KERNELKIT_F32_GEMM", name)  # forced: no shape-class dispatch to BLAS
    monkeypatch.setattr(conv, "PHASED", phased)
    monkeypatch.setattr(ftile, "SHARD_UNIT", 1)
    calls = []
    run_phases = config.run_phases
    monkeypatch.setattr(config, "run_phases", lambda parts: calls.append([c for _, c in parts]) or run_phases(parts))
    check("Conv", [_x(rng, *x_shape), _x(rng, *w_shape), _x(rng, w_shape[0])], attrs, constants=(1, 2))
    if phased:
        assert calls and all(len(c) == 2 and min(c) >= 2 for c in calls)
    else:
        assert not calls


@pytest.mark.parametrize("total, count", [(11, 8), (6, 6), (112, 8), (32, 8), (196, 8), (5, 8), (1, 4), (49, 4)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_guided_bounds(total, count, threads):
    """config.guided: shards covering range(total) once, none empty, large first (sizes never grow
    but for the remainder), the last at most half an equal shard where the units allow it, equal shards
    at one thread."""
    b = config.guided(total, count, threads)
    sizes = [b[i + 1] - b[i] for i in range(len(b) - 1)]
    assert b[0] == 0 and b[-1] == total and min(sizes) >= 1
    if threads == 1 or total <= count:
        assert len(sizes) == min(count, total) and max(sizes) - min(sizes) <= 1
        return
    assert all(x >= y for x, y in zip(sizes[:-2], sizes[1:-1]))
    assert sizes[-1] <= max(1, -(-total // (2 * count))) and sizes[0] >= sizes[-1]

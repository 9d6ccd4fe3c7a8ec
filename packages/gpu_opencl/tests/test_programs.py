"""Program cache (memory + disk), build errors, kernel dumps, tuned parameters, GEMM tile variants."""
from __future__ import annotations

import json

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close

SRC = "__kernel void twice(__global float* x) { const int i = get_global_id(0); x[i] = SCALE * x[i]; }\n"


def _fresh_cache(device):
    from kernelkit_opencl.programs import ProgramCache

    return ProgramCache(device.context, device.cl_device)


def _run_twice(device, program, n=8):
    import pyopencl as cl

    x = np.arange(n, dtype=np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    knl = cl.Kernel(program, "twice")
    knl.set_args(buf)
    ev = cl.enqueue_nd_range_kernel(device.queue, knl, (n,), None)
    cl.enqueue_copy(device.queue, x, buf, is_blocking=True, wait_for=[ev])  # the queue may be out of order
    return x


def test_disk_cache_miss_then_hit(device, tmp_cache):
    first = _fresh_cache(device)
    prg = first.get(SRC, {"SCALE": 2.0}, label="twice")
    assert (first.misses, first.hits) == (1, 0)
    assert first.get(SRC, {"SCALE": 2.0}) is prg  # memory cache
    entries = list((tmp_cache / "opencl" / "programs").glob("*.bin"))
    assert len(entries) == 1
    second = _fresh_cache(device)  # a new process would start like this
    prg2 = second.get(SRC, {"SCALE": 2.0}, label="twice")
    assert (second.misses, second.hits) == (0, 1)
    np.testing.assert_array_equal(_run_twice(device, prg2), 2 * np.arange(8, dtype=np.float32))
    other = second.get(SRC, {"SCALE": 3.0}, label="twice")  # other defines: another key
    assert second.misses == 1
    np.testing.assert_array_equal(_run_twice(device, other), 3 * np.arange(8, dtype=np.float32))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign"])
def test_corrupt_or_foreign_entry_is_rebuilt_with_warning(device, tmp_cache, damage):
    _fresh_cache(device).get(SRC, {"SCALE": 2.0}, label="twice")
    (entry,) = (tmp_cache / "opencl" / "programs").glob("*.bin")
    blob = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(blob[: len(blob) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"\x00garbage" * 10)
    else:  # a valid entry of another key copied over this one
        cache = _fresh_cache(device)
        cache.get(SRC, {"SCALE": 5.0}, label="twice")
        other = [p for p in entry.parent.glob("*.bin") if p != entry][0]
        entry.write_bytes(other.read_bytes())
    cache = _fresh_cache(device)
    with pytest.warns(RuntimeWarning, match="unusable"):
        prg = cache.get(SRC, {"SCALE": 2.0}, label="twice")
    assert cache.rebuilt == 1
    np.testing.assert_array_equal(_run_twice(device, prg), 2 * np.arange(8, dtype=np.float32))
    assert _fresh_cache(device).get(SRC, {"SCALE": 2.0}) is not None  # the rewritten entry loads
    assert len(list(entry.parent.glob("*.tmp"))) == 0  # atomic writes leave no temporary files


def test_build_error_carries_device_name_and_full_log(device, tmp_cache):
    bad = "__kernel void broken(__global float* x) { x[0] = undefined_symbol_kk + 1.0f; }\n"
    with pytest.raises(kk.KernelBuildError) as info:
        _fresh_cache(device).get(bad, {"N": 4}, label="broken")
    text = str(info.value)
    assert device.cl_device.name in text
    assert "undefined_symbol_kk" in text and "broken" in text and "-DN=4" in text


def test_dump_dir_gets_every_built_source_with_defines(device, tmp_cache, tmp_path, monkeypatch):
    dump = tmp_path / "dump"
    monkeypatch.setenv("KERNELKIT_DUMP_KERNELS", str(dump))
    _fresh_cache(device).get(SRC, {"SCALE": 2.5}, label="twice")
    (path,) = dump.glob("twice_*.cl")
    text = path.read_text()
    assert "#define SCALE 2.5f" in text and SRC in text


def test_tuned_parameters_are_persisted_and_reused(tmp_cache, rng):
    from kernelkit_opencl import tuning
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.runtime import OpenCLDevice

    a = rng.standard_normal((33, 20)).astype(np.float32)
    b = rng.standard_normal((20, 17)).astype(np.float32)
    dev = OpenCLDevice({"opencl_tune": True})
    before = tuning.searches
    out = gemm.matmul(dev.upload(a), dev.upload(b))
    assert_close(dev.download(out), a @ b)
    assert tuning.searches == before + 1
    data = json.loads((tmp_cache / "opencl" / "tuned_params.json").read_text())
    (key,) = [k for k in data if "|gemm|mm|00|64x32x32x1" in k]
    assert data[key] in gemm.CPU_TILES + gemm.GPU_TILES + gemm.GPU_SMALL
    dev2 = OpenCLDevice({"opencl_tune": True})  # a new session: reads the file, no search
    tuning._loaded_from = None  # as a new process would
    out2 = gemm.matmul(dev2.upload(a), dev2.upload(b))
    assert tuning.searches == before + 1
    assert_close(dev2.download(out2), a @ b)


def test_unreadable_tuning_file_is_rewritten(tmp_cache, rng):
    from kernelkit_opencl import tuning

    path = tmp_cache / "opencl" / "tuned_params.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    tuning._loaded_from = None
    with pytest.warns(RuntimeWarning, match="unreadable"):
        assert tuning.lookup("x") is None
    tuning.store("x", {"TM": 1})
    assert json.loads(path.read_text()) == {"x": {"TM": 1}}



def _all_tiles():
    """One candidate per code path and tile constant worth checking (each is a separate build)."""
    from kernelkit_opencl.kernels import gemm

    gpu, small, cpu = gemm.GPU_TILES, gemm.GPU_SMALL, gemm.CPU_TILES
    return [gpu[0], gpu[1], gpu[2], gpu[4], gpu[5], small[1], cpu[0], cpu[1],
            dict(gpu[0], SPLIT_K=3), dict(small[0], SPLIT_K=2), gpu[7], dict(gpu[10], SPLIT_K=2),
            gpu[11], dict(gpu[13], SPLIT_K=3)]


@pytest.mark.parametrize("index", range(14))
def test_every_tile_variant_matches_numpy(device, rng, index):
    """The tuning search's candidates (local-memory GPU tiles, split-K too) are correct on PoCL, on
    ragged shapes, transposed operands, bias broadcast, batches and fused activations."""
    from kernelkit_opencl.kernels.gemm import GemmCall, _launch

    tiles = _all_tiles()
    assert len(tiles) == 14
    p = tiles[index]
    M, N, K = 37, 45, 29
    combos = [(0, 0, "Relu"), (1, 1, ""), (0, 1, "Relu"), (1, 0, "")]
    for ta, tb, act in [combos[index % 4]]:  # one build per variant; all layouts across variants
        a = rng.standard_normal((2, K, M) if ta else (2, M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        A, B, C = device.upload(a), device.upload(b), device.upload(bias)
        out = device.empty((2, M, N), np.float32)
        call = GemmCall(M, N, K, M if ta else K, K if tb else N, N, bool(ta), bool(tb), batch=2, za=M * K,
                        zc=M * N, bias_sn=1, alpha=0.5, beta=2.0, activation=act)
        _launch(device, call, p, A, B, C, out)
        opa = np.swapaxes(a, 1, 2) if ta else a
        want = 0.5 * (opa @ (b.T if tb else b)) + 2.0 * bias
        want = np.maximum(want, 0) if act else want
        assert_close(device.download(out), want.astype(np.float32), err_msg=f"{p} ta={ta} tb={tb}")


@pytest.mark.parametrize("index", range(3))
def test_vector_global_load_tiles_match_numpy(device, rng, index):
    """The 128-bit global load tiles (``VEC_GLD``, issue 12): operands whose leading dimensions
    are multiples of 4 take the vector loads, ragged tile edges and the k tail the scalar ones, in
    every transpose layout, batched, with split-K; a misaligned operand (odd lda) reads scalar."""
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.kernels.gemm import GemmCall, _launch

    p = [gemm.GPU_LARGE[0], gemm.GPU_LARGE[5], dict(gemm.GPU_LARGE[2], SPLIT_K=3)][index]
    for (ta, tb), (M, N, K) in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [(36, 44, 28)] * 3 + [(37, 44, 29)]):
        a = rng.standard_normal((2, K, M) if ta else (2, M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        A, B, C = device.upload(a), device.upload(b), device.upload(bias)
        out = device.empty((2, M, N), np.float32)
        call = GemmCall(M, N, K, M if ta else K, K if tb else N, N, bool(ta), bool(tb), batch=2, za=M * K,
                        zc=M * N, bias_sn=1, alpha=0.5, beta=2.0)
        _launch(device, call, p, A, B, C, out)
        want = 0.5 * ((np.swapaxes(a, 1, 2) if ta else a) @ (b.T if tb else b)) + 2.0 * bias
        assert_close(device.download(out), want.astype(np.float32), err_msg=f"{p} ta={ta} tb={tb}")


@pytest.mark.parametrize("index", range(3))
def test_half_vector_global_load_tiles_match_scalar_and_numpy(device, rng, monkeypatch, index):
    """Half storage with the VEC_GLD tiles (issue 12, session 4): with HALF_VEC 1, A and B are read
    4 halves at a time (vloada_half4), with 2 as bits widened by integer operations, with 0 by
    scalar vload_half; all compute in float in the same order, so they agree bit for bit, and match
    NumPy (half inputs, float math) within float16's tolerance, in every transpose layout, batched,
    with split-K, ragged edges and an operand with an odd leading dimension (scalar loads)."""
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.kernels.gemm import GemmCall, _launch

    p = [gemm.GPU_LARGE[0], gemm.GPU_LARGE[5], dict(gemm.GPU_LARGE[2], SPLIT_K=3)][index]
    for (ta, tb), (M, N, K) in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [(36, 44, 28)] * 3 + [(37, 44, 29)]):
        a = rng.standard_normal((2, K, M) if ta else (2, M, K)).astype(np.float16)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float16)
        bias = rng.standard_normal(N).astype(np.float16)
        A, B, C = device.upload(a), device.upload(b), device.upload(bias)
        call = GemmCall(M, N, K, M if ta else K, K if tb else N, N, bool(ta), bool(tb), batch=2, za=M * K,
                        zc=M * N, bias_sn=1, alpha=0.5, beta=2.0, activation="Relu")
        got = {}
        for vec in ("1", "0", "2"):
            monkeypatch.setenv("KERNELKIT_OPENCL_HALF_VEC", vec)
            assert gemm.half_vector_loads(device) == int(vec)
            out = device.empty((2, M, N), np.float16)
            _launch(device, call, p, A, B, C, out)
            got[vec] = device.download(out)
        want = 0.5 * ((np.swapaxes(a, 1, 2) if ta else a).astype(np.float32)
                      @ (b.T if tb else b).astype(np.float32)) + 2.0 * bias.astype(np.float32)
        want = np.maximum(want, 0).astype(np.float16)
        np.testing.assert_array_equal(got["1"], got["0"], err_msg=f"{p} ta={ta} tb={tb}")
        np.testing.assert_array_equal(got["2"], got["0"], err_msg=f"{p} ta={ta} tb={tb} HALF_VEC 2")
        assert_close(got["1"], want, err_msg=f"{p} ta={ta} tb={tb}")


@pytest.mark.parametrize("vec", ["1", "2"])
def test_every_half_value_survives_the_half_loads(device, monkeypatch, vec):
    """All 65536 half bit patterns (subnormals, inf, NaN, the largest finite) through A of a
    1-deep product with 1.0, read by the vector loads (A stored [K, M], M contiguous), come back
    unchanged: HALF_VEC 2's integer widening is exact."""
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.kernels.gemm import GemmCall, _launch

    monkeypatch.setenv("KERNELKIT_OPENCL_HALF_VEC", vec)
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(1, -1)
    M = a.shape[1]
    out = device.empty((M, 1), np.float16)
    call = GemmCall(M, 1, 1, M, 1, 1, trans_a=True)
    _launch(device, call, gemm.GPU_LARGE[0], device.upload(a), device.upload(np.ones((1, 1), np.float16)), None, out)
    np.testing.assert_array_equal(device.download(out)[:, 0], a[0])


@pytest.mark.parametrize("vec", ["0", "1", "2"])
def test_half_conv_with_vector_load_tiles(monkeypatch, rng, tmp_cache, vec):
    """A float16 Conv (implicit GEMM, weights read 4 halves at a time with HALF_VEC on) through a
    VEC_GLD tile, with a fused residual and Relu, against the reference."""
    from kernelkit_opencl.kernels import gemm

    monkeypatch.setenv("KERNELKIT_OPENCL_HALF_VEC", vec)
    monkeypatch.setattr(gemm, "_candidates", lambda dev, call: [gemm.GPU_LARGE[0]])
    x = rng.standard_normal((2, 8, 9, 7)).astype(np.float16)
    w = rng.standard_normal((12, 8, 3, 3)).astype(np.float16)
    b = rng.standard_normal(12).astype(np.float16)
    attrs = {"pads": [1, 1, 1, 1], "activation": "Relu"}
    model = kk.testing.single_op_model("Conv", [x, w, b], attrs)
    sess = kk.Session(model, device="gpu", fallback=False, options={"opencl_tune": False})
    got = sess.run(None, {"in0": x, "in1": w, "in2": b})
    want = kk.testing.run_single_op("Conv", [x, w, b], attrs)
    assert_close(got[0], want[0], "float16")


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_implicit_gemm_conv_with_gpu_tiles(monkeypatch, rng, tmp_cache, split, prefetch):
    """The local-memory conv path (what GPUs run), with and without split-K, register prefetch
    and (prefetch 2) double-buffered local tiles, against the reference."""
    from kernelkit_opencl.kernels import gemm

    tiles = dict(gemm.GPU_TILES[0], SPLIT_K=split, PREFETCH=min(prefetch, 1), DBUF=int(prefetch == 2))
    monkeypatch.setattr(gemm, "_candidates", lambda dev, call: [tiles])
    cases = [((2, 5, 11, 9), (7, 5, 3, 3), {"pads": [1, 2, 0, 1], "strides": [2, 1]}),
             ((1, 6, 8, 8), (4, 3, 3, 3), {"group": 2, "dilations": [2, 2], "activation": "Relu"})]
    for xs, ws, attrs in cases:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        b = rng.standard_normal(ws[0]).astype(np.float32)
        sess_kw = {"device": "gpu", "fallback": False, "options": {"opencl_tune": False}}
        if split > 1:
            sess_kw["options"]["opencl_profile"] = True
        model = kk.testing.single_op_model("Conv", [x, w, b], attrs)
        sess = kk.Session(model, **sess_kw)
        got = sess.run(None, {"in0": x, "in1": w, "in2": b})
        want = kk.testing.run_single_op("Conv", [x, w, b], attrs)
        assert_close(got[0], want[0], err_msg=f"{attrs} split {split}")
        if split > 1:
            labels = [r["kernel"] for r in sess._devices["gpu"].kernel_profile()]
            assert "splitk_reduce" in labels and any("split3" in lb for lb in labels)


@pytest.mark.parametrize("activation", ["Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSwish", "Tanh", "Gelu"])
def test_fused_activations_on_gemm(rng, activation):
    params = {"Clip": [-0.3, 0.4], "LeakyRelu": [0.2], "Gelu": [1.0]}.get(activation, [])
    a = rng.standard_normal((6, 9)).astype(np.float32)
    b = rng.standard_normal((9, 5)).astype(np.float32)
    attrs = {"activation": activation, "activation_params": params}
    got = kk.testing.run_single_op("Gemm", [a, b], attrs, device="gpu", fallback=False)
    want = kk.testing.run_single_op("Gemm", [a, b], attrs)
    assert_close(got[0], want[0])

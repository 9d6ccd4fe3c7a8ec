"""Regression tests for issue 13 (hostile files, odd environments), core side: each test names the
item it guards and failed on 870925c."""
from __future__ import annotations

import hashlib
import json
import struct
import time
import tracemalloc

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import ModelFormatError

HEADER = struct.Struct("<8sIIQQQ32s")


def _small_model():
    g = kk.GraphBuilder("small")
    x = g.input("x", ("N", 4), "float32")
    w = g.constant(np.arange(12, dtype=np.float32).reshape(3, 4), name="w")
    g.output(g.op("MatMul", x, g.op("Transpose", w, perm=[1, 0]), name="y"))
    return g.build()


@pytest.fixture(scope="module")
def kkm_bytes(tmp_path_factory):
    path = tmp_path_factory.mktemp("kkm") / "small.kkm"
    kk.save(_small_model(), path)
    return path.read_bytes()


def _with_doc(raw: bytes, doc) -> bytes:
    """``raw`` with its JSON replaced by ``doc``, header and checksum kept consistent."""
    header = HEADER.unpack_from(raw, 0)
    blob = raw[header[4]:header[4] + header[5]]
    text = json.dumps(doc).encode()
    offset = -(-(HEADER.size + len(text)) // 64) * 64
    head = HEADER.pack(header[0], header[1], header[2], len(text), offset, len(blob), hashlib.sha256(text).digest())
    return head + text + b"\0" * (offset - HEADER.size - len(text)) + blob


def _doc(raw: bytes) -> dict:
    header = HEADER.unpack_from(raw, 0)
    return json.loads(raw[HEADER.size:HEADER.size + header[3]])


# -- item 1: tensor shapes in a .kkm are bounded non-negative ints -----------------------------------
@pytest.mark.parametrize("shape", [["N", 2**24], ["N", 2**70], [2**70], [2**62, 2**62, 0, "N"], [1] * 65,
                                   [-1, -12], [2**40, 2**40]])
def test_kkm_tensor_shape_must_be_bounded_ints(tmp_path, kkm_bytes, shape):
    """Item 1: a symbolic or absurd dim in ``tensors[i].shape`` is a short ModelFormatError, found
    before any product (870925c repeated the string 2^24 times, or raised OverflowError)."""
    doc = _doc(kkm_bytes)
    doc["tensors"][0]["shape"] = shape
    path = tmp_path / "m.kkm"
    path.write_bytes(_with_doc(kkm_bytes, doc))
    tracemalloc.start()
    try:
        with pytest.raises(ModelFormatError, match=r"tensors\[0\]") as info:
            kk.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(str(info.value)) < 400
    assert peak < 4 * 2**20, f"loading allocated {peak / 2**20:.1f} MiB"


# -- item 2: YAML alias bombs in deployment files --------------------------------------------------
def _bomb(levels: int = 9, key: str = "threads") -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "model: m.kkm\n" + "\n".join(f"_{line}" for line in lines) + f"\n{key}: *a{levels}\n"


@pytest.fixture
def dep_folder(tmp_path, kkm_bytes):
    (tmp_path / "m.kkm").write_bytes(kkm_bytes)
    return tmp_path


@pytest.mark.parametrize("body, fragment", [
    (_bomb(9, "threads"), "expands to more than"),
    (_bomb(9, "options"), "expands to more than"),
    ("model: m.kkm\noptions: &o {a: *o}\n", "recursive"),
    ("model: m.kkm\nvendors: &v [*v]\n", "recursive"),
])
def test_yaml_alias_bomb_is_refused_at_load(dep_folder, body, fragment):
    """Item 2: an alias bomb is a ConfigError from the loader, in well under a second and with a
    short message (870925c built the 9^9-item value's repr: 85 s, 3.6 GB)."""
    from kernelkit import ConfigError
    from kernelkit.deploy import load_deployment

    path = dep_folder / "d.yml"
    path.write_text(body)
    start = time.perf_counter()
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=fragment) as info:
            load_deployment(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 5 and peak < 16 * 2**20
    assert len(str(info.value)) < 600


def test_yaml_aliases_within_the_bound_still_work(dep_folder):
    """Item 2: ordinary anchors and aliases keep working (the bound counts expanded nodes)."""
    from kernelkit.deploy import load_deployment

    path = dep_folder / "d.yml"
    path.write_text("model: m.kkm\nvendors: &v [reference]\noptions: {a: *v, b: *v}\n")
    dep = load_deployment(path)
    assert dep.vendors == ("reference",) and dep.options == {"a": ["reference"], "b": ["reference"]}


@pytest.mark.parametrize("value", [[list(range(3000))], "x" * 10**5, {str(i): i for i in range(3000)}],
                         ids=["list", "str", "dict"])
def test_error_messages_render_a_bounded_value(dep_folder, value):
    """Item 2: no error message renders an unbounded value: a wrong-typed huge value is cut by
    ``errors.brief`` (reprlib), not formatted whole first."""
    import yaml
    from kernelkit import ConfigError
    from kernelkit.deploy import load_deployment
    from kernelkit.errors import brief

    path = dep_folder / "d.yml"
    path.write_text(yaml.safe_dump({"model": "m.kkm", "threads": value}))
    with pytest.raises(ConfigError) as info:
        load_deployment(path)
    assert len(str(info.value)) < 400
    assert len(brief([[[[[1] * 10**6]]]] * 10**6)) <= 120


def test_thread_count_is_bounded(dep_folder):
    """Item 10: ``threads: 10**30`` is refused by deployment files and by Session."""
    from kernelkit import ConfigError, Session
    from kernelkit.deploy import load_deployment

    path = dep_folder / "d.yml"
    path.write_text(f"model: m.kkm\nthreads: {10**30}\n")
    with pytest.raises(ConfigError, match="threads"):
        load_deployment(path)
    with pytest.raises(ConfigError, match="threads"):
        Session(_small_model(), threads=10**30)


# -- item 3: only regular files are opened -----------------------------------------------------------
@pytest.fixture
def fifo(tmp_path):
    import os

    path = tmp_path / "pipe.kkm"
    os.mkfifo(path)
    return path


def test_fifo_model_and_deployment_files_are_refused(tmp_path, fifo, kkm_bytes):
    """Item 3: a FIFO as model, deployment file or model_sha256 target is a typed error at once."""
    import os

    from kernelkit import ConfigError
    from kernelkit.deploy import load_deployment
    from kernelkit.untrusted import open_regular

    with pytest.raises(ModelFormatError, match="not a regular file"):
        kk.load(fifo)
    yml = tmp_path / "pipe.yml"
    os.mkfifo(yml)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_deployment(yml)
    with pytest.raises(OSError, match="folder"):
        open_regular(tmp_path)
    with pytest.raises(OSError, match="special file"):
        open_regular("/dev/zero")


# -- item 9 (and 3): the CLI answers one error line and status 2 ------------------------------------
def _cli(capsys, *argv):
    from kernelkit import cli

    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_error(status, err, code):
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"error[{code}]: "), err
    assert "Traceback" not in err


def _npy_with_header(path, shape, dtype="<f4"):
    """A .npy whose header declares ``shape`` but which holds 16 bytes of data."""
    from numpy.lib import format as npy

    with open(path, "wb") as f:
        npy.write_array_header_1_0(f, {"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
        f.write(b"\0" * 16)
    return path


@pytest.mark.parametrize("shape", [(2**20, 2**20), (2**62, 2**62), (8,)])
def test_cli_input_npy_with_huge_header(capsys, dep_folder, shape):
    """Item 9: an .npy header declaring more data than the file holds is error[KK_INPUT], status 2,
    before any allocation (870925c: MemoryError traceback, status 1)."""
    bad = _npy_with_header(dep_folder / "x.npy", shape)
    status, _, err = _cli(capsys, "run", dep_folder / "m.kkm", "--input", f"x={bad}")
    _assert_one_error(status, err, "KK_INPUT")
    assert "header declares" in err


def test_cli_input_fifo_does_not_hang(capsys, dep_folder):
    """Item 3: ``--input x=<fifo>`` is error[KK_INPUT] at once (870925c blocked in open forever)."""
    import os

    os.mkfifo(dep_folder / "x.npy")
    status, _, err = _cli(capsys, "run", dep_folder / "m.kkm", "--input", f"x={dep_folder / 'x.npy'}")
    _assert_one_error(status, err, "KK_INPUT")
    assert "not a regular file" in err


def test_cli_huge_declared_input_shape(capsys, dep_folder):
    """Item 9: a deployment declaring a huge input shape and no --input: error[KK_INPUT], status 2
    (870925c: MemoryError traceback making the random input, status 1)."""
    (dep_folder / "d.yml").write_text("model: m.kkm\ninputs:\n  - name: x\n    shape: [1099511627776, 4]\n")
    status, _, err = _cli(capsys, "run", dep_folder / "d.yml")
    _assert_one_error(status, err, "KK_INPUT")


def test_validation_npz_with_huge_member_header(capsys, dep_folder):
    """Item 9: a validation .npz whose member header declares a huge shape: one error line, status 2
    (870925c: MemoryError traceback); the API (Deployment.validate) gives a ConfigError."""
    import zipfile

    member = _npy_with_header(dep_folder / "member.npy", (2**40, 4))
    with zipfile.ZipFile(dep_folder / "v.npz", "w") as zf:
        zf.write(member, "x.npy")
        zf.writestr("y.npy", member.read_bytes())
    (dep_folder / "d.yml").write_text("model: m.kkm\nvalidation:\n  data: v.npz\n")
    status, _, err = _cli(capsys, "run", dep_folder / "d.yml", "--validate")
    _assert_one_error(status, err, "KK_INPUT")
    assert "header declares" in err
    from kernelkit import ConfigError
    from kernelkit.deploy import load_deployment

    with pytest.raises(ConfigError, match="header declares"):
        load_deployment(dep_folder / "d.yml").validate()


def test_cli_convert_refuses_to_overwrite_its_input(capsys, tmp_path):
    """Item 9: ``kernelkit convert m.onnx -o m.onnx`` (or a hard link to it) is refused and the
    source is unchanged (870925c overwrote the ONNX model with the .kkm file)."""
    import os

    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    before = src.read_bytes()
    os.link(src, tmp_path / "alias.onnx")
    for out in (src, tmp_path / "." / "m.onnx", tmp_path / "alias.onnx"):
        status, _, err = _cli(capsys, "convert", src, "-o", out)
        _assert_one_error(status, err, "KK_INPUT")
    assert src.read_bytes() == before
    status, _, err = _cli(capsys, "convert", src, "-o", tmp_path / "m.kkm")
    assert status == 0, err


# -- item 11: one byte bound for tensors sized from values (limits.check_tensor_bytes) ----------------
def test_max_tensor_bytes_defaults_to_physical_memory_and_reads_the_environment(monkeypatch):
    """Item 11: the bound is the host's physical memory (or its cgroup limit) unless
    $KERNELKIT_MAX_TENSOR_BYTES sets it; a value that is not a byte count is a ConfigError, not a
    silently ignored setting."""
    import os

    from kernelkit import limits

    monkeypatch.delenv(limits.MAX_TENSOR_BYTES_ENV, raising=False)
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert limits.max_tensor_bytes() == limits.physical_memory()  # the host's, or a smaller cgroup limit
    assert limits.MIN_TENSOR_BYTES < limits.physical_memory() <= host
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "1000")  # below the 1 MiB floor hot paths rely on
    assert limits.max_tensor_bytes() == limits.MIN_TENSOR_BYTES == 1 << 20
    monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, "0x100000")
    assert limits.max_tensor_bytes() == 1 << 20
    assert limits.check_tensor_bytes((512, 512), np.float32) == 512 * 512  # exactly 1 MiB fits
    assert limits.check_tensor_bytes((), np.float32) == 1 and limits.check_tensor_bytes((3, 0), np.int8) == 0
    with pytest.raises(kk.TensorTooLargeError, match=r"shape \(512, 513\) and dtype float32 would take more "
                                                     r"than 1048576 bytes"):
        limits.check_tensor_bytes((512, 513), np.float32)
    with pytest.raises(kk.TensorTooLargeError):  # empty, but its per-axis index table would be 8 TiB
        limits.check_tensor_bytes((0, 1 << 40), np.float32)
    with pytest.raises(kk.TensorTooLargeError):  # Python ints: no int64 wrap-around to a small product
        limits.check_tensor_bytes(np.array([1 << 32, 1 << 32], np.int64), np.float32)
    for bad in ("-1", "1 GiB", "lots"):
        monkeypatch.setenv(limits.MAX_TENSOR_BYTES_ENV, bad)
        with pytest.raises(kk.ConfigError, match="KERNELKIT_MAX_TENSOR_BYTES"):
            limits.max_tensor_bytes()


def test_static_shape_from_a_constant_is_bounded_before_the_arena_is_made(monkeypatch):
    """Item 11: Expand with a constant shape has a static output; an op that writes into the memory
    plan's arena (``out=``) would have filled it: the plan refuses it, naming the node, before the
    arena exists (before: a 64 MiB arena here, a 4 TiB one for [2**20, 2**20])."""
    monkeypatch.setenv("KERNELKIT_MAX_TENSOR_BYTES", str(1 << 20))
    g = kk.GraphBuilder("static")
    x = g.input("x", (1, 1), "float32")
    big = g.op("Expand", x, g.constant(np.array([4096, 4096], np.int64)))
    g.output(g.op("Relu", g.op("Add", big, x)))
    model = g.build()
    tracemalloc.start()
    try:  # a static plan is placed when the Session is made; a dynamic one at its first run
        with pytest.raises(kk.KernelExecutionError, match=r"node 'Add_0' \(Add\): output of shape \(4096, 4096\)"):
            kk.Session(model, passes=False, vendors=["reference"]).run(None, {"x": np.ones((1, 1), np.float32)})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20

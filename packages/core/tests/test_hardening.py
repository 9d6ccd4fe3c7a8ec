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

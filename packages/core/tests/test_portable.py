"""Sessions that travel (kernelkit.portable): a Session pickles as its model and arguments and
rebuilds itself lazily in the receiving process, with the worker's CPU allotment as threads."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import portable
from kernelkit.testing import assert_close


def _model():
    rng = np.random.default_rng(0)
    g = kk.GraphBuilder("net")
    x = g.input("x", ("N", 4), "float32")
    w = g.constant(rng.standard_normal((4, 3)).astype(np.float32))
    g.output(g.op("Relu", g.op("MatMul", x, w), name="y"))
    return g.build()


def test_a_pickled_session_rebuilds_lazily_and_answers_the_same():
    model = _model()
    sess = kk.Session(model, vendors=["reference"], threads=1)
    feed = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    want = sess.run(None, {"x": feed})[0]
    data = pickle.dumps(sess)
    assert len(data) < 4096  # the model and arguments, not kernels or buffers
    copy = pickle.loads(data)
    assert isinstance(copy, kk.Session) and isinstance(copy, portable.LazySession)
    assert not copy.built
    before = portable.build_count()
    assert_close(copy.run(None, {"x": feed})[0], want)
    assert copy.built and portable.build_count() == before + 1
    assert copy.vendors == ("reference",) and copy.threads == 1
    copy.run(None, {"x": feed})
    assert portable.build_count() == before + 1  # built once
    again = pickle.loads(pickle.dumps(copy))  # a rebuilt session travels on as its recipe
    assert_close(again.run(None, {"x": feed})[0], want)


def test_a_session_from_a_path_travels_as_the_path(tmp_path):
    path = tmp_path / "m.kkm"
    kk.save(_model(), path)
    sess = kk.Session(path)
    recipe = portable.recipe_of(sess)
    assert recipe.path == str(path.resolve()) and recipe.model_bytes is None
    embedded = portable.SessionRecipe.of(path, embed=True)
    assert embedded.path is None and embedded.model_bytes[:8] == path.read_bytes()[:8]
    feed = np.ones((2, 4), np.float32)
    assert_close(pickle.loads(pickle.dumps(sess)).run(None, {"x": feed})[0], sess.run(None, {"x": feed})[0])


def test_model_bytes_round_trip_and_bad_bytes_are_a_typed_error():
    model = _model()
    back = portable.model_from_bytes(portable.model_to_bytes(model))
    assert [n.op for n in back.graph.nodes] == [n.op for n in model.graph.nodes]
    with pytest.raises(kk.ModelFormatError):
        portable.model_from_bytes(b"not a model file at all" * 10)
    with pytest.raises(kk.ConfigError):
        portable.SessionRecipe.of(12345)


def test_unset_threads_become_the_cpu_allotment_not_every_core():
    sess = pickle.loads(pickle.dumps(kk.Session(_model(), vendors=["reference"])))
    sess.get_inputs()
    assert sess.threads == portable.cpu_allotment()
    assert portable.cpu_allotment() <= len(os.sched_getaffinity(0))


def test_cpu_allotment_follows_the_process_affinity():
    """Pinned to one CPU (as a container or taskset does), a worker gets one thread."""
    code = ("import os, kernelkit; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "print(kernelkit.cpu_allotment())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"


def test_a_lazy_session_that_fails_to_build_raises_each_time_it_is_used(tmp_path):
    path = tmp_path / "gone.kkm"
    kk.save(_model(), path)
    copy = pickle.loads(pickle.dumps(kk.Session(path)))
    path.unlink()
    for _ in range(2):
        with pytest.raises(kk.ModelFormatError):
            copy.run(None, {"x": np.ones((1, 4), np.float32)})

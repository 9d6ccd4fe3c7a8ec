"""config.HUGE_SLAB (issue 11, session 19; docs/numba.md, "Uneven cores on the H200 host"): aligned_empty's small
arrays (packed weights, thread buffers) and fpair's helper buffers cut one after another from slabs that start on
2 MiB and are advised as transparent huge pages; larger ones from NumPy. Each array on its own bytes and alignment,
from any thread; a model's output bit for bit the output without slabs."""
from __future__ import annotations

import mmap
import os
import threading

import numba
import numpy as np
import pytest
from kernelkit import Session
from kernelkit.testing import assert_close
from kernelkit_numba import config
from kernelkit_numba.kernels import fpair

pytestmark = pytest.mark.skipif(not hasattr(mmap, "MAP_PRIVATE"), reason="slabs need private anonymous mappings")

SLAB = 4 << 20


@pytest.fixture
def slabs(monkeypatch):
    """HUGE_SLAB on at 4 MiB, from a fresh slab."""
    monkeypatch.setattr(config, "HUGE_SLAB", SLAB)
    monkeypatch.setattr(config, "_slab", [None, 0])
    return config._slab


def _span(a) -> tuple[int, int]:
    return a.ctypes.data, a.ctypes.data + a.nbytes


def _advised(addr: int) -> bool | None:
    """Whether the mapping holding ``addr`` is advised as huge pages (smaps' ``hg``); None without /proc."""
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and line.startswith("VmFlags"):
            return "hg" in line.split()
    return None


def test_slab_arrays(slabs):
    """Small arrays: each on its alignment (64 bytes at least), writable, apart from every other, one after another
    in one slab that starts on 2 MiB until one does not fit (then a new slab); a quarter of a slab or more: NumPy's."""
    sizes = [(1000, np.float32, 64), (3, np.float32, 4096), (17, np.int64, 1), (250_000, np.float32, 64),
             (5, np.uint8, 128)]
    got = [config.aligned_empty(n, dt, al) for n, dt, al in sizes]
    first = slabs[0]
    lo = first.ctypes.data
    assert lo % config.HUGE_PAGE == 0 and first.size == SLAB
    for a, (n, dt, al) in zip(got, sizes):
        assert a.size == n and a.dtype == dt and a.flags.writeable and a.ctypes.data % max(al, 64) == 0
        assert lo <= a.ctypes.data and _span(a)[1] <= lo + SLAB
        a[...] = 7
    spans = sorted(_span(a) for a in got)
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:]))
    assert all((a == 7).all() for a in got)
    big = config.aligned_empty(SLAB // 16, np.float32, 64)  # a quarter of a slab: NumPy's
    assert not (lo <= big.ctypes.data < lo + SLAB) and slabs[0] is first
    fill = [config.aligned_empty(200_000, np.float32, 64) for _ in range(6)]  # 4.8 MB: past the first slab
    assert slabs[0] is not first and slabs[0].ctypes.data % config.HUGE_PAGE == 0
    assert any(not (lo <= a.ctypes.data < lo + SLAB) for a in fill)
    if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"):
        assert _advised(lo) in (True, None)


def test_slab_threads(slabs):
    """Eight threads taking arrays at once: no two overlap."""
    out, errors = [], []

    def take():
        try:
            sizes = np.random.default_rng().integers(1, 5000, 200)
            out.extend(config.aligned_empty(int(n), np.float32, 64) for n in sizes)
        except Exception as exc:  # (re-raised below)
            errors.append(exc)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(out) == 1600
    spans = sorted(_span(a) for a in out)
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:]))


def test_helper_buffer_zeroed(slabs, monkeypatch):
    """fpair's helper buffers on the slabs: zeroed, as NumPy's zeros were, and grown."""
    monkeypatch.setattr(fpair, "_helper_buffers", {})
    a = fpair.helper_buffer("slab.test", 1000)
    assert a.size == 1000 and not a.any() and a.ctypes.data % config.BUFFER_ALIGN == 0
    lo = slabs[0].ctypes.data
    assert lo <= a.ctypes.data < lo + SLAB
    assert fpair.helper_buffer("slab.test", 10) is a and fpair.helper_buffer("slab.test", 2000).size == 2000


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the kernels' addresses matter only compiled (and a 56x56 "
                    "bottleneck in Python would take minutes)")
@pytest.mark.parametrize("threads", [1, 2])
def test_slab_model_bits(quiet_server, monkeypatch, threads):
    """A ResNet-50 bottleneck (test_backoff_bits') built with the slabs: its output the output without them bit for
    bit, within the fp32 tolerances of the reference (fpair's helper never comes: every pair runs its halves on the
    caller, as test_backoff_bits' sessions; a helper that comes for some calls and not others can give a two-thread
    session other last bits, docs/numba.md "Uneven cores on the H200 host")."""
    from test_backoff_bits import _bottleneck

    model, feeds = _bottleneck(np.random.default_rng(19))
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    plain = Session(model, vendors=["numba"], fallback=False, threads=threads).run(None, feeds)[0]
    monkeypatch.setattr(config, "HUGE_SLAB", 32 << 20)
    monkeypatch.setattr(config, "_slab", [None, 0])
    monkeypatch.setattr(config, "_thread_buffers", threading.local())  # (the thread buffers from the slabs too)
    sess = Session(model, vendors=["numba"], fallback=False, threads=threads)
    got = [sess.run(None, feeds)[0] for _ in range(2)]
    assert config._slab[0] is not None
    for a in got:
        np.testing.assert_array_equal(a, plain)
    assert_close(got[0], want, np.float32)

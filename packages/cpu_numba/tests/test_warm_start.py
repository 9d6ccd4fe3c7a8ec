"""Start-up (issue 11, session 7): the int8 drivers compile only the variant they run (by_kind.py),
each variant's copy has its own disk-cache entry, and a second process with the same cache loads
every kernel (MaxPool's plane drivers included) instead of compiling any. Each probe runs in a
fresh process (compiled code is per process); results are checked against int64 NumPy and the
reference kernels."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kernelkit_numba.kernels import qtile

JIT_OFF = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
NO_JIT = pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")

# MatMulInteger's path (qpack.int32_blocks) on the variant KERNELKIT_INT8_GEMM selects, against an
# int64 product; prints which of qtile's products hold compiled code and the compilations.
_INT8 = """
import json
import numpy as np
from numba.core import event
from kernelkit_numba.kernels import qpack, qtile

count = [0]
class Count(event.Listener):
    def on_start(self, ev):
        count[0] += 1
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
rng = np.random.default_rng(3)
variant = qtile.select(True)
err = 0
for m, k, n in ((7, 40, 70), (33, 129, 47)):
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    bt = rng.integers(-64, 64, (n, k)).astype(np.int8)
    pb = qpack.PackedB(bt, np.array(0, np.int8), variant.nr)
    out = np.empty((m, n), np.int32)
    qpack.run_blocks(qpack.int32_blocks, variant, pb, a, (pb.column_terms(0), pb.zp, pb.has_zp, out))
    want = (a.astype(np.int64) @ bt.astype(np.int64).T).astype(np.int32)
    err = max(err, int(np.abs(out.astype(np.int64) - want).max()))
products = {"generic": qtile._gemm_generic, "avx2": qtile._gemm_avx2, "vnni512": qtile._GEMM_VNNI512}
print(json.dumps({"variant": variant.name, "err": err, "compilations": count[0],
                  "compiled": sorted(k for k, d in products.items() if d.signatures),
                  "generic_driver": bool(qpack.int32_blocks.dispatcher.signatures)}))
"""

# A 3x3/2 MaxPool after a convolution (dwtile's plane drivers where avx512 runs), numba against the
# reference; prints the compilations of this process and the largest difference.
_POOL = """
import json
import numpy as np
import kernelkit
from kernelkit.testing import assert_close
from kernelkit_converters.onnx import convert
from numba.core import event
from onnx import TensorProto, helper, numpy_helper

count = [0]
class Count(event.Listener):
    def on_start(self, ev):
        count[0] += 1
    def on_end(self, ev):
        pass
rng = np.random.default_rng(0)
w = (rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32)
nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
         helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 24, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [numpy_helper.from_array(w, "w")])
model = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
feed = {"x": rng.standard_normal((1, 8, 24, 24)).astype(np.float32)}
want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)[0]
event.register("numba:compile", Count())
got = kernelkit.Session(model, vendors=["numba"], fallback=False).run(None, feed)[0]
assert_close(got, want)
print(json.dumps({"compilations": count[0]}))
"""


def _probe(code: str, cache, **env) -> dict:
    full = {**os.environ, "NUMBA_CACHE_DIR": str(cache), **env}
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@NO_JIT
def test_int8_driver_compiles_only_its_variant(tmp_path):
    best = next((v for v in ("vnni512", "avx2") if qtile.available(v)), None)
    if best is None:
        pytest.skip("no int8 micro-kernel variant but generic on this CPU")
    auto = _probe(_INT8, tmp_path, KERNELKIT_INT8_GEMM="auto")
    assert auto["variant"] == best and auto["err"] == 0
    assert auto["compiled"] == [best]  # not the other products gemm_kind branches to
    assert not auto["generic_driver"]  # the driver ran as its copy for this kind only
    generic = _probe(_INT8, tmp_path, KERNELKIT_INT8_GEMM="generic")  # same cache: its own entries
    assert generic["variant"] == "generic" and generic["err"] == 0 and generic["compiled"] == ["generic"]
    assert generic["compilations"] > 0
    again = _probe(_INT8, tmp_path, KERNELKIT_INT8_GEMM="auto")  # loads the auto process's copy
    assert again["err"] == 0 and again["compilations"] == 0


@NO_JIT
def test_a_warm_process_compiles_nothing(tmp_path):
    first = _probe(_POOL, tmp_path, KERNELKIT_NUMBA_START="eager")
    assert first["compilations"] > 0
    second = _probe(_POOL, tmp_path, KERNELKIT_NUMBA_START="eager")
    assert second["compilations"] == 0


# Deferred start (kernelkit.deferred) in a fresh process, tiered: a session that is never run still
# upgrades (MAX_DELAY_S after its build); asking the registry for numba's kernels meanwhile finishes
# the import on the asking thread; run_async runs count as runs.
_DEFERRED = """
import json, sys
import numpy as np
import kernelkit
from kernelkit.testing import assert_close

rng = np.random.default_rng(0)
g = kernelkit.GraphBuilder("tiny")
x = g.input("x", (2, 8, 6, 6))
w = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
g.output(g.op("Softmax", g.op("Conv", x, w, np.ones(8, np.float32)), axis=1))
model = g.build()
feed = {"x": rng.standard_normal((2, 8, 6, 6)).astype(np.float32)}
want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)[0]
idle = kernelkit.Session(model, vendors=["numba", "reference"])
busy = kernelkit.Session(model)
deferred = "kernelkit_numba.kernels.conv" not in sys.modules
first = sorted(set(v for _, v in idle.placement().values()))
assert_close(busy.run_async(None, feed).result()[0], want)
keys = kernelkit.registry.kernels(vendor="numba")  # finishes the import here
kernelkit.backends.settle()
out = {"deferred": deferred, "first": first, "numba_keys": len(keys)}
for name, sess in (("idle", idle), ("busy", busy)):
    assert_close(sess.run(None, feed)[0], want)
    out[name] = sorted(set(v for _, v in sess.placement().values()))
print(json.dumps(out))
"""


@NO_JIT
def test_deferred_sessions_upgrade_run_or_not(tmp_path):
    row = _probe(_DEFERRED, tmp_path, KERNELKIT_NUMBA_START="tiered")
    assert row["deferred"] and row["first"] == ["reference"] and row["numba_keys"] > 50
    assert row["idle"] == ["numba"] and row["busy"] == ["numba"]


# DynamicQuantizeMatMul's serial bound call (qpack.dq_matmul_bound, its kind in dims[0]) at batch 1,
# one thread: runs the copies for its variant, never the generic drivers.
_DYNAMIC = """
import json
import numpy as np
import kernelkit
from kernelkit.builder import GraphBuilder
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import qpack

rng = np.random.default_rng(16)
k, n = 90, 40
consts = [rng.integers(-128, 128, (k, n)).astype(np.int8), rng.uniform(0.01, 0.02, n).astype(np.float32),
          rng.integers(-9, 9, n).astype(np.int8), rng.standard_normal(n).astype(np.float32)]
g = GraphBuilder("dqmm")
x = g.input("x", ("N", k))
g.output(g.op("DynamicQuantizeMatMul", x, *[g.constant(c, name=f"c{i}") for i, c in enumerate(consts)],
              domain="com.microsoft"))
model = g.build()
sess = kernelkit.Session(model, vendors=["numba"], fallback=False, passes=False, threads=1)
ref = kernelkit.Session(model, vendors=["reference"], passes=False)
for _ in range(3):
    feed = {"x": rng.standard_normal((1, k)).astype(np.float32)}
    assert_close(sess.run(None, feed)[0], ref.run(None, feed)[0])
generic = [f.__name__ for f in (qpack.dq_matmul_bound, qpack.dq_matmul_plain, qpack.dq_matmul_small,
                                qpack.dq_matmul_rows) if f.dispatcher.signatures]
from kernelkit_numba import by_kind
target = id(by_kind._target(qpack.dq_matmul_bound))  # the copies made for it (by_kind.specialize), run
copies = sorted(str(kind) for (d, kind), fn in by_kind._copies.items() if d == target and fn.signatures)
print(json.dumps({"generic": generic, "copies": copies}))
"""


@NO_JIT
def test_dynamic_bound_call_runs_its_variants_copies(tmp_path):
    if not any(qtile.available(v) for v in ("vnni512", "avx2")):
        pytest.skip("no int8 micro-kernel variant but generic on this CPU")
    row = _probe(_DYNAMIC, tmp_path, KERNELKIT_NUMBA_START="eager")
    assert row["generic"] == [] and len(row["copies"]) == 1

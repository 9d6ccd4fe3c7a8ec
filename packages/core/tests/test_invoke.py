"""One kernel-call path (kernelkit.invoke) for the Session and for constant folding: both bind a
kernel the same way (context, prepare, attributes it names, output_count)."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import KernelBuildError, invoke, plan
from kernelkit.passes import builtin
from kernelkit.testing import assert_close, isolate_registries


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    isolate_registries(monkeypatch)


def test_session_and_folding_share_the_call_path():
    assert plan.bind is invoke.bind and builtin.invoke is invoke.invoke


def _neg_model(constant: bool):
    g = kk.GraphBuilder("neg")
    x = g.constant(np.array([1.0, -2.0])) if constant else g.input("x", (2,), "float64")
    g.output(g.op("Neg", g.op("Neg", x, name="inner"), name="outer"))
    return g.build()


def test_a_class_kernel_is_prepared_alike_when_folded_and_when_run():
    seen = []

    @kk.register_kernel("Neg", device="cpu", vendor="reference", dtype="float64", priority=-100, override=True)
    class Neg:
        def prepare(self, specs, attrs):
            seen.append((self.context.node.name, self.context.device.name, [s.shape for s in specs]))

        def execute(self, x):
            return np.negative(x)

    folded = kk.Session(_neg_model(constant=True))  # both nodes folded by the reference kernel
    assert folded.graph.nodes == [] and seen == [("inner", "cpu", [(2,)]), ("outer", "cpu", [(2,)])]
    assert_close(folded.run(None, {})[0], np.array([1.0, -2.0]))
    seen.clear()
    sess = kk.Session(_neg_model(constant=False), vendors=["reference"])
    assert seen == [("inner", "cpu", [(2,)]), ("outer", "cpu", [(2,)])]
    assert_close(sess.run(None, {"x": np.array([3.0, 4.0])})[0], np.array([3.0, 4.0]))


def test_prepare_failure_names_the_node():
    @kk.register_kernel("Neg", device="cpu", vendor="reference", dtype="float64", priority=-100, override=True)
    class Broken:
        def prepare(self, specs, attrs):
            raise RuntimeError("no luck")

        def execute(self, x):
            return x

    model = _neg_model(constant=True)
    kk.infer_shapes(model.graph)
    assert kk.run_passes(model.graph, ["fold_constants"]) == {}  # folding gives up, logging why
    assert [n.name for n in model.graph.nodes] == ["inner", "outer"]
    for constant in (True, False):  # the session reports it, naming the node
        with pytest.raises(KernelBuildError, match=r"node 'inner' \(Neg\): prepare failed .*RuntimeError: no luck"):
            kk.Session(_neg_model(constant=constant), vendors=["reference"])


def test_kernel_attrs_binds_only_what_a_kernel_names():
    entry = kk.registry.KernelEntry(kk.registry.KernelKey("Op", "cpu", "v", "float32"), None,
                                    attr_names=frozenset({"alpha", "output_count"}))
    assert invoke.kernel_attrs(entry, {"alpha": 1.0, "beta": 2.0}, 3) == {"alpha": 1.0, "output_count": 3}
    entry.attr_names = None  # takes **attrs
    assert invoke.kernel_attrs(entry, {"alpha": 1.0, "beta": 2.0}, 3) == {"alpha": 1.0, "beta": 2.0}

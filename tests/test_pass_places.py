"""The fusing passes put each fused node in the node list at the place of the block's node it stands for, and
every other node keeps its order, on the models benchmarks/ builds (benchmarks/pass_times.py's): fuse_gelu
and fuse_silu at the node that wrote the block's output, fuse_matmul_bias at the Add's, fuse_qdq at the
group's first node, whose name the fused node keeps (a DynamicQuantizeMatMul at its MatMulIntegerToFloat's,
itself at its MatMulInteger's). Issue 11, session 15: the passes take the places from their index
(``_Index.fuse``), where each fusion looked its node up in the list."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("kernelkit_converters")

from kernelkit.passes import passes  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_pass_times",
                                               Path(__file__).parents[1] / "benchmarks/pass_times.py")
pass_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pass_times)


def _writes_output(fused, gone):
    """The removed node that wrote the fused node's output."""
    return [n for n in gone if fused.outputs[0] in n.outputs]


def _keeps_name(fused, gone):
    """The removed node whose name the fused node keeps."""
    return [n for n in gone if n.name == fused.name]


CASES = [  # (model, pass, the rule of the fused node's place, the op the pass makes)
    ("bert_l4", "fuse_gelu", _writes_output, "Gelu"),
    ("gpt2_l4", "fuse_gelu", _writes_output, "Gelu"),
    ("bert_l4", "fuse_matmul_bias", _writes_output, "MatMul"),
    ("efficientnet_b0", "fuse_silu", _writes_output, "Swish"),
    ("detection_head", "fuse_silu", _writes_output, "Swish"),
    ("qs:resnet18", "fuse_qdq", _keeps_name, "QLinearConv"),
    ("qs:transformer", "fuse_qdq", _keeps_name, "DynamicQuantizeMatMul"),
]


@pytest.mark.parametrize(("model", "name", "rule", "op"), CASES, ids=[f"{m}-{p}" for m, p, _, _ in CASES])
def test_fused_nodes_take_their_blocks_places(model, name, rule, op, tmp_path):
    if model.startswith("qs:"):
        pytest.importorskip("onnxruntime")
    graph = pass_times.before(pass_times.load(model, tmp_path), name)
    old = list(graph.nodes)  # held: no removed node's id is reused while the lists are compared
    fired = next(p for p in passes() if p.name == name).fn(graph, pass_times.context())
    old_ids, new_ids = {id(n) for n in old}, {id(n) for n in graph.nodes}
    fused = [n for n in graph.nodes if id(n) not in old_ids]
    gone = [n for n in old if id(n) not in new_ids]
    assert fired > 0 and sum(n.op == op for n in fused) > 0
    at = {}
    for node in fused:
        place = rule(node, gone)
        assert len(place) == 1, (node, place)
        at[id(place[0])] = node
    assert len(at) == len(fused)
    want = [at.get(id(n), n) for n in old if id(n) in new_ids or id(n) in at]
    assert [id(n) for n in graph.nodes] == [id(n) for n in want]

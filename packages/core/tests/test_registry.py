"""The op and kernel registry: duplicates, overrides, selection order and error messages."""
from __future__ import annotations

import kernelkit
import numpy as np
import pytest
from kernelkit import (
    GraphBuilder,
    Node,
    OpAttributeError,
    RegistryError,
    Session,
    TensorSpec,
    UnsupportedOpError,
    Value,
)
from kernelkit.errors import KernelkitError
from kernelkit.ir import Graph, Model
from kernelkit.ops._util import same_as_input
from kernelkit.registry import get_schema, normalize_attrs, select_kernel
from kernelkit.testing import isolate_registries

DOMAIN = "kk.test"


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    """Every registration a test makes is undone afterwards."""
    isolate_registries(monkeypatch)


def _op(name="Twice", **kwargs):
    return kernelkit.register_op(name, domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input,
                                 **kwargs)


def _kernel(vendor, dtype="float32", priority=0, **kwargs):
    def fn(x):
        return x * 2

    kernelkit.register_kernel("Twice", domain=DOMAIN, device="cpu", vendor=vendor, dtype=dtype,
                              priority=priority, **kwargs)(fn)
    return fn


def _pick(dtype="float32", vendors=None, device="cpu"):
    entry = select_kernel(f"{DOMAIN}::Twice", device, dtype, vendors)
    return None if entry is None else entry.key.vendor


# -- ops ----------------------------------------------------------------------------------------
def test_duplicate_op_raises_and_override_replaces():
    _op(attrs={"k": ("int", 1)})
    with pytest.raises(RegistryError, match="kk.test::Twice.*override=True"):
        _op()
    _op(attrs={"k": ("float", 2.0)}, override=True)
    assert get_schema("Twice", DOMAIN).attrs == {"k": ("float", 2.0)}


def test_unknown_op_error_names_it_and_how_to_register():
    with pytest.raises(UnsupportedOpError, match=r"'kk.test::Nope'.*register_op"):
        get_schema("Nope", DOMAIN)


def test_unknown_attribute_type_is_refused():
    with pytest.raises(RegistryError, match="unknown attribute type"):
        _op(attrs={"k": ("complex", 0)})


def test_python_types_map_to_attribute_kinds():
    schema = _op(attrs={"a": (int, 0), "b": (float, 1.0), "c": (str, ""), "d": ([int], ()),
                        "e": (np.ndarray, None)})
    assert {k: t for k, (t, _) in schema.attrs.items()} == {"a": "int", "b": "float", "c": "string",
                                                            "d": "ints", "e": "tensor"}


# -- kernels ------------------------------------------------------------------------------------
def test_register_kernel_returns_the_function_unchanged():
    _op()

    def fn(x):
        return x

    assert kernelkit.register_kernel("Twice", domain=DOMAIN, device="cpu", vendor="a", dtype="float32")(fn) is fn


def test_duplicate_kernel_raises_and_override_replaces():
    _op()
    first = _kernel("a")
    with pytest.raises(RegistryError, match=r"'kk.test::Twice', 'cpu', 'a', 'float32'.*override=True"):
        _kernel("a")
    assert select_kernel(f"{DOMAIN}::Twice", "cpu", "float32").impl is first
    second = _kernel("a", override=True)
    assert select_kernel(f"{DOMAIN}::Twice", "cpu", "float32").impl is second


def test_duplicate_in_a_dtype_tuple_registers_nothing():
    _op()
    _kernel("a", dtype="float64")
    with pytest.raises(RegistryError):
        _kernel("a", dtype=("float32", "float64"))
    assert _pick("float32") is None  # all or nothing


def test_kernel_class_without_execute_is_refused():
    class Half:
        def prepare(self, specs, attrs):
            pass

    with pytest.raises(RegistryError, match="lacks.*execute"):
        kernelkit.register_kernel("Twice", domain=DOMAIN, device="cpu", vendor="a", dtype="float32")(Half)


def test_priority_orders_vendors_high_first():
    _op()
    _kernel("low", priority=-5)
    _kernel("high", priority=7)
    _kernel("mid", priority=0)
    assert _pick() == "high"


def test_vendors_list_orders_and_filters():
    _op()
    _kernel("a", priority=10)
    _kernel("b", priority=0)
    _kernel("c", priority=5)
    assert _pick(vendors=["b", "a"]) == "b"  # the list beats priority
    assert _pick(vendors=["zzz", "c"]) == "c"
    assert _pick(vendors=["zzz"]) is None


def test_exact_dtype_before_wildcard():
    _op()
    _kernel("v", dtype="*")
    _kernel("w", dtype="*")
    exact = _kernel("w", dtype="float32")  # registered after the wildcards, same priority
    assert select_kernel(f"{DOMAIN}::Twice", "cpu", "float32").impl is exact
    assert select_kernel(f"{DOMAIN}::Twice", "cpu", "float32", ["v", "w"]).key.vendor == "v"  # vendors first
    assert select_kernel(f"{DOMAIN}::Twice", "cpu", "int64").key.dtype == "*"


def test_supports_can_decline_a_node():
    _op()
    _kernel("picky", priority=10, supports=lambda specs, attrs: specs[0].rank == 2)
    _kernel("any", priority=0)
    rank2, rank3 = [TensorSpec((2, 3), "float32")], [TensorSpec((2, 3, 4), "float32")]
    assert select_kernel(f"{DOMAIN}::Twice", "cpu", "float32", None, rank2, {}).key.vendor == "picky"
    assert select_kernel(f"{DOMAIN}::Twice", "cpu", "float32", None, rank3, {}).key.vendor == "any"


def test_kernels_listing_filters_by_field():
    _op()
    _kernel("a", dtype=("float32", "float64"))
    _kernel("b", dtype="float32")
    keys = kernelkit.kernels(f"{DOMAIN}::Twice")
    assert [tuple(k) for k in keys] == [(f"{DOMAIN}::Twice", "cpu", "a", "float32", ""),  # "": default layout
                                        (f"{DOMAIN}::Twice", "cpu", "a", "float64", ""),
                                        (f"{DOMAIN}::Twice", "cpu", "b", "float32", "")]
    assert [k.vendor for k in kernelkit.kernels(f"{DOMAIN}::Twice", dtype="float64")] == ["a"]


def test_missing_kernel_error_lists_existing_keys():
    _op()
    _kernel("a", dtype="float64")
    kernelkit.register_kernel("Twice", domain=DOMAIN, device="gpu", vendor="g", dtype="float32")(lambda x: x)
    g = GraphBuilder("m")
    g.output(g.op("Twice", g.input("x", (3,), "float32"), domain=DOMAIN, name="tw"))
    with pytest.raises(UnsupportedOpError) as info:
        Session(g.build())
    message = str(info.value)
    assert "'tw'" in message and "float32" in message
    assert "(cpu, a, float64)" in message and "(gpu, g, float32)" in message


# -- attributes ---------------------------------------------------------------------------------
def _model_with(node: Node) -> Model:
    values = {"x": Value("x", TensorSpec((4,), "float32"))}
    return Model(Graph([node], ["x"], ["y"], values, name="m"))


@pytest.mark.parametrize("attrs, pattern", [
    ({"alpah": 0.1}, r"'leaky'.*unknown attribute.*'alpah'.*known: \['alpha'\]"),
    ({"alpha": "big"}, r"'leaky'.*'alpha' expects float, got str"),
    ({"alpha": [0.1]}, r"'leaky'.*'alpha' expects float, got list"),
])
def test_bad_attributes_name_the_node(attrs, pattern):
    with pytest.raises(OpAttributeError, match=pattern):
        Session(_model_with(Node("LeakyRelu", ["x"], ["y"], attrs, name="leaky")))


def test_attribute_coercion_and_required_ones():
    schema = _op(attrs={"n": ("int", kernelkit.REQUIRED), "f": ("float", 0.5), "s": ("string", ""),
                        "l": ("ints", ())})
    out = normalize_attrs(schema, {"n": np.int64(3), "f": 2, "s": b"abc", "l": np.array([1, 2])}, "node 'q'")
    assert out == {"n": 3, "f": 2.0, "s": "abc", "l": (1, 2)}
    assert type(out["n"]) is int and type(out["f"]) is float
    with pytest.raises(OpAttributeError, match="node 'q'.*required attribute 'n'"):
        normalize_attrs(schema, {}, "node 'q'")
    with pytest.raises(OpAttributeError, match="node 'q'.*'n' expects int, got float"):
        normalize_attrs(schema, {"n": 1.5}, "node 'q'")
    with pytest.raises(OpAttributeError, match="node 'q'.*'l' expects int, got str"):
        normalize_attrs(schema, {"n": 1, "l": [1, "a"]}, "node 'q'")
    assert normalize_attrs(schema, {"n": 0}, "node 'q'")["n"] == 0  # a valid 0 is kept


def test_errors_carry_stable_codes():
    assert issubclass(RegistryError, KernelkitError) and RegistryError.code == "KK_REGISTRY"
    assert OpAttributeError.code == "KK_ATTRIBUTE" and UnsupportedOpError.code == "KK_UNSUPPORTED_OP"

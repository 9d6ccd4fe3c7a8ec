"""Reader for kernelkit's YAML custom-layer format (the same content as the XML, in YAML):

    version: 1
    layers:
      - op: LeakyRelu                 # a registered op ("domain" optional)
        entry: leaky_relu             # the __kernel function
        sources: [leaky_relu.cl]      # relative to this file's folder, concatenated in order
        defines:
          - {name: neg_slope, param: alpha, type: float, default: 0.01}   # bound to an attribute
          - {name: VEC, value: 1}                                          # static
        buffers:
          - {arg: 0, input: 0, format: BFYX}
          - {arg: 1, output: 0}
          - {arg: 2, data: W}         # a node input by its port name (an initializer)
        compiler_options: [-cl-mad-enable]
        work_sizes: {global: [X, Y, B*F], local: []}
        dtypes: [float32]             # optional; vendor (custom) and priority (10) too

Read with ``yaml.safe_load``; unknown keys and wrong types are ConfigErrors naming the key path.
"""
from __future__ import annotations

from pathlib import Path

from kernelkit.dtypes import dtype_name
from kernelkit.errors import KernelkitError
from kernelkit.untrusted import load_yaml, read_regular

from .config import (
    DEFAULT_GLOBAL,
    Buffer,
    Define,
    LayerConfig,
    config_error,
    parse_format,
    parse_index,
    parse_work_sizes,
    resolve_source,
    split_options,
    validate,
)

_LAYER_KEYS = {"op": True, "domain": False, "entry": True, "sources": True, "defines": False, "buffers": True,
               "compiler_options": False, "work_sizes": False, "dtypes": False, "vendor": False, "priority": False}


def _mapping(value, where: str, keys: dict[str, bool]) -> dict:
    if not isinstance(value, dict):
        raise config_error(where, f"expected a mapping, got {type(value).__name__}")
    unknown = sorted(set(map(str, value)) - set(keys))
    if unknown:
        raise config_error(where, f"unknown key(s) {unknown}; known: {sorted(keys)}")
    missing = [k for k, req in keys.items() if req and k not in value]
    if missing:
        raise config_error(where, f"missing required key(s) {missing}")
    return value


def _string(value, where: str) -> str:
    if not isinstance(value, str):
        raise config_error(where, f"expected a string, got {type(value).__name__} {value!r}")
    return value


def _list(value, where: str) -> list:
    if not isinstance(value, list):
        raise config_error(where, f"expected a list, got {type(value).__name__}")
    return value


def _work_sizes(value, where: str):
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    elif isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return parse_work_sizes(_string(value, where), where)


def _buffer(value, where: str) -> Buffer:
    b = _mapping(value, where, {"arg": True, "input": False, "output": False, "data": False, "format": False})
    kinds = [k for k in ("input", "output", "data") if k in b]
    if len(kinds) != 1:
        raise config_error(where, "a buffer needs exactly one of 'input: <port>', 'output: <port>', 'data: <name>'")
    kind = kinds[0]
    arg = parse_index(b["arg"], "arg", f"{where}.arg")
    if kind == "data":
        if "format" in b:
            raise config_error(where, "a data buffer takes no format")
        return Buffer(arg, "data", where, name=_string(b["data"], f"{where}.data"))
    return Buffer(arg, kind, where, port=parse_index(b[kind], kind, f"{where}.{kind}"),
                  format=parse_format(b.get("format"), f"{where}.format"))


def _define(value, where: str) -> Define:
    d = _mapping(value, where, {"name": True, "value": False, "param": False, "type": False, "default": False})
    name = _string(d["name"], f"{where}.name")
    if "value" in d:
        if "param" in d or "default" in d:
            raise config_error(where, "a define has either 'value' (static) or 'param'/'default', not both")
        text = str(d["value"]).lower() if isinstance(d["value"], bool) else str(d["value"])
        return Define(f"{name} {text}", where, None, None, None)
    param = _string(d["param"], f"{where}.param") if "param" in d else None
    kind = _string(d["type"], f"{where}.type") if "type" in d else None
    default = d.get("default")
    if isinstance(default, list):
        default = ",".join(str(v) for v in default)
    return Define(name, where, param, kind, None if default is None else str(default))


def _layer(value, file: Path, where: str) -> LayerConfig:
    d = _mapping(value, where, _LAYER_KEYS)
    sources = tuple(resolve_source(file.parent, _string(s, f"{where}.sources[{i}]"), f"{where}.sources[{i}]")
                    for i, s in enumerate(_list(d["sources"], f"{where}.sources")))
    options = d.get("compiler_options", [])
    options = split_options(options, f"{where}.compiler_options") if isinstance(options, str) else \
        [_string(o, f"{where}.compiler_options") for o in _list(options, f"{where}.compiler_options")]
    ws = _mapping(d.get("work_sizes", {}), f"{where}.work_sizes", {"global": False, "local": False})
    dtypes = d.get("dtypes", ["float32"])
    try:
        dtypes = tuple(dtype_name(_string(t, f"{where}.dtypes")) for t in _list(dtypes, f"{where}.dtypes"))
    except KernelkitError as exc:
        raise config_error(f"{where}.dtypes", str(exc)) from None
    priority = d.get("priority", 10)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise config_error(f"{where}.priority", f"expected an integer, got {priority!r}")
    layer = LayerConfig(
        op=_string(d["op"], f"{where}.op"), domain=_string(d.get("domain", ""), f"{where}.domain"),
        entry=_string(d["entry"], f"{where}.entry"), sources=sources, file=file, where=where,
        defines=tuple(_define(v, f"{where}.defines[{i}]") for i, v in enumerate(_list(d.get("defines", []),
                                                                                      f"{where}.defines"))),
        buffers=tuple(_buffer(v, f"{where}.buffers[{i}]") for i, v in enumerate(_list(d["buffers"],
                                                                                      f"{where}.buffers"))),
        compiler_options=tuple(options),
        global_ws=_work_sizes(ws.get("global", DEFAULT_GLOBAL), f"{where}.work_sizes.global"),
        local_ws=_work_sizes(ws.get("local", ""), f"{where}.work_sizes.local"),
        dtypes=dtypes, vendor=_string(d.get("vendor", "custom"), f"{where}.vendor"), priority=priority)
    if not layer.global_ws:
        raise config_error(f"{where}.work_sizes.global", "the global work size is empty")
    return validate(layer)


def read_yaml(file: Path) -> list[LayerConfig]:
    try:
        import yaml  # a core dependency; imported here so that XML configs never need it
    except ImportError as exc:
        raise config_error(str(file), f"reading YAML configs needs PyYAML: pip install pyyaml ({exc})") from None
    try:
        doc = load_yaml(read_regular(file).decode("utf-8"))  # yaml.SafeLoader with aliases bounded
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{file}:{mark.line + 1}" if mark is not None else str(file)
        raise config_error(loc, f"malformed YAML: {getattr(exc, 'problem', None) or exc}") from None
    except (OSError, ValueError, RecursionError) as exc:  # not UTF-8, alias bomb, absurd nesting
        raise config_error(str(file), f"cannot read YAML: {type(exc).__name__}: {str(exc)[:200]}") from None
    top = _mapping(doc, str(file), {"version": False, "layers": True})
    if top.get("version", 1) != 1:
        raise config_error(f"{file}: version", f"unsupported version {top['version']!r}; only 1 is")
    return [_layer(v, file, f"{file}: layers[{i}]") for i, v in enumerate(_list(top["layers"], f"{file}: layers"))]

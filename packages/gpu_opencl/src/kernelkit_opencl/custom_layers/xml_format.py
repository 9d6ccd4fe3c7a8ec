"""Reader for OpenVINO's clDNN custom-layer XML, so existing configs work unchanged.

    <CustomLayer name="ReLU" type="SimpleGPU" version="1">
      <Kernel entry="example_relu_kernel">
        <Source filename="custom_layer_kernel.cl"/>
        <Define name="neg_slope" type="float" param="negative_slope" default="0.0"/>
      </Kernel>
      <Buffers>
        <Tensor arg-index="0" type="input" port-index="0" format="BFYX"/>
        <Tensor arg-index="1" type="output" port-index="0" format="BFYX"/>
        <Data name="weights" arg-index="2"/>
      </Buffers>
      <CompilerOptions options="-cl-mad-enable"/>
      <WorkSizes global="X,Y,B*F" local=""/>
    </CustomLayer>

A file holds one ``CustomLayer`` or a ``CustomLayers`` root with several. Unknown elements and
attributes are errors (a typo must not be ignored). The parser is expat with no DTD support:
a DOCTYPE (entity tricks, external entities) is refused.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from kernelkit.untrusted import read_regular

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


@dataclass
class _Element:
    tag: str
    attrs: dict
    line: int
    children: list = field(default_factory=list)


def _parse_tree(text: bytes, file: Path) -> _Element:
    parser = expat.ParserCreate()
    stack: list[_Element] = []
    root: list[_Element] = []

    def start(tag, attrs):
        el = _Element(tag, attrs, parser.CurrentLineNumber)
        (stack[-1].children if stack else root).append(el)
        stack.append(el)

    def end(tag):
        stack.pop()

    def doctype(*_):
        raise config_error(f"{file}:{parser.CurrentLineNumber}", "DOCTYPE declarations are not accepted")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = doctype
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        raise config_error(f"{file}:{exc.lineno}", f"malformed XML: {expat.errors.messages[exc.code]}") from None
    return root[0]


def _attrs(el: _Element, where: str, required=(), optional=()) -> dict:
    unknown = sorted(set(el.attrs) - set(required) - set(optional))
    if unknown:
        raise config_error(where, f"<{el.tag}> has unknown attribute(s) {unknown}; "
                                  f"known: {sorted(set(required) | set(optional))}")
    missing = [a for a in required if a not in el.attrs]
    if missing:
        raise config_error(where, f"<{el.tag}> lacks required attribute(s) {missing}")
    return el.attrs


def _children(el: _Element, file: Path, allowed: dict[str, tuple[int, int | None]]) -> dict[str, list[_Element]]:
    """Children grouped by tag, checking each tag's count against (min, max)."""
    groups: dict[str, list[_Element]] = {tag: [] for tag in allowed}
    for child in el.children:
        if child.tag not in allowed:
            raise config_error(f"{file}:{child.line}", f"unknown element <{child.tag}> inside <{el.tag}>; "
                                                       f"expected {sorted(allowed)}")
        groups[child.tag].append(child)
    for tag, (lo, hi) in allowed.items():
        n = len(groups[tag])
        if n < lo or (hi is not None and n > hi):
            count = f"exactly {lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any'}"
            raise config_error(f"{file}:{el.line}", f"<{el.tag}> must contain {count} <{tag}>, found {n}")
    return groups


def _layer(el: _Element, file: Path) -> LayerConfig:
    where = f"{file}:{el.line}"
    a = _attrs(el, where, required=("name", "type", "version"))
    if a["type"] != "SimpleGPU":
        raise config_error(where, f"CustomLayer type {a['type']!r} is not supported; only \"SimpleGPU\" is")
    if a["version"] != "1":
        raise config_error(where, f"CustomLayer version {a['version']!r} is not supported; only \"1\" is")
    domain, _, op = a["name"].rpartition("::")
    parts = _children(el, file, {"Kernel": (1, 1), "Buffers": (1, 1), "CompilerOptions": (0, None),
                                 "WorkSizes": (0, 1)})
    kernel = parts["Kernel"][0]
    entry = _attrs(kernel, f"{file}:{kernel.line}", required=("entry",))["entry"]
    kparts = _children(kernel, file, {"Source": (1, None), "Define": (0, None)})
    sources = []
    for src in kparts["Source"]:
        loc = f"{file}:{src.line}"
        sources.append(resolve_source(file.parent, _attrs(src, loc, required=("filename",))["filename"], loc))
    defines = []
    for d in kparts["Define"]:
        loc = f"{file}:{d.line}"
        da = _attrs(d, loc, required=("name",), optional=("param", "type", "default"))
        defines.append(Define(da["name"], loc, da.get("param"), da.get("type"), da.get("default")))
    buffers = []
    bparts = _children(parts["Buffers"][0], file, {"Tensor": (1, None), "Data": (0, None)})
    for t in bparts["Tensor"]:
        loc = f"{file}:{t.line}"
        ta = _attrs(t, loc, required=("arg-index", "type", "port-index"), optional=("format",))
        if ta["type"] not in ("input", "output"):
            raise config_error(loc, f"Tensor type {ta['type']!r} must be \"input\" or \"output\"")
        buffers.append(Buffer(parse_index(ta["arg-index"], "arg-index", loc), ta["type"], loc,
                              port=parse_index(ta["port-index"], "port-index", loc),
                              format=parse_format(ta.get("format"), loc)))
    for d in bparts["Data"]:
        loc = f"{file}:{d.line}"
        da = _attrs(d, loc, required=("name", "arg-index"))
        buffers.append(Buffer(parse_index(da["arg-index"], "arg-index", loc), "data", loc, name=da["name"]))
    options: list[str] = []
    for c in parts["CompilerOptions"]:
        options += split_options(_attrs(c, f"{file}:{c.line}", required=("options",))["options"], f"{file}:{c.line}")
    global_text, local_text = DEFAULT_GLOBAL, ""
    if parts["WorkSizes"]:
        ws = parts["WorkSizes"][0]
        wa = _attrs(ws, f"{file}:{ws.line}", optional=("global", "local"))
        global_text, local_text = wa.get("global", DEFAULT_GLOBAL), wa.get("local", "")
        where_ws = f"{file}:{ws.line}"
    else:
        where_ws = where
    layer = LayerConfig(op=op, domain=domain, entry=entry, sources=tuple(sources), file=file, where=where,
                        defines=tuple(defines), buffers=tuple(buffers), compiler_options=tuple(options),
                        global_ws=parse_work_sizes(global_text, where_ws),
                        local_ws=parse_work_sizes(local_text, where_ws))
    if not layer.global_ws:
        raise config_error(where_ws, "the global work size is empty")
    return validate(layer)


def read_xml(file: Path) -> list[LayerConfig]:
    try:
        text = read_regular(file)
    except OSError as exc:
        raise config_error(str(file), f"cannot read: {exc}") from None
    root = _parse_tree(text, file)
    if root.tag == "CustomLayer":
        return [_layer(root, file)]
    if root.tag == "CustomLayers":
        _attrs(root, f"{file}:{root.line}")
        layers = _children(root, file, {"CustomLayer": (0, None)})["CustomLayer"]
        return [_layer(el, file) for el in layers]
    raise config_error(f"{file}:{root.line}", f"root element <{root.tag}> is neither <CustomLayer> nor <CustomLayers>")

"""The description of one custom OpenCL layer, whichever file format it came from.

Both readers (clDNN XML and kernelkit YAML) produce :class:`LayerConfig` objects and leave all
checks that do not depend on the syntax to :func:`validate`: argument indices, formats, define
types, source paths. Every error is a :class:`kernelkit.errors.ConfigError` naming the file and the
place in it (``file:line`` for XML, ``file: layers[0].buffers[1]`` for YAML).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from kernelkit.errors import ConfigError, brief
from kernelkit.untrusted import read_regular

from .formula import Formula, FormulaError, parse_list

FORMATS = ("BFYX", "BYXF", "YXFB", "FYXB")
DEFINE_TYPES = ("int", "float", "int[]", "float[]")
DEFAULT_GLOBAL = "B*F*Y*X"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Define:
    """``#define name value``: static (``param`` None) or bound to an op attribute."""

    name: str
    where: str
    param: str | None = None
    type: str | None = None
    default: str | None = None


@dataclass(frozen=True)
class Buffer:
    """One kernel argument: an input or output tensor (by port), or a data blob (by input name)."""

    arg: int
    kind: str  # "input", "output" or "data"
    where: str
    port: int | None = None
    name: str | None = None
    format: str = "BFYX"


@dataclass
class LayerConfig:
    op: str
    entry: str
    sources: tuple[Path, ...]
    file: Path
    where: str
    domain: str = ""
    defines: tuple[Define, ...] = ()
    buffers: tuple[Buffer, ...] = ()
    compiler_options: tuple[str, ...] = ()
    global_ws: tuple[Formula, ...] = ()
    local_ws: tuple[Formula, ...] = ()
    dtypes: tuple[str, ...] = ("float32",)
    vendor: str = "custom"
    priority: int = 10

    @property
    def op_id(self) -> str:
        return f"{self.domain}::{self.op}" if self.domain else self.op

    def tensors(self, kind: str) -> list[Buffer]:
        return sorted((b for b in self.buffers if b.kind == kind), key=lambda b: b.port)

    def source_text(self) -> str:
        """The sources concatenated in order, each introduced by a comment naming it, with their
        ``#include "file"`` lines replaced by the files (which must stay inside the config's folder)."""
        parts = []
        for path in self.sources:
            parts.append(f"// Custom Layer Kernel {path.name}\n{_inline_includes(path, self.file.parent, self.where)}")
        return "\n".join(parts)


def config_error(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b(.*)$", re.M)
MAX_INCLUDE_DEPTH = 8
# build options a config may pass: -cl-* switches, -w, -Werror and plain -DNAME[=VALUE]
_OPTION = re.compile(r"-cl-[A-Za-z0-9_.=-]+|-w|-Werror|-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+-]*)?")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]|\\$")  # newlines etc., or a trailing line continuation


def _read_text(path: Path, where: str) -> str:
    try:
        return read_regular(path).decode("utf-8")
    except (OSError, ValueError) as exc:
        raise config_error(where, f"cannot read source {path.name!r}: {exc}") from None


def _inline_includes(path: Path, folder: Path, where: str, depth: int = 0) -> str:
    """``path``'s text with each ``#include "rel/file"`` replaced by that file (relative to the
    including file, inside ``folder``). ``<...>`` and macro includes are refused: the compiler never
    sees an #include, so no absolute or escaping path can be read through one."""
    root = folder.resolve()
    text = _read_text(path, where)

    def inline(match) -> str:
        arg = match.group(1).strip()
        if depth >= MAX_INCLUDE_DEPTH:
            raise config_error(where, f"{path.name}: #include nested more than {MAX_INCLUDE_DEPTH} deep")
        if len(arg) < 3 or arg[0] != '"' or arg[-1] != '"':
            raise config_error(where, f"{path.name}: '#include {brief(arg, 60)}' is not allowed; only "
                                      f'#include "relative/file" inside the config\'s folder')
        rel = Path(arg[1:-1])
        if "\0" in arg:
            raise config_error(where, f"{path.name}: #include {brief(arg, 60)} holds a NUL byte")
        target = (path.parent / rel).resolve()
        if rel.is_absolute() or (target != root and root not in target.parents):
            raise config_error(where, f"{path.name}: #include {arg} escapes the config's folder {str(root)!r}")
        if not target.is_file():
            raise config_error(where, f"{path.name}: #include {arg} not found")
        return f"// #include {arg}\n{_inline_includes(target, folder, where, depth + 1)}\n"

    return _INCLUDE.sub(inline, text)


def check_entry_point(layer: "LayerConfig") -> None:
    """The entry point must be defined as a kernel in the sources (else it fails only at run time)."""
    text = layer.source_text()
    if not re.search(rf"\b(?:__)?kernel\b[^;{{}}]*?\bvoid\s+{re.escape(layer.entry)}\s*\(", text):
        raise config_error(layer.where, f"kernel entry {layer.entry!r} is not defined as a kernel function in "
                                        f"{[p.name for p in layer.sources]}")


def resolve_source(folder: Path, filename: str, where: str) -> Path:
    """``filename`` relative to the config's folder; it must exist and stay inside that folder."""
    if not filename:
        raise config_error(where, "source filename is empty")
    if "\0" in filename:
        raise config_error(where, f"source {brief(filename, 60)} holds a NUL byte")
    rel = Path(filename)
    if rel.is_absolute():
        raise config_error(where, f"source {filename!r} must be a path relative to the config's folder")
    root = folder.resolve()
    path = (root / rel).resolve()
    if path != root and root not in path.parents:
        raise config_error(where, f"source {filename!r} escapes the config's folder {str(root)!r}")
    if not path.is_file():
        raise config_error(where, f"source file {filename!r} not found (looked in {str(root)!r})")
    return path


def split_options(text: str, where: str) -> list[str]:
    """Compiler options written as one string, split as a shell would (``shlex``)."""
    try:
        return shlex.split(text)
    except ValueError as exc:  # an unclosed quote
        raise config_error(where, f"compiler options {brief(text, 60)}: {exc}") from None


def parse_work_sizes(text, where: str) -> tuple[Formula, ...]:
    try:
        return parse_list(text)
    except FormulaError as exc:
        raise config_error(where, f"bad work size: {exc}") from None


def parse_format(text: str | None, where: str) -> str:
    if text is not None and not isinstance(text, str):
        raise config_error(where, f"tensor format must be a string, got {brief(text, 40)}")
    fmt = (text or "BFYX").upper()
    if fmt not in FORMATS:
        raise config_error(where, f"unknown tensor format {text!r}; accepted: {', '.join(FORMATS)}")
    return fmt


def parse_index(text, what: str, where: str) -> int:
    if isinstance(text, bool):
        raise config_error(where, f"{what} must be a non-negative integer, got {text!r}")
    try:
        value = int(str(text).strip())
    except ValueError:
        raise config_error(where, f"{what} must be a non-negative integer, got {text!r}") from None
    if value < 0:
        raise config_error(where, f"{what} must be a non-negative integer, got {text!r}")
    return value


def validate(layer: LayerConfig) -> LayerConfig:
    """Checks shared by every format; returns ``layer`` unchanged."""
    where = layer.where
    if not _IDENT.fullmatch(layer.entry or ""):
        raise config_error(where, f"kernel entry {layer.entry!r} is not a valid OpenCL function name")
    if not layer.op:
        raise config_error(where, "the layer has no op name")
    if not layer.sources:
        raise config_error(where, "the kernel lists no source file")
    args = sorted(b.arg for b in layer.buffers)
    for b in layer.buffers:
        if args.count(b.arg) > 1:
            raise config_error(b.where, f"arg-index {b.arg} is bound twice")
    if args != list(range(len(args))):
        raise config_error(where, f"arg-index values {args} must be 0..{len(args) - 1} without gaps "
                                  f"(one per kernel argument)")
    for kind in ("input", "output"):
        ports = [b.port for b in layer.tensors(kind)]
        for b in layer.tensors(kind):
            if ports.count(b.port) > 1:
                raise config_error(b.where, f"{kind} port-index {b.port} is bound twice")
    if not layer.tensors("output"):
        raise config_error(where, "no output tensor is bound (add a Tensor with type=\"output\")")
    for option in layer.compiler_options:
        if not _OPTION.fullmatch(option):
            raise config_error(where, f"compiler option {brief(option, 60)} is not allowed (accepted: -cl-..., "
                                      f"-w, -Werror, -DNAME[=VALUE])")
    names = set()
    for d in layer.defines:
        for text in (d.name, d.default or ""):
            if _CONTROL.search(text):  # a newline would start a preprocessor line of its own
                raise config_error(d.where, f"define {brief(d.name, 40)}: name and value must be one line of "
                                            f"text without control characters, got {brief(text, 60)}")
        name = d.name.split()[0] if d.name.split() else ""
        if not _IDENT.fullmatch(name):
            raise config_error(d.where, f"define name {d.name!r} is not a valid identifier")
        if d.param is not None and d.name != name:
            raise config_error(d.where, f"define {d.name!r} is bound to param {d.param!r}, so its name "
                                        f"must be a bare identifier")
        if d.type is not None and d.type not in DEFINE_TYPES:
            raise config_error(d.where, f"define type {d.type!r} is not one of {', '.join(DEFINE_TYPES)}")
        if d.param is not None and d.type is None:
            raise config_error(d.where, f"define {name!r} is bound to param {d.param!r} but has no type")
        if d.default is not None and d.type is not None:
            format_value(d.type, d.default, d.where)  # the default must read as its type
        if name in names:
            raise config_error(d.where, f"define {name!r} is given twice")
        names.add(name)
    if layer.local_ws and len(layer.local_ws) != len(layer.global_ws):
        raise config_error(where, f"local work size has {len(layer.local_ws)} entries, global has "
                                  f"{len(layer.global_ws)}; they must match")
    check_entry_point(layer)
    return layer


def _split_list(value) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    text = str(value).strip().strip("{}[]()")
    return [p for p in (s.strip() for s in text.split(",")) if p]


def format_value(kind: str, value, where: str) -> str:
    """The OpenCL text of a define's value of type ``kind`` (floats get an ``f`` suffix)."""
    try:
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return str(int(value) if not isinstance(value, str) else int(value.strip()))
        if kind == "float":
            return _float_literal(float(value))
        items = _split_list(value)
        scalar = kind[:-2]
        body = ",".join(format_value(scalar, v, where) for v in items)
        return f"({scalar} []){{ {body}, }}" if items else f"({scalar} []){{ }}"
    except (TypeError, ValueError):
        raise config_error(where, f"value {value!r} is not a valid {kind}") from None


def _float_literal(x: float) -> str:
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(x)
    text = repr(float(x))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"

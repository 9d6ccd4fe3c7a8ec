"""Work-size formulas: integer expressions over the output's B, F, Y, X dimensions.

OpenVINO's custom-layer configs write work sizes as ``"X,Y,B*F"``: each entry is an expression
with ``+ - * / %`` and parentheses, evaluated in integer arithmetic (``/`` truncates like C).
Formulas are parsed once with :mod:`ast` into a checked tree and evaluated by walking it; nothing
is ever passed to ``eval``.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

DIMENSIONS = ("B", "F", "Y", "X")
_MAX_LENGTH = 256  # a work size is a short formula; refuse anything that looks like a payload

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: _c_div(a, b),
    ast.Mod: lambda a, b: a - b * _c_div(a, b),
}
_UNARY = {ast.UAdd: lambda a: a, ast.USub: lambda a: -a}


class FormulaError(ValueError):
    """A formula is malformed (parse time) or cannot be evaluated (e.g. division by zero)."""


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise FormulaError("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@dataclass(frozen=True)
class Formula:
    """One checked integer expression; ``evaluate(dims)`` maps B, F, Y, X to ints."""

    text: str
    tree: ast.expr

    @classmethod
    def parse(cls, text: str) -> "Formula":
        text = str(text).strip()
        if not text:
            raise FormulaError("empty formula")
        if len(text) > _MAX_LENGTH:
            raise FormulaError(f"formula longer than {_MAX_LENGTH} characters")
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError as exc:
            raise FormulaError(f"cannot parse {text!r}: {exc.msg}") from None
        _check(tree, text)
        return cls(text, tree)

    def evaluate(self, dims: dict[str, int]) -> int:
        return _eval(self.tree, dims)

    def __str__(self) -> str:
        return self.text


def _check(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed in {text!r}; use + - * / %")
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed in {text!r}")
        _check(node.operand, text)
    elif isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise FormulaError(f"only integer constants are allowed in {text!r}, got {node.value!r}")
    elif isinstance(node, ast.Name):
        if node.id not in DIMENSIONS:
            raise FormulaError(f"unknown name {node.id!r} in {text!r}; formulas may use {', '.join(DIMENSIONS)}")
    else:
        raise FormulaError(f"{type(node).__name__} is not allowed in {text!r}; "
                           f"use integers, {', '.join(DIMENSIONS)}, + - * / % and parentheses")


def _eval(node: ast.expr, dims: dict[str, int]) -> int:
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, dims), _eval(node.right, dims))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, dims))
    if isinstance(node, ast.Constant):
        return node.value
    return int(dims[node.id])


def parse_list(text: str) -> tuple[Formula, ...]:
    """A comma-separated list of up to three formulas (an OpenCL NDRange); "" is the empty list."""
    text = str(text).strip()
    if not text:
        return ()
    parts = [p.strip() for p in text.split(",")]
    if parts and parts[-1] == "":  # "X,Y,B*F," as OpenVINO's own arrays print
        parts.pop()
    if not 1 <= len(parts) <= 3:
        raise FormulaError(f"{text!r} has {len(parts)} entries; an OpenCL work size has 1 to 3")
    return tuple(Formula.parse(p) for p in parts)

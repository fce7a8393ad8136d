"""Sizes as expressions of a method's input sizes, written as JSON trees that a model-free reader evaluates.

A lowered program's sizes follow its inputs' (a GEMM over ``(s0 - 400) // 320 + 1`` frames does
``2 * 768 * 768 * ((s0 - 400) // 320 + 1)`` FLOPs). The lowering core knows these as sympy expressions of
torch.export's size symbols; the runtime, which must run a program without its model or torch.export, needs
their values at the sizes it was given. The expressions travel in the lowering report (the sidecar beside the
program) as trees of JSON values:

    an int                       an integer
    "s0"                         a size symbol, bound by `SizeSymbols` to one input's dimension
    ["+", a, b, ...]             sum
    ["*", a, b, ...]             product
    ["^", a, n]                  power by a natural number
    ["/", p, q]                  the rational p / q (sympy writes halves in expanded products)
    ["//", a, b], ["%", a, b]    floor division and modulo (Python's, as torch.export's sizes use them)
    ["ceil//", a, b]             ceiling division
    ["max", a, b, ...], ["min", a, b, ...]

Evaluation is exact (integers and fractions), never ``eval``: a sidecar is input like any other, and an unknown
node or a tree deeper than `MAX_DEPTH` is a ValueError, not code run.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

SizeTree = int | str | list[Any]
"""An expression as JSON: see the module's docstring."""

SizeSymbols = Mapping[str, tuple[int, int, int, int]]
"""Where each size symbol's value is read: (input index, dimension, a, b), that dimension's size being
``a * symbol + b`` (export writes a length of whole frames so, e.g. ``320 * s0 + 80``)."""

MAX_DEPTH = 64
"""The deepest tree `evaluate` reads; sizes in real graphs are a few levels deep."""


def to_tree(expression: Any) -> SizeTree | None:
    """The tree of a torch.export size (an int, a SymInt or a sympy expression); None if it holds a function this
    format does not write (a float, a comparison, an opaque function)."""
    import sympy
    from torch.utils._sympy import functions as torch_functions

    node = getattr(expression, "node", None)
    if node is not None:  # a SymInt
        expression = node.expr
    if isinstance(expression, int):
        return expression
    if not isinstance(expression, sympy.Basic):
        return None
    if isinstance(expression, sympy.Integer):
        return int(expression)
    if isinstance(expression, sympy.Rational):
        return ["/", int(expression.p), int(expression.q)]
    if isinstance(expression, sympy.Symbol):
        return str(expression)
    if isinstance(expression, sympy.Pow):
        base, exponent = expression.args
        if isinstance(exponent, sympy.Integer) and exponent >= 0:
            return _node("^", [base], int(exponent))
        return None
    operators: dict[type, str] = {
        sympy.Add: "+",
        sympy.Mul: "*",
        torch_functions.FloorDiv: "//",
        torch_functions.PythonMod: "%",
        torch_functions.Mod: "%",
        torch_functions.CeilDiv: "ceil//",
        torch_functions.Max: "max",
        torch_functions.Min: "min",
        torch_functions.PowByNatural: "^",
    }
    for kind, name in operators.items():
        if isinstance(expression, kind):
            return _node(name, list(typing.cast(sympy.Basic, expression).args))
    return None


def _node(name: str, arguments: Sequence[Any], *constants: int) -> SizeTree | None:
    trees = [to_tree(a) for a in arguments]
    if any(t is None for t in trees):
        return None
    return [name, *trees, *constants]


def evaluate(tree: object, values: Mapping[str, int]) -> Fraction:
    """The value of ``tree`` with each symbol's value from ``values``; ValueError for a malformed tree or an unbound
    symbol."""
    return _evaluate(tree, values, 0)


def _evaluate(tree: object, values: Mapping[str, int], depth: int) -> Fraction:
    if depth > MAX_DEPTH:
        raise ValueError(f"a size expression deeper than {MAX_DEPTH} levels")
    if isinstance(tree, bool):
        raise ValueError("a size expression holds a boolean")
    if isinstance(tree, int):
        return Fraction(tree)
    if isinstance(tree, str):
        if tree not in values:
            raise ValueError(f"size symbol {tree!r} is bound to no input dimension")
        return Fraction(values[tree])
    if not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        raise ValueError(f"not a size expression: {str(tree)[:60]}")
    name, arguments = tree[0], [_evaluate(a, values, depth + 1) for a in tree[1:]]
    return _apply(name, arguments)


def _apply(name: str, arguments: list[Fraction]) -> Fraction:
    binary = {"^", "/", "//", "%", "ceil//"}
    if name not in binary | {"+", "*", "max", "min"}:
        raise ValueError(f"unknown size expression {name[:20]!r}")
    if (name in binary and len(arguments) != 2) or not arguments:
        raise ValueError(f"size expression {name!r} with {len(arguments)} argument(s)")
    if name == "+":
        return sum(arguments, Fraction(0))
    if name == "*":
        product = Fraction(1)
        for argument in arguments:
            product *= argument
        return product
    if name == "max":
        return max(arguments)
    if name == "min":
        return min(arguments)
    left, right = arguments
    if name == "^":
        if right.denominator != 1 or not 0 <= right <= 64:
            raise ValueError(f"size expression power {right} is not a natural number up to 64")
        return left ** int(right)
    if right == 0:
        raise ValueError(f"size expression {name!r} by zero")
    if name == "/":
        return left / right
    if name == "//":
        return Fraction(left // right)
    if name == "ceil//":
        return Fraction(-(-left // right))
    return left % right


def symbol_values(symbols: SizeSymbols, shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    """Each symbol's value in ``shapes`` (the inputs' sizes); ValueError if a symbol points past them or the size
    is not ``a * symbol + b`` for a whole symbol."""
    values = {}
    for symbol, (index, dim, a, b) in symbols.items():
        if not (0 <= index < len(shapes) and 0 <= dim < len(shapes[index])):
            raise ValueError(f"size symbol {symbol!r} reads input {index}, dimension {dim}, which the inputs lack")
        value, remainder = divmod(int(shapes[index][dim]) - b, a) if a > 0 else (0, 1)
        if remainder:
            raise ValueError(f"input {index}'s size {shapes[index][dim]} at dimension {dim} is not {a} * n + {b}")
        values[symbol] = value
    return values

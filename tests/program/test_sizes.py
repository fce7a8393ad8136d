"""Size expressions: written from torch.export's symbols, read back by a model-free evaluator that runs no code."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy
from torch.utils._sympy.functions import CeilDiv, FloorDiv, Max, Min, PythonMod

from audiodeploy.program.sizes import MAX_DEPTH, evaluate, symbol_values, to_tree

s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)


@pytest.mark.parametrize(
    "expression",
    [
        2 * 768 * (FloorDiv(s0 - 400, 320) + 1),
        PythonMod(s0 - 1, 2) + CeilDiv(s0, 3) * s1,
        Max(s0, s1 + 7) - Min(s0, 5),
        (s0 + 1) ** 2 * sympy.Rational(1, 2),
    ],
)
def test_a_tree_evaluates_as_the_expression_does(expression):
    tree = to_tree(expression)
    assert tree is not None
    for a, b in ((16000, 3), (401, 9), (12345, 1)):
        assert evaluate(tree, {"s0": a, "s1": b}) == Fraction(str(expression.subs({s0: a, s1: b})))


def test_a_function_the_format_does_not_write_gives_no_tree():
    assert to_tree(sympy.sin(s0)) is None
    assert to_tree(sympy.Float(1.5) * s0) is None
    assert to_tree(2.5) is None


@pytest.mark.parametrize(
    ("tree", "complaint"),
    [
        ("s9", "bound to no input"),
        (["exec", 1], "unknown size expression"),
        (["//", 4, 0], "by zero"),
        (["^", 2, 1000], "natural number"),
        (["+"], "0 argument"),
        ({"+": 1}, "not a size expression"),
        (True, "boolean"),
        (1.5, "not a size expression"),
    ],
)
def test_a_malformed_tree_is_a_value_error(tree, complaint):
    with pytest.raises(ValueError, match=complaint):
        evaluate(tree, {"s0": 1})


def test_a_tree_deeper_than_the_limit_is_refused_before_it_recurses_far():
    tree: object = 1
    for _ in range(MAX_DEPTH + 1):
        tree = ["+", tree]
    with pytest.raises(ValueError, match="deeper"):
        evaluate(tree, {})


def test_a_symbol_is_read_from_its_input_dimension():
    symbols = {"s0": (0, 1, 320, 80), "s1": (1, 0, 1, 0)}
    assert symbol_values(symbols, [(1, 320 * 49 + 80), (7,)]) == {"s0": 49, "s1": 7}
    with pytest.raises(ValueError, match="is not 320"):
        symbol_values(symbols, [(1, 16001), (7,)])
    with pytest.raises(ValueError, match="lack"):
        symbol_values(symbols, [(1, 400)])

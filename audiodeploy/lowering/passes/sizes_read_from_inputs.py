"""Read each dynamic size from the program's inputs, not from a tensor the program computes.

ExecuTorch computes sizes outside the delegates. A size read from a tensor that a delegate computes (the frames
``sym_size(h, 1)`` after a feature extractor) makes everything computed from it wait for that delegate: a table cut
to the length, the rows a relative shift selects. The partitioner then cannot keep the ops before that delegate's
output and the ops after the cut in one delegate, which would wait for its own output, so each such size splits the
delegate (a Transformer-XL relative attention whose shift stays outside: once for the table, then once more in every
layer). torch.export wrote every size as a formula of the inputs' sizes, and ExecuTorch's size ops compute it::

    before

    x [1, S] ── delegate ── h [1, T, C] ── sym_size(h, 1) ── T ── slice(table, 1, c - T, c + T) ── delegate

    after                                                       (T = (S - 400) // 320 + 1 as torch.export wrote it)

    x [1, S] ── sym_size(x, 1) ── S ── sub(400) ── floordiv(320) ── add(1) ── T ── slice(table, 1, c - T, c + T)

The formula is written with the size ops ExecuTorch's runtime has (add, sub, mul, floordiv, mod), each input size
read once; a symbol that an input's size is a multiple of, plus a number (``S = 320 s + 80``), is ``(S - 80) // 320``. Every size keeps the symbolic value it had, so the passes after this one read the same sizes.

The pass leaves a size read from an input already, a size of a symbol that is no input's size (one the program
computes from data), and a formula with another function (a ceiling, a minimum), each with its reason; it does
nothing on a program of static sizes.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch.export import ExportedProgram
from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

from audiodeploy.lowering.passes._graph import InputSize, NodeRewritePass, Skip, input_sizes, insert_op

aten = torch.ops.aten

_DIVISIONS = {FloorDiv: operator.floordiv, Mod: operator.mod, PythonMod: operator.mod}
"""The integer divisions of torch's size formulas, as the Python ops ExecuTorch writes as its size ops."""


class _NotWritable(Exception):
    """A formula with a part ExecuTorch's size ops cannot compute."""


class SizesReadFromInputsPass(NodeRewritePass):
    targets = frozenset({aten.sym_size.int})

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__(exported_program)
        self._read: dict[sympy.Symbol, torch.fx.Node | int] = {}
        """Each symbol's value, as size ops read from an input: written once, before the first size that needs it."""

    @functools.cached_property
    def _input_sizes(self) -> dict[sympy.Symbol, InputSize]:
        return input_sizes(self.exported_program)

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        source = node.args[0]
        if isinstance(source, torch.fx.Node) and source.op == "placeholder":
            return Skip("it reads a program input already")
        size = node.meta.get("val")
        if not isinstance(size, torch.SymInt):
            return Skip("its size is a number")
        formula = size.node.expr
        unknown = sorted(str(s) for s in formula.free_symbols if s not in self._input_sizes)
        if unknown:
            return Skip(f"its size depends on {', '.join(unknown)}, which is no input's size")
        try:
            written = self._write(formula, node)
        except _NotWritable as error:
            return Skip(f"its formula {formula} has {error}, which ExecuTorch's size ops do not compute")
        assert isinstance(written, torch.fx.Node)  # a formula with a symbol is written as ops
        written.meta["val"] = size
        return written

    def _write(self, formula: sympy.Expr, origin: torch.fx.Node) -> torch.fx.Node | int:
        """``formula`` as size ops inserted before ``origin`` (an integer where it is one)."""
        if isinstance(formula, sympy.Integer):
            return int(formula)
        if isinstance(formula, sympy.Symbol):
            if formula not in self._read:
                at = self._input_sizes[formula]
                size = insert_op(self.graph, aten.sym_size.int, (at.node, at.dim), origin=origin)
                self._read[formula] = self._op(
                    operator.floordiv, self._op(operator.sub, size, at.b, origin), at.a, origin
                )
            return self._read[formula]
        if isinstance(formula, sympy.Add):
            total: torch.fx.Node | int = 0
            for term in sorted(formula.args, key=_constants_last):
                total = self._add(total, term, origin)
            return total
        if isinstance(formula, sympy.Mul):
            product: torch.fx.Node | int = 1
            for factor in sorted(formula.args, key=_constants_last):
                if not factor.is_integer:
                    raise _NotWritable(type(factor).__name__)
                product = self._op(operator.mul, product, self._write(factor, origin), origin)
            return product
        division = _DIVISIONS.get(type(formula))
        if division is not None:
            dividend, divisor = (self._write(a, origin) for a in formula.args)
            return self._op(division, dividend, divisor, origin)
        raise _NotWritable(type(formula).__name__)

    def _add(self, total: torch.fx.Node | int, term: sympy.Expr, origin: torch.fx.Node) -> torch.fx.Node | int:
        """``total + term``, a negative term subtracted."""
        if term.as_coeff_Mul()[0] < 0:
            return self._op(operator.sub, total, self._write(-term, origin), origin)
        return self._op(operator.add, total, self._write(term, origin), origin)

    def _op(
        self, op: Callable[[Any, Any], Any], a: torch.fx.Node | int, b: torch.fx.Node | int, origin: torch.fx.Node
    ) -> torch.fx.Node | int:
        """``op(a, b)`` inserted, or computed where both are integers; adding 0 or multiplying by 1 inserts nothing."""
        if isinstance(a, int) and isinstance(b, int):
            return int(op(a, b))
        if op in (operator.add, operator.sub) and isinstance(b, int) and b == 0:
            return a
        if op is operator.floordiv and isinstance(b, int) and b == 1:
            return a
        if op is operator.add and isinstance(a, int) and a == 0 or op is operator.mul and isinstance(a, int) and a == 1:
            return b
        return insert_op(self.graph, op, (a, b), origin=origin)


def _constants_last(term: sympy.Expr) -> tuple[bool, str]:
    """Sort key: symbolic terms first (in a stable order), numbers last, so a sum starts from a size."""
    return (term.is_number, str(term))

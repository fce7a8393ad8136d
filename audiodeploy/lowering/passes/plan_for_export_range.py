"""Memory-plan every dynamic tensor for the input range the user exported, not a narrower one.

ExecuTorch sizes each dynamic tensor's buffer at the upper bound of its symbolic
shape, read from the shape environment. In 1.5.1 with torch 2.14, lowering to
XNNPACK re-runs the convolutions on fake tensors, and the fake convolution picks
a backend by asking ``length <= some limit`` of the example length: that question
is recorded as a guard and narrows the shape environment's range (e.g. a waveform
exported for 16,000-160,000 samples ends up planned for at most 20,480). The
program then refuses any longer input at run time. The exported program's
symbols are unchanged, so :func:`export_symbol_ranges` copies their ranges right
after export, and this pass, given to ``to_executorch`` in place of ExecuTorch's
``ConstraintBasedSymShapeEvalPass``, bounds each shape with those ranges::

    before                                   after
    x: f32[1, s0]   s0 in [16000, 20480]     x: f32[1, s0]   s0 in [16000, 160000]
    planned: f32[1, 20480]                   planned: f32[1, 160000]

A symbol created after export keeps the shape environment's range. On a
program without dynamic shapes the pass changes nothing.

Each bound is also made tight. ``bound_sympy`` bounds an expression by interval
arithmetic, operand by operand, and the views of a relative shift (a ``[T, 2T - 1]``
product padded, seen as ``[2T, T]`` and back) reach memory planning as sizes like
``(2 T²) // T``: bounded so, that is ``2 Tmax² // Tmin``, ten times ``2 Tmax`` over a
tenfold range, and a size made of several such factors is planned at gigabytes, which
the runtime then fails to allocate (transformers' Parakeet: 1.6 GB for a ``[2, 100, 199]``
tensor). A bound that a size of one symbol reaches at an end of the symbol's range is
tight (most sizes grow with the length); otherwise, over a range of at most
:data:`MOST_EVALUATED_LENGTHS` values, the size is bounded by its largest value there,
computed at each::

    size (2 T²) // T, T in [10, 100]     bound_sympy: 2000     largest value: 200

Unlike the rewrites, this is not a :class:`~audiodeploy.lowering.passes._graph.NodeRewritePass`: it replaces
ExecuTorch's own memory-planning pass in ``to_executorch`` and so keeps that pass's shape, a ``PassBase`` that
sets each node's ``TensorSpec`` on the edge program, changing no node.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import sympy
import torch
from executorch.exir.sym_util import eval_upper_bound
from executorch.exir.tensor import TensorSpec
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.utils import _pytree as pytree
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

MOST_EVALUATED_LENGTHS = 4096
"""Most values of a symbol at which a size is computed to bound it (about a millisecond each): a range of frames
(e.g. 50-500 for 1-10 s of 16 kHz audio at wav2vec2's 320-sample hop) is a few hundred. Over a wider range, such as
one of samples, the bound is ``bound_sympy``'s, which is tight for the sizes such a range meets (multiples and
strided-convolution lengths)."""


def export_symbol_ranges(ep: ExportedProgram) -> dict[sympy.Symbol, ValueRanges]:
    """The range of every shape symbol as export left it: take it before lowering narrows it.

    Lowering keeps the symbols but narrows the (shared, mutable) shape
    environment's ranges, so this is a copy.
    """
    ranges = {k: v for k, v in ep.range_constraints.items() if isinstance(k, sympy.Symbol)}
    for node in ep.graph.nodes:
        value = node.meta.get("val")
        sizes = value.shape if isinstance(value, torch.Tensor) else ()
        for size in sizes:
            if isinstance(size, torch.SymInt):
                return {**size.node.shape_env.var_to_range, **ranges}
    return ranges


class PlanForExportRangePass(PassBase):
    def __init__(self, symbol_ranges: Mapping[sympy.Symbol, ValueRanges]) -> None:
        super().__init__()
        self.symbol_ranges = dict(symbol_ranges)

    def upper_bound(self, size: int | torch.SymInt) -> int:
        if isinstance(size, int):
            return size
        node = size.node
        ranges = {**node.shape_env.var_to_range, **self.symbol_ranges}
        upper = bound_sympy(node.expr, ranges).upper
        span = _one_symbol_range(node.expr, ranges)
        if span is not None:
            symbol, lower, top = span
            # A bound reached at an end of the range is tight (most sizes grow with the length); otherwise the
            # largest value over a narrow enough range is.
            if isinstance(upper, sympy.Integer) and any(
                node.expr.xreplace({symbol: end}) == upper for end in (top, lower)
            ):
                return int(upper)
            largest = (
                _largest_value_over(node.expr, symbol, lower, top) if top - lower < MOST_EVALUATED_LENGTHS else None
            )
            if largest is not None:
                return largest
        if isinstance(upper, sympy.Integer):
            return int(upper)
        return eval_upper_bound(size)  # unbounded: ExecuTorch's own rule (the example's size)

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for module in graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                for spec in pytree.tree_flatten(node.meta.get("spec", []))[0]:
                    if isinstance(spec, TensorSpec):
                        spec.shape = [self.upper_bound(s) for s in spec.shape]
                        spec.stride = [self.upper_bound(s) for s in spec.stride]
        return PassResult(graph_module, True)


@functools.cache
def _largest_value_over(expr: sympy.Expr, symbol: sympy.Symbol, lower: int, upper: int) -> int | None:
    largest = None
    for length in range(lower, upper + 1):
        value = expr.xreplace({symbol: sympy.Integer(length)})
        if not isinstance(value, sympy.Integer):
            return None  # not an integer at some length (a size never is): leave it to bound_sympy
        largest = int(value) if largest is None else max(largest, int(value))
    return largest


def _one_symbol_range(
    expr: sympy.Expr, ranges: Mapping[sympy.Symbol, ValueRanges]
) -> tuple[sympy.Symbol, int, int] | None:
    """(the symbol, its lowest and its highest value) of an expression of one symbol with a finite range, or None."""
    if len(expr.free_symbols) != 1:
        return None
    (symbol,) = expr.free_symbols
    bounds = ranges.get(symbol)
    if bounds is None or not isinstance(bounds.lower, sympy.Integer) or not isinstance(bounds.upper, sympy.Integer):
        return None
    return symbol, int(bounds.lower), int(bounds.upper)

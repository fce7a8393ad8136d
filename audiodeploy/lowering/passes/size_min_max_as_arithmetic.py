"""Write ``min`` and ``max`` of two sizes as the one they always are, or in the integer ops ExecuTorch takes.

``min(a.size(-1), b.size(-1))`` on two dynamic sizes (SEW's positional embedding cut to the pooled length) exports
as a call of ``torch.sym_min``. ExecuTorch 1.5.1 has a size op for it: ``to_executorch`` maps ``torch.sym_min``
and ``torch.sym_max`` to ``executorch_prim`` ops. But that happens after edge lowering, and the edge verifier
before it takes a Python function as an op only if it is named ``alloc`` (and the ATen verifier refuses the
``executorch_prim`` op itself), so ``to_edge`` stops on an ``AssertionError``, in stock lowering too::

    before                                      after, where a <= b for every length the export allows

    sym_size(a) ─┐                              sym_size(a) ── slice
                 ├─ torch.sym_min ── slice
    sym_size(b) ─┘                              else, with M >= |a - b| over the export's ranges:

                                                take_b = (a - b + M) // (M + 1)      0 or 1: whether b < a
                                                min = a - (a - b) * take_b            (max: b + (a - b) * take_b)

The second form is exact integer arithmetic for every pair whose difference is within M, which the export's
upper bounds of the two sizes give; it uses only ``sub``, ``add``, ``mul`` and ``floordiv``, which the verifiers
and ExecuTorch's runtime take. The pass leaves a call whose operands are not integer sizes, or whose sizes have no
finite upper bound (their export left the maximum open); it does nothing on a program without ``torch.sym_min``
or ``torch.sym_max``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._sympy.value_ranges import bound_sympy

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, insert_op, is_finite_bound, sizes_always

_ALWAYS_FIRST: dict[Any, Callable[[Any, Any], Any]] = {
    torch.sym_min: operator.le,
    torch.sym_max: operator.ge,
}
"""For each op, the relation under which it returns its first operand."""


class SizeMinMaxAsArithmeticPass(NodeRewritePass):
    targets = frozenset(_ALWAYS_FIRST)

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if len(node.args) != 2 or node.kwargs:
            return Skip("not a call on two operands")
        first, second = node.args
        values = [x.meta.get("val") if isinstance(x, torch.fx.Node) else x for x in (first, second)]
        if not all(isinstance(v, (int, torch.SymInt)) for v in values):
            return Skip("an operand is not an integer size")
        returns_first = _ALWAYS_FIRST[node.target]
        for chosen, (a, b) in ((first, values), (second, values[::-1])):
            if isinstance(chosen, torch.fx.Node) and sizes_always(returns_first, a, b):
                return chosen
        bounds = [_upper_bound(v) for v in values]
        if any(bound is None for bound in bounds):
            return Skip("a size with no finite upper bound: no integer form is exact for all of them")
        spread = sum(bound for bound in bounds if bound is not None)  # sizes are >= 0, so |a - b| <= the sum
        difference = insert_op(self.graph, operator.sub, (first, second), origin=node)
        shifted = insert_op(self.graph, operator.add, (difference, spread), origin=node)
        take_second = insert_op(self.graph, operator.floordiv, (shifted, spread + 1), origin=node)
        step = insert_op(self.graph, operator.mul, (difference, take_second), origin=node)
        if node.target is torch.sym_min:
            return insert_op(self.graph, operator.sub, (first, step), origin=node)
        return insert_op(self.graph, operator.add, (second, step), origin=node)


def _upper_bound(size: int | torch.SymInt) -> int | None:
    """The largest value ``size`` takes over the export's ranges, or None if it has no finite one."""
    if isinstance(size, int):
        return size
    upper = bound_sympy(size.node.expr, size.node.shape_env.var_to_range).upper
    return int(upper) if is_finite_bound(upper) else None

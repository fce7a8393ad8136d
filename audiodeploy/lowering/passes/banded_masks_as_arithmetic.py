"""Compute a banded attention mask (causal, sliding window) in the delegate, as float arithmetic on positions.

transformers' decoder-style attention (Mimi's transformer, and every model built on ``masking_utils``) builds its
causal or sliding-window mask under ``torch.export`` from positions: ``arange`` of the length, indexed, compared,
and'ed with a packed-sequence test (``diff``, ``ne``, ``cumsum``, ``eq``) that holds everywhere for one unpadded
sequence. Those are integer and boolean ops XNNPACK 1.5.1 declines, so the mask runs on the portable kernels and
cuts the delegate at every attention. Stored as a constant it would grow with the square of the length. This pass
proves what the mask is, a band of allowed ``query - key`` offsets, and writes it as arithmetic the delegate takes::

    before

    n = sym_size
    arange(n) ── view ── index ──┬── sub(W) ── gt ───┐
                                 └──────────── le ───┴── and ── and(eq(cumsum(ne(diff(...))))) ── expand ──┐
    q, k, v ───────────────────────────────────────────────────────────────── scaled_dot_product_attention ──

    after (lo <= query - key <= hi; here lo = 0, hi = W - 1)

    positions = arange(n, float32)
    offset = positions[:, None] - positions[None, :]                           [n, n]
    allowed = clamp(offset - lo + 1, 0, 1) * clamp(hi + 1 - offset, 0, 1)      1 in the band, 0 outside
    (allowed - 1) * 3.4e38 ───────────────┐                                    0 in the band, -FLT_MAX outside
    q, k, v ──────────────────────── scaled_dot_product_attention ──

after which :mod:`length_only_values_as_constants` stores the positions cut to the length and
:mod:`sdpa_as_matmuls` writes the attention with its float mask as matmuls. An eager attention's
``where(mask, 0., finfo.min)`` is written the same way, with its own fill: ``(allowed - 1) * -fill``.

Why this is exact: positions are integers below 2^24, so every offset and clamp is exact in float32 and ``allowed``
is exactly 0 or 1. For ``where``, ``(allowed - 1) * -fill`` is ``+0.`` in the band and ``fill`` outside, bit for bit.
For sdpa, a masked score becomes ``score - 3.4e38`` instead of ``-inf``: its softmax weight is exactly 0 all the same
(``exp`` underflows), because every row keeps its diagonal (``lo <= 0 <= hi``), whose score is finite.

The proof: every element of each value the mask is computed from is written as an expression of its indices and
the size symbols (``arange(n)[i] = i``; an ``index`` substitutes its index tensors' expressions; a ``diff`` of
consecutive positions is 1; a ``cumsum`` of zeros is 0; comparisons and ``and`` are sympy relations). The mask's
expression, with the key index written as ``query - offset``, must then not depend on the query index: it is a
conjunction of linear bounds on the offset. As a check on the rules, the mask is computed with PyTorch at the
shortest and the longest length and must equal the band.

The pass does nothing on a program without such a mask, and leaves a mask as it is when

- it reads input data, parameters or buffers, or an op whose elements this pass does not write (a float op, a
  gather at computed indices of more than positions);
- its expression depends on more than the offset of key from query (a padding mask), or is not a band of offsets;
- its band does not hold the diagonal, or its query and key dimensions differ (a row could be all masked);
- it is a ``where`` whose selected values are not ``0.`` and one finite number;
- no node of the program computes its length (a size the arange could count to);
- PyTorch computes another mask at either end of the export range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from audiodeploy.lowering.passes._graph import (
    ARANGE_OPS,
    COMPARISON_OPS,
    FILL_VALUES,
    NodeRewritePass,
    Skip,
    analysis_of,
    ancestors,
    arguments,
    computed_at_sizes,
    dtype_of,
    insert_op,
    is_size,
    size_ranges,
    sizes_at_range_ends,
    tensor_of,
    value,
)

aten = torch.ops.aten

_SDPA = aten.scaled_dot_product_attention.default
_WHERE = frozenset({aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar})
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)
_EXACT_POSITIONS = 2**24
"""Integers up to this are exact in float32."""


class _Unwritable(Exception):
    """Why the elements of a value cannot be written as an expression of its indices."""


def _index(dim: int) -> sympy.Symbol:
    return sympy.Symbol(f"index{dim}", integer=True, nonnegative=True)


@dataclass(frozen=True)
class _Elements:
    """Every element of a tensor of ``rank`` dimensions: ``expr`` of ``_index(0..rank-1)`` and the size symbols (a
    sympy boolean for a boolean tensor)."""

    expr: Any
    rank: int


_SAME_ELEMENTS = frozenset(
    {aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default, aten.contiguous.default}
)
_RESHAPES = frozenset(
    {
        aten.view.default,
        aten.reshape.default,
        aten._unsafe_view.default,
        aten.unsqueeze.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
    }
)
_RELATIONS = {
    "eq": sympy.Eq,
    "ne": sympy.Ne,
    "gt": sympy.StrictGreaterThan,
    "ge": sympy.GreaterThan,
    "lt": sympy.StrictLessThan,
    "le": sympy.LessThan,
}
_AND = frozenset({aten.logical_and.default, aten.bitwise_and.Tensor, aten.__and__.Tensor})
_OR = frozenset({aten.logical_or.default, aten.bitwise_or.Tensor, aten.__or__.Tensor})
_NOT = frozenset({aten.logical_not.default, aten.bitwise_not.default})
_ADD = frozenset({aten.add.Tensor, aten.add.Scalar})
_SUB = frozenset({aten.sub.Tensor, aten.sub.Scalar})
_MUL = frozenset({aten.mul.Tensor, aten.mul.Scalar})


class BandedMasksAsArithmeticPass(NodeRewritePass):
    targets = frozenset({_SDPA, *_WHERE})

    def candidates(self) -> list[torch.fx.Node]:
        self._elements: dict[torch.fx.Node, _Elements | _Unwritable] = {}
        self._ranges = size_ranges(self.exported_program)
        return [
            node
            for node in super().candidates()
            if (arguments(node)["attn_mask"] is not None if node.target is _SDPA else _is_bool(node.args[0]))
        ]

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if node.target is _SDPA:
            mask = arguments(node)["attn_mask"]
            if not _is_bool(mask) or dtype_of(node) != torch.float32:
                return Skip("its attn_mask is not boolean, or the attention is not float32")
            band = self._band(mask)
            if isinstance(band, Skip):
                return band
            additive = self._additive_mask(mask, band, fill=-_FLOAT32_MAX, origin=node)
            if isinstance(additive, Skip):
                return additive
            args = (*node.args[:3], additive, *node.args[4:])
            kwargs = {key: arg for key, arg in node.kwargs.items() if key != "attn_mask"}
            return insert_op(self.graph, _SDPA, args, kwargs, origin=node)
        condition, chosen, other = (_scalar_fill(arg) for arg in node.args[:3])
        if chosen != 0.0 or not isinstance(other, float) or not math.isfinite(other) or dtype_of(node) != torch.float32:
            return Skip("it does not select 0. in the mask and one finite float32 number outside it")
        band = self._band(node.args[0])
        if isinstance(band, Skip):
            return band
        additive = self._additive_mask(node.args[0], band, fill=other, origin=node)
        if isinstance(additive, Skip):
            return additive
        for _ in range(tensor_of(node).dim() - 2):  # the where's own shape, for what reads it
            additive = insert_op(self.graph, aten.unsqueeze.default, (additive, 0), origin=node)
        if tuple(tensor_of(additive).shape) != tuple(tensor_of(node).shape):
            additive = insert_op(self.graph, aten.expand.default, (additive, list(tensor_of(node).shape)), origin=node)
        return additive

    # -- the proof ---------------------------------------------------------------------------------------------

    def _band(self, mask: torch.fx.Node) -> tuple[int | None, int | None] | Skip:
        """(lo, hi): the mask allows key ``k`` to query ``q`` exactly when ``lo <= q - k <= hi`` (None: unbounded)."""
        shape = tensor_of(mask).shape
        if len(shape) < 2 or not all(_is_one(size) for size in shape[:-2]):
            return Skip("the mask is not one [queries, keys] grid (it differs across batch or heads)")
        if not _same_size(shape[-2], shape[-1]):
            return Skip("its query and key dimensions may differ (a row could be all masked)")
        try:
            elements = self._elements_of(mask)
        except _Unwritable as reason:
            return Skip(f"the mask is not known to be computed from the length alone: {reason}")
        query, key, offset = _index(elements.rank - 2), _index(elements.rank - 1), sympy.Symbol("offset", integer=True)
        if elements.expr.free_symbols & {_index(d) for d in range(elements.rank - 2)}:
            return Skip("the mask depends on a batch or head index")
        by_offset = sympy.simplify(elements.expr.xreplace({key: query - offset}))
        if by_offset is sympy.false:
            return Skip("the mask masks everything")
        band = _offset_band(by_offset, offset)
        if isinstance(band, Skip):
            return band
        lo, hi = band
        if (lo is not None and lo > 0) or (hi is not None and hi < 0):
            return Skip(f"its band of offsets [{lo}, {hi}] does not hold the diagonal (a row could be all masked)")
        return self._checked(mask, band)

    def _checked(
        self, mask: torch.fx.Node, band: tuple[int | None, int | None]
    ) -> tuple[int | None, int | None] | Skip:
        computation = ancestors([mask], expand=lambda n: not is_size(n))
        nodes = [n for n in self.graph.nodes if n in computation]
        for ends, at in sizes_at_range_ends(self._ranges).items():
            try:
                computed = computed_at_sizes(mask, nodes, at)
            except (RuntimeError, TypeError, ValueError, OverflowError) as error:
                return Skip(f"the mask could not be computed to check its band: {error}")
            rows, columns = computed.shape[-2:]
            offsets = torch.arange(rows)[:, None] - torch.arange(columns)[None, :]
            expected = torch.ones_like(offsets, dtype=torch.bool)
            if band[0] is not None:
                expected &= offsets >= band[0]
            if band[1] is not None:
                expected &= offsets <= band[1]
            if not torch.equal(computed.reshape(rows, columns), expected):
                return Skip(f"the mask is not the band {band} when computed at {ends} (a rule here is wrong)")
            if max(rows, columns) > _EXACT_POSITIONS:
                return Skip("its positions are not exact in float32")
        return band

    def _elements_of(self, node: Any) -> _Elements:
        if not isinstance(node, torch.fx.Node):
            if isinstance(node, bool):
                return _Elements(sympy.true if node else sympy.false, 0)
            if isinstance(node, int):
                return _Elements(sympy.Integer(node), 0)
            raise _Unwritable(f"an argument {node!r} is not an integer")
        return analysis_of(node, self._elements, self._write, _Unwritable)

    def _write(self, node: torch.fx.Node) -> _Elements:
        val = node.meta.get("val")
        if isinstance(val, (int, torch.SymInt)):
            return _Elements(sympy.sympify(val.node.expr if isinstance(val, torch.SymInt) else val), 0)
        if node.op != "call_function" or not isinstance(val, torch.Tensor):
            raise _Unwritable(f"it reads {node.name}")
        if val.dtype.is_floating_point or val.dtype.is_complex:
            raise _Unwritable(f"{node.name} is not an integer or boolean tensor")
        target, args, given = node.target, node.args, arguments(node)
        rank = val.dim()
        if target in FILL_VALUES:
            fill = FILL_VALUES[target](given)
            if not isinstance(fill, (bool, int)):
                raise _Unwritable(f"{node.name} fills with {fill!r}")
            return _Elements(_as_dtype(sympy.sympify(fill), val.dtype), rank)
        if target in ARANGE_OPS:
            start, end, step = (self._elements_of(given.get(name, default)).expr for name, default in _ARANGE_ARGS)
            return _Elements(start + step * _index(0), 1)
        if target in _SAME_ELEMENTS:
            return self._elements_of(args[0])
        if target in _RESHAPES:
            return _reshaped(self._elements_of(args[0]), _tensor(args[0]).shape, val.shape, node)
        if target is aten.expand.default:
            return _broadcast(self._elements_of(args[0]), _tensor(args[0]).shape, val.shape)
        if target is aten.slice.Tensor:
            return self._slice(node, val)
        if target is aten.index.Tensor:
            return self._indexed(node, val)
        if target is aten.diff.default:
            return self._diff(node, val)
        if target is aten.cumsum.default:
            return self._cumsum(node, val)
        if target in COMPARISON_OPS:
            a, b = self._operands(node, val)
            return _Elements(_RELATIONS[COMPARISON_OPS[target]](a, b), rank)
        if val.dtype == torch.bool and target in _AND | _OR | _NOT:
            a, b = self._operands(node, val) if target not in _NOT else (self._operand(args[0], val), None)
            a, b = (_truth(x) if x is not None else None for x in (a, b))
            expr = sympy.Not(a) if target in _NOT else sympy.And(a, b) if target in _AND else sympy.Or(a, b)
            return _Elements(expr, rank)
        if target in _ADD | _SUB | _MUL | {aten.neg.default} and val.dtype != torch.bool:
            if target is aten.neg.default:
                return _Elements(-self._operand(args[0], val), rank)
            a, b = self._operands(node, val)
            alpha = given.get("alpha", 1)
            return _Elements(a + alpha * b if target in _ADD else a - alpha * b if target in _SUB else a * b, rank)
        if target in (aten._to_copy.default, aten.to.dtype) and _tensor(args[0]).dtype == val.dtype:
            return self._elements_of(args[0])
        raise _Unwritable(f"{node.name} ({target}) is not an op whose elements this pass writes")

    def _operand(self, arg: Any, val: torch.Tensor) -> Any:
        """``arg``'s elements as the elements of the result ``val`` (broadcast)."""
        elements = self._elements_of(arg)
        arg_value = value(arg) if isinstance(arg, torch.fx.Node) else None
        shape = arg_value.shape if arg_value is not None else ()  # a size or a number: one element
        return _broadcast(elements, shape, val.shape).expr

    def _operands(self, node: torch.fx.Node, val: torch.Tensor) -> tuple[Any, Any]:
        return self._operand(node.args[0], val), self._operand(node.args[1], val)

    def _slice(self, node: torch.fx.Node, val: torch.Tensor) -> _Elements:
        given = arguments(node)
        source = _tensor(node.args[0])
        dim = given["dim"] % source.dim()
        start = given["start"] or 0
        if given["step"] != 1 or not isinstance(start, int) or start < 0:
            raise _Unwritable(f"{node.name} slices with a step or from a computed start")
        inner = self._elements_of(node.args[0])
        return _Elements(inner.expr.xreplace({_index(dim): _index(dim) + start}), val.dim())

    def _indexed(self, node: torch.fx.Node, val: torch.Tensor) -> _Elements:
        source, indices = node.args[0], node.args[1]
        if any(index is None for index in indices):
            raise _Unwritable(f"{node.name} indexes with a None")
        inner = self._elements_of(source)
        broadcast_rank = val.dim() - (inner.rank - len(indices))
        broadcast_shape = val.shape[:broadcast_rank]
        renamed = {_index(d): sympy.Dummy(f"source{d}") for d in range(inner.rank)}
        expr = inner.expr.xreplace(renamed)
        substitutions = {}
        for d, index in enumerate(indices):
            substitutions[renamed[_index(d)]] = _broadcast(
                self._elements_of(index), _tensor(index).shape, broadcast_shape
            ).expr
        for d in range(len(indices), inner.rank):
            substitutions[renamed[_index(d)]] = _index(broadcast_rank + d - len(indices))
        return _Elements(expr.xreplace(substitutions), val.dim())

    def _diff(self, node: torch.fx.Node, val: torch.Tensor) -> _Elements:
        given = arguments(node)
        x = node.args[0]
        if given["n"] != 1 or given["dim"] % val.dim() != val.dim() - 1 or given.get("append") is not None:
            raise _Unwritable(f"{node.name} is not a first difference along the last dimension")
        inner = self._elements_of(x)
        last = _index(val.dim() - 1)
        steps = inner.expr - inner.expr.xreplace({last: last - 1})
        prepend = given.get("prepend")
        if prepend is None:
            return _Elements(sympy.expand(steps.xreplace({last: last + 1})), val.dim())
        if _tensor(prepend).shape[-1] != 1:
            raise _Unwritable(f"{node.name} prepends more than one element")
        # The first difference is from the prepended element; the others are steps of x.
        first = inner.expr.xreplace({last: 0}) - self._operand(prepend, _tensor(prepend)).xreplace({last: 0})
        if sympy.expand(steps.xreplace({last: 0}) - first) != 0:
            raise _Unwritable(f"{node.name}'s first difference is not a step like the others")
        return _Elements(sympy.expand(steps), val.dim())

    def _cumsum(self, node: torch.fx.Node, val: torch.Tensor) -> _Elements:
        inner = self._elements_of(node.args[0])
        dim = arguments(node)["dim"] % val.dim()
        term = inner.expr
        if term in (sympy.true, sympy.false):
            term = sympy.Integer(int(term is sympy.true))
        if not isinstance(term, sympy.Expr) or _index(dim) in term.free_symbols:
            raise _Unwritable(f"{node.name} sums terms that change along its dimension")
        return _Elements(term * (_index(dim) + 1), val.dim())

    # -- the replacement ---------------------------------------------------------------------------------------

    def _additive_mask(
        self, mask: torch.fx.Node, band: tuple[int | None, int | None], *, fill: float, origin: torch.fx.Node
    ) -> torch.fx.Node | Skip:
        """``(allowed - 1) * -fill`` as a float32 tensor of ``mask``'s shape: 0. in the band, ``fill`` outside."""
        graph = self.graph
        shape = _tensor(mask).shape
        length = self._size_node(shape[-1], before=origin)
        if length is None:
            return Skip(f"no node before it computes the mask's length {shape[-1]}")

        def op(target: Any, *args: Any) -> torch.fx.Node:
            return insert_op(graph, target, args, origin=origin)

        positions = insert_op(graph, aten.arange.default, (length,), {"dtype": torch.float32}, origin=origin)
        offset = op(aten.sub.Tensor, op(aten.unsqueeze.default, positions, 1), op(aten.unsqueeze.default, positions, 0))
        allowed = None
        lo, hi = band
        if lo is not None:
            allowed = op(aten.clamp.default, op(aten.add.Tensor, offset, float(1 - lo)), 0.0, 1.0)
        if hi is not None:
            upper = op(aten.clamp.default, op(aten.rsub.Scalar, offset, float(hi + 1)), 0.0, 1.0)
            allowed = upper if allowed is None else op(aten.mul.Tensor, allowed, upper)
        if allowed is None:  # every offset: nothing masked
            allowed = op(aten.clamp.default, op(aten.mul.Tensor, offset, 0.0), 1.0, 1.0)
        # [queries, keys], broadcast by its reader: the leading 1s of the mask's shape would be reshapes the attention
        # rewrites below must take apart again.
        return op(aten.mul.Tensor, op(aten.sub.Tensor, allowed, 1.0), -fill)

    def _size_node(self, size: int | torch.SymInt, *, before: torch.fx.Node) -> int | torch.fx.Node | None:
        """A node of the graph before ``before`` computing ``size`` (the mask's length), the number itself if it is
        one, or None."""
        if not isinstance(size, torch.SymInt):
            return int(size)
        for node in self.graph.nodes:
            if node is before:
                break
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt) and val.node.expr == size.node.expr:
                return node
        return None


_ARANGE_ARGS = (("start", 0), ("end", None), ("step", 1))


def _offset_band(expr: Any, offset: sympy.Symbol) -> tuple[int | None, int | None] | Skip:
    """(lo, hi) with ``expr`` equivalent to ``lo <= offset <= hi``, from a conjunction of linear bounds on it."""
    if expr is sympy.true:
        return None, None
    atoms = expr.args if isinstance(expr, sympy.And) else (expr,)
    lo: int | None = None
    hi: int | None = None
    for atom in atoms:
        if not isinstance(atom, sympy.core.relational.Relational) or isinstance(atom, (sympy.Eq, sympy.Ne)):
            return Skip(f"the mask is not a band of offsets of key from query ({atom} is not a bound)")
        difference = sympy.expand(atom.lhs - atom.rhs)  # compared with 0
        if difference.free_symbols - {offset}:
            return Skip(f"the mask depends on more than the offset of key from query ({atom})")
        slope, constant = difference.coeff(offset), difference.subs(offset, 0)
        if slope not in (1, -1) or not constant.is_integer:
            return Skip(f"the mask is not a band of offsets of key from query ({atom})")
        # slope * offset + constant  (>, >=, <, <=)  0
        strict = isinstance(atom, (sympy.StrictGreaterThan, sympy.StrictLessThan))
        greater = isinstance(atom, (sympy.StrictGreaterThan, sympy.GreaterThan)) == (slope == 1)
        bound = int(-constant * slope) + (1 if strict and greater else -1 if strict else 0)
        if greater:
            lo = bound if lo is None else max(lo, bound)
        else:
            hi = bound if hi is None else min(hi, bound)
    return lo, hi


def _reshaped(elements: _Elements, before: Any, after: Any, node: torch.fx.Node) -> _Elements:
    """A reshape that only adds or drops dimensions of size 1: the other dimensions keep their order and sizes."""
    kept_before = [d for d, size in enumerate(before) if not _is_one(size)]
    kept_after = [d for d, size in enumerate(after) if not _is_one(size)]
    if len(kept_before) != len(kept_after) or not all(
        _same_size(before[a], after[b]) for a, b in zip(kept_before, kept_after)
    ):
        raise _Unwritable(f"{node.name} reshapes more than dimensions of size 1")
    substitutions = {_index(d): sympy.Integer(0) for d, size in enumerate(before) if _is_one(size)}
    renamed = {_index(a): sympy.Dummy(f"kept{a}") for a in kept_before}
    expr = elements.expr.xreplace({**substitutions, **renamed})
    return _Elements(
        expr.xreplace({renamed[_index(a)]: _index(b) for a, b in zip(kept_before, kept_after)}), len(after)
    )


def _broadcast(elements: _Elements, before: Any, after: Any) -> _Elements:
    """``elements`` of shape ``before`` read at the indices of the broadcast shape ``after`` (aligned at the end)."""
    shift = len(after) - len(before)
    renamed = {_index(d): sympy.Dummy(f"before{d}") for d in range(len(before))}
    expr = elements.expr.xreplace(renamed)
    return _Elements(
        expr.xreplace(
            {
                renamed[_index(d)]: sympy.Integer(0)
                if _is_one(size) and not _is_one(after[d + shift])
                else _index(d + shift)
                for d, size in enumerate(before)
            }
        ),
        len(after),
    )


def _truth(expr: Any) -> Any:
    """An element as a truth value: a nonzero integer is true."""
    if isinstance(expr, sympy.logic.boolalg.Boolean):
        return expr
    return sympy.Ne(expr, 0)


def _as_dtype(number: Any, dtype: torch.dtype) -> Any:
    return (sympy.true if number != 0 else sympy.false) if dtype == torch.bool else number


def _scalar_fill(arg: Any) -> Any:
    """The number a ``where`` operand holds everywhere (a Python number, or a fill op's), else ``arg``."""
    if isinstance(arg, torch.fx.Node) and arg.op == "call_function" and arg.target in FILL_VALUES:
        return float(FILL_VALUES[arg.target](arguments(arg)))
    return float(arg) if isinstance(arg, (int, float)) and not isinstance(arg, bool) else arg


def _tensor(node: Any) -> torch.Tensor:
    val = value(node)
    if val is None:
        raise _Unwritable(f"{node} is not a tensor")
    return val


def _is_bool(node: Any) -> bool:
    return dtype_of(node) == torch.bool


def _is_one(size: Any) -> bool:
    return not isinstance(size, torch.SymInt) and int(size) == 1


def _same_size(a: Any, b: Any) -> bool:
    to_expr = lambda size: size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))  # noqa: E731
    return sympy.expand(to_expr(a) - to_expr(b)) == 0

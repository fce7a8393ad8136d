"""Drop an attention mask that masks nothing: computed from the input length alone, all-true (or all-zero) at every
length of the export range.

transformers' attention builds a mask under ``torch.export`` even for one unpadded utterance: it cannot look at a
mask while tracing, so it computes one from the length, ``arange(n) >= 0`` broadcast to ``[1, 1, n, n]``, and hands
it to ``scaled_dot_product_attention`` (sdpa) or, as an additive mask of zeros and ``finfo.min``, adds it to the
scores (eager). Left in, the mask either stays outside the delegate (``ge``, ``expand``, ``where``, and with sdpa
the ``any``, ``eq``, ``logical_not``, ``full_like`` edge lowering adds around each attention) or, stored by
:mod:`length_only_values_as_constants`, becomes a ``[n, n]`` constant at the longest length. This pass removes
it::

    before (eager attention)

    n = sym_size(h, 1)
    arange(n) ── add(0) ── unsqueeze ── ge(0) ── expand [1, 1, n, n] ── where(·, 0., -3.4e38) ──┐
    q ── matmul(k.T) ── mul(scale) ───────────────────────────────────────────────────── add ── softmax ──

    after

    q ── matmul(k.T) ── mul(scale) ── softmax ──

    before (sdpa)

    arange(n) ── add(0) ── unsqueeze ── ge(0) ── expand [1, 1, n, n] ──┐
    q, k, v ──────────────────────────────────────────────── scaled_dot_product_attention ──

    after

    q, k, v ── scaled_dot_product_attention ──

after which :mod:`sdpa_as_matmuls` writes the unmasked sdpa as matmuls the delegate takes. A mask is removed where
it is

- the ``attn_mask`` of an sdpa: all-true (boolean) or all-zero (float);
- added to the scores a softmax reads (``add``): all-zero;
- the condition of a ``where``, wherever it is read: all-true (the first operand is selected) or all-false (the
  other operand);
- the mask of a ``masked_fill``, wherever it is read: all-false.

Why this is safe: the pass proves it rather than samples it. It computes, for every value the mask is computed
from, a lower and an upper bound on its elements, as expressions of the program's size symbols: ``arange(n)``
lies in ``[0, n - 1]``, ``full(..., 0.)`` in ``[0, 0]``, an ``unsqueeze`` or ``expand`` keeps its input's bounds, a
comparison is ``[1, 1]`` when its operands' bounds decide it, a ``where`` on an all-true condition takes its first
operand's, an ``all`` or ``any`` of at least one element is true (false) where every element is. The bounds are
then bounded over the export range of each symbol (``bound_sympy``, torch's own interval arithmetic on sizes), so
"all-true" holds at *every* length, not only at the lengths tried. Integer arithmetic is exact; float arithmetic is
computed only on values every element of which is the same number, with PyTorch on one element of each operand's
dtype, so with its rounding; dtype conversions round the bounds as the elements round (rounding is monotonic). Sizes read from the input (``sym_size``) and shapes of ``full_like`` carry no data. Then,
as a check on the rules themselves, the mask is computed with PyTorch at the shortest and the longest length and
must be what the proof says. Dropping an all-true ``where`` condition or an all-false fill returns the selected
operand bit for bit; adding a zero differs from not adding it only in the sign of a zero score, which a softmax
reads the same (``exp(-0.0) = exp(0.0) = 1``); sdpa with an all-true or all-zero mask adds zero to its scores.

The pass does nothing on a program without such a mask, and leaves a mask as it is when

- it reads input data, parameters, buffers or constants, or an op the bounds above do not cover: it is not known
  to be computed from the length alone;
- its bounds do not prove it masks nothing at every length of the range (a causal mask, a padding mask);
- removing it would change the result's shape or dtype (the mask broadcasts the scores, or promotes them);
- the sum with a zero mask is read by something other than a softmax (the sign of a zero could matter there), or
  the mask is the first operand of an ``add`` with ``alpha`` other than 1.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.utils._sympy.value_ranges import bound_sympy

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
    fake_value,
    insert_op,
    same_value_type,
    size_ranges,
    sizes_at_range_ends,
    value,
)

aten = torch.ops.aten

_SDPA = aten.scaled_dot_product_attention.default
_SOFTMAX = frozenset({aten.softmax.int, aten._softmax.default, aten._safe_softmax.default})
_WHERE = frozenset({aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar})
_MASKED_FILL = frozenset({aten.masked_fill.Scalar, aten.masked_fill.Tensor})

_SAME_ELEMENTS = frozenset(
    {
        aten.unsqueeze.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.view.default,
        aten.reshape.default,
        aten._unsafe_view.default,
        aten.expand.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.slice.Tensor,
        aten.select.int,
        aten.narrow.default,
        aten.clone.default,
        aten.alias.default,
        aten.detach.default,
        aten.lift_fresh_copy.default,
        aten.repeat.default,
        aten.flatten.using_ints,
        aten.unflatten.int,
    }
)
"""Ops whose output elements are elements of their first argument."""

"""Ops that fill a tensor with one number (read from their arguments by name); a tensor argument lends its shape."""

_NOT = frozenset({aten.logical_not.default, aten.bitwise_not.default})
_AND = frozenset({aten.logical_and.default, aten.bitwise_and.Tensor, aten.__and__.Tensor, aten.mul.Tensor})
_OR = frozenset({aten.logical_or.default, aten.bitwise_or.Tensor, aten.__or__.Tensor})
_ARITHMETIC = frozenset(
    {
        aten.add.Tensor,
        aten.add.Scalar,
        aten.sub.Tensor,
        aten.sub.Scalar,
        aten.rsub.Scalar,
        aten.mul.Tensor,
        aten.mul.Scalar,
        aten.neg.default,
        aten.div.Tensor,
        aten.div.Scalar,
    }
)
"""Elementwise arithmetic: exact on integer bounds (add, sub, neg, mul); computed on values of one number."""
_CONVERSIONS = frozenset({aten._to_copy.default, aten.to.dtype})
_TRUTH_REDUCTIONS = frozenset(
    {aten.all.default, aten.all.dim, aten.all.dims, aten.any.default, aten.any.dim, aten.any.dims}
)
"""Whether all (any) elements are true: a padding mask's "rows with no key" (transformers' Parakeet and LASR
convolution modules)."""

_EXACT_INTEGERS = 2**53
"""Integers up to this converts from int64 to float32 through float64 with a single rounding."""


class _NotProvable(Exception):
    """What stops the proof: the mask is not known to be computed from the length alone."""


@dataclass(frozen=True)
class _Bounds:
    """Every element of a value lies in ``[lower, upper]`` at every length of the export range (booleans as 0, 1)."""

    lower: sympy.Expr
    upper: sympy.Expr

    @classmethod
    def point(cls, number: Any) -> _Bounds:
        expr = _expr(number)
        return cls(expr, expr)

    def union(self, other: _Bounds) -> _Bounds:
        return _Bounds(sympy.Min(self.lower, other.lower), sympy.Max(self.upper, other.upper))


_TRUE = _Bounds(sympy.Integer(1), sympy.Integer(1))
_FALSE = _Bounds(sympy.Integer(0), sympy.Integer(0))
_EITHER = _Bounds(sympy.Integer(0), sympy.Integer(1))


class DropMasksThatMaskNothingPass(NodeRewritePass):
    targets = frozenset({_SDPA, aten.add.Tensor, *_WHERE, *_MASKED_FILL})

    def candidates(self) -> list[torch.fx.Node]:
        """Each sdpa with a mask, each ``add`` a softmax reads (attention scores and their mask), and each ``where``
        and ``masked_fill``: dropping an all-true selection is exact wherever it is read, as in an sdpa's float mask
        of position scores that a length-only padding mask selects (Wav2Vec2-BERT); other adds are not looked at."""
        self._ranges = size_ranges(self.exported_program)
        self._bounds: dict[torch.fx.Node, _Bounds | _NotProvable] = {}
        return [
            node
            for node in super().candidates()
            if (
                arguments(node)["attn_mask"] is not None
                if node.target is _SDPA
                else node.target in _WHERE or node.target in _MASKED_FILL or _read_by_softmax(node)
            )
        ]

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if node.target is _SDPA:
            return self._unmasked_attention(node)
        if node.target is aten.add.Tensor:
            return self._without_zero_mask(node)
        if node.target in _WHERE:
            return self._selected(node)
        return self._unfilled(node)

    # -- the four places a mask is used ------------------------------------------------------------------------

    def _unmasked_attention(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        mask = arguments(node)["attn_mask"]
        proof = self._proof(mask, "all-zero" if _is_float(mask) else "all-true")
        if proof is not None:
            return Skip(f"its attn_mask {proof}")
        args = (*node.args[:3], None, *node.args[4:])
        kwargs = {key: arg for key, arg in node.kwargs.items() if key != "attn_mask"}
        if not same_value_type(fake_value(_SDPA, args, kwargs), value(node)):
            return Skip("without its attn_mask the attention's result would have another shape (the mask broadcasts)")
        return insert_op(self.graph, _SDPA, args, kwargs, origin=node)

    def _without_zero_mask(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        first, second = given["input"], given["other"]
        reasons = []
        for kept, dropped in ((first, second), (second, first)):
            if not isinstance(dropped, torch.fx.Node) or not isinstance(kept, torch.fx.Node):
                continue
            proof = self._proof(dropped, "all-zero")
            if proof is not None:
                reasons.append(f"{dropped.name} {proof}")
            elif dropped is first and given["alpha"] != 1:
                reasons.append(f"{dropped.name} is all-zero, but the other operand is scaled by alpha")
            elif not same_value_type(value(kept), value(node)):
                reasons.append(f"{dropped.name} is all-zero, but it broadcasts or promotes the sum")
            elif not all(user.target in _SOFTMAX for user in node.users):
                reasons.append(f"{dropped.name} is all-zero, but the sum is read by something other than a softmax")
            else:
                return kept
        return Skip("; ".join(reasons) or "neither operand is a tensor")

    def _selected(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        condition, chosen, other = node.args[:3]
        proof = self._proof(condition, "all-true")
        if proof is not None:
            if self._proof(condition, "all-false") is not None:
                return Skip(f"its condition {proof}")
            chosen, other = other, chosen
        return self._replacement(node, chosen, "the selected operand")

    def _unfilled(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        proof = self._proof(given["mask"], "all-false")
        if proof is not None:
            return Skip(f"its mask {proof}")
        return self._replacement(node, given["input"], "the filled tensor")

    @staticmethod
    def _replacement(node: torch.fx.Node, kept: Any, what: str) -> torch.fx.Node | Skip:
        if not isinstance(kept, torch.fx.Node) or not same_value_type(value(kept), value(node)):
            return Skip(f"{what} is not a tensor of the result's shape and dtype")
        return kept

    # -- the proof ---------------------------------------------------------------------------------------------

    def _proof(self, mask: Any, claim: str) -> str | None:
        """None if ``mask`` is provably ``claim`` ("all-true", "all-false", "all-zero") at every length of the
        export range (and is so at both ends, computed); otherwise why that is not shown."""
        if not isinstance(mask, torch.fx.Node) or value(mask) is None:
            return "is not a tensor"
        try:
            bounds = self._bounds_of(mask)
        except _NotProvable as reason:
            return f"is not known to be computed from the length alone: {reason}"
        holds = {
            "all-true": lambda: self._always(bounds.lower, operator.ge, 1),
            "all-false": lambda: self._always(bounds.upper, operator.le, 0),
            "all-zero": lambda: (
                self._always(bounds.lower, operator.ge, 0) and self._always(bounds.upper, operator.le, 0)
            ),
        }[claim]
        if not holds():
            return f"is not provably {claim} at every length of the export range"
        try:
            computed = self._computed_at_ends(mask)
        except (_NotProvable, RuntimeError, TypeError, ValueError, OverflowError) as error:
            return f"could not be computed to check its bounds: {error}"
        for ends, tensor in computed.items():
            if not _CLAIMS[claim](tensor):
                return f"is not {claim} when computed at {ends}, although its bounds say so (a rule here is wrong)"
        return None

    def _always(self, expr: sympy.Expr, compare: Callable[[Any, Any], Any], number: int) -> bool:
        """Whether ``compare(expr, number)`` holds for every value of the size symbols in the export range."""
        try:
            bounds = bound_sympy(expr, self._ranges)
            extreme = bounds.lower if compare in (operator.ge, operator.gt) else bounds.upper
            return bool(compare(extreme, number))
        except (TypeError, ValueError):  # NaN from infinities of opposite signs, or sympy cannot bound it
            return False

    def _bounds_of(self, node: Any) -> _Bounds:
        if not isinstance(node, torch.fx.Node):
            if isinstance(node, (bool, int, float)):
                return _Bounds.point(node)
            raise _NotProvable(f"an argument {node!r} is not a number")
        return analysis_of(node, self._bounds, self._compute_bounds, _NotProvable)

    def _compute_bounds(self, node: torch.fx.Node) -> _Bounds:
        val = node.meta.get("val")
        if isinstance(val, (int, torch.SymInt)):  # a size, or integer math on sizes: its own bounds
            return _Bounds.point(val)
        if node.op == "placeholder":
            raise _NotProvable(f"it reads {node.name}")
        out = value(node)
        if node.op != "call_function" or out is None:
            raise _NotProvable(f"{node.name} is not a tensor op")
        target, args = node.target, node.args
        if target in _SAME_ELEMENTS:
            return self._bounds_of(args[0])
        if target in FILL_VALUES:
            return self._cast(self._bounds_of(FILL_VALUES[target](arguments(node))), out.dtype)
        if target in ARANGE_OPS:
            return self._arange(node, out.dtype)
        if target in COMPARISON_OPS:
            return self._compare(COMPARISON_OPS[target], self._bounds_of(args[0]), self._bounds_of(args[1]))
        if out.dtype == torch.bool and target in _NOT | _AND | _OR:
            # On truth values: each operand as a boolean (nonzero is true) first.
            a, b = (self._cast(self._bounds_of(arg), torch.bool) for arg in (args[0], args[-1]))
            if target in _NOT:
                return _Bounds(1 - a.upper, 1 - a.lower)
            if target in _AND:
                return _Bounds(sympy.Min(a.lower, b.lower), sympy.Min(a.upper, b.upper))
            return _Bounds(sympy.Max(a.lower, b.lower), sympy.Max(a.upper, b.upper))
        if target in _WHERE:
            return self._where(node, out.dtype)
        if target in _MASKED_FILL:
            given = arguments(node)
            filled = self._cast(self._bounds_of(given["value"]), out.dtype)
            return self._select(self._bounds_of(given["mask"]), filled, self._bounds_of(given["input"]))
        if target in _CONVERSIONS:
            return self._cast(self._bounds_of(args[0]), out.dtype)
        if target in _TRUTH_REDUCTIONS:
            return self._truth_reduction(node)
        if target is aten.cat.default and all(dtype_of(t) == out.dtype for t in args[0]):
            pieces = [self._bounds_of(t) for t in args[0]]
            return _Bounds(sympy.Min(*(p.lower for p in pieces)), sympy.Max(*(p.upper for p in pieces)))
        if target in _ARITHMETIC:
            return self._arithmetic(node, out.dtype)
        raise _NotProvable(f"{node.name} ({target}) is not an op whose bounds this pass knows")

    def _truth_reduction(self, node: torch.fx.Node) -> _Bounds:
        """``all`` or ``any`` of elements each true (false) is true (false), when it reduces at least one element:
        of none, ``all`` is true and ``any`` false whatever the elements."""
        given, reduced = arguments(node), value(node.args[0])
        if reduced is None:
            raise _NotProvable(f"{node.name} reduces what is not a tensor")
        dims = given.get("dim")
        dims = range(reduced.dim()) if dims is None else [dims] if isinstance(dims, int) else dims
        if not all(self._always(_expr(reduced.shape[d]), operator.ge, 1) for d in dims):
            raise _NotProvable(f"{node.name} may reduce no element")
        return self._cast(self._bounds_of(node.args[0]), torch.bool)

    def _arange(self, node: torch.fx.Node, dtype: torch.dtype) -> _Bounds:
        given = arguments(node)
        start, end, step = (self._bounds_of(given.get(name, default)) for name, default in _ARANGE_ARGUMENTS)
        if dtype.is_floating_point or dtype == torch.bool:
            raise _NotProvable(f"{node.name} is not an integer arange")
        if not all(b.lower.is_integer and b.upper.is_integer for b in (start, end, step)):
            raise _NotProvable(f"{node.name} counts from or to a number that may not be an integer")
        if not self._always(step.lower, operator.ge, 1):
            raise _NotProvable(f"{node.name} does not count up")
        # start, start + step, ... < end: integers up to end - 1 (no element at all for an empty range).
        return _Bounds(start.lower, end.upper - 1)

    def _compare(self, how: str, a: _Bounds, b: _Bounds) -> _Bounds:
        if how in ("le", "lt"):
            how, a, b = {"le": "ge", "lt": "gt"}[how], b, a
        if how in ("eq", "ne"):
            equal = self._always(a.lower - b.upper, operator.ge, 0) and self._always(a.upper - b.lower, operator.le, 0)
            apart = self._compare("gt", a, b) == _TRUE or self._compare("gt", b, a) == _TRUE
            result = _TRUE if equal else _FALSE if apart else _EITHER
            return _Bounds(1 - result.upper, 1 - result.lower) if how == "ne" else result
        strict = how == "gt"
        # a >= b everywhere when a's least exceeds b's greatest; nowhere when a's greatest is below b's least.
        if self._always(a.lower - b.upper, operator.gt if strict else operator.ge, 0):
            return _TRUE
        if self._always(a.upper - b.lower, operator.le if strict else operator.lt, 0):
            return _FALSE
        return _EITHER

    def _where(self, node: torch.fx.Node, dtype: torch.dtype) -> _Bounds:
        condition, chosen, other = node.args[:3]
        return self._select(
            self._bounds_of(condition),
            self._cast_operand(chosen, dtype),
            self._cast_operand(other, dtype),
        )

    def _select(self, condition: _Bounds, if_true: _Bounds, if_false: _Bounds) -> _Bounds:
        if self._always(condition.lower, operator.ge, 1):
            return if_true
        if self._always(condition.upper, operator.le, 0):
            return if_false
        return if_true.union(if_false)

    def _cast_operand(self, operand: Any, dtype: torch.dtype) -> _Bounds:
        """An operand's bounds once converted to the result's dtype (a Python number or another dtype's tensor)."""
        bounds = self._bounds_of(operand)
        return bounds if dtype_of(operand) == dtype else self._cast(bounds, dtype)

    def _arithmetic(self, node: torch.fx.Node, dtype: torch.dtype) -> _Bounds:
        operands = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.fx.Node)]
        bounds = {a: self._bounds_of(a) for a in operands}
        if all(self._is_number(b) and b.lower == b.upper for b in bounds.values()):
            return self._computed_on_one_element(node, bounds)
        if dtype.is_floating_point or dtype == torch.bool or dtype.is_complex:
            raise _NotProvable(f"{node.name} computes on floats that are not all one number")
        result = _integer_arithmetic(node, bounds, self._bounds_of)
        info = torch.iinfo(dtype)
        if not (
            self._always(result.lower, operator.ge, info.min) and self._always(result.upper, operator.le, info.max)
        ):
            raise _NotProvable(f"{node.name} may overflow {dtype}")
        return result

    def _computed_on_one_element(self, node: torch.fx.Node, bounds: dict[torch.fx.Node, _Bounds]) -> _Bounds:
        """An elementwise op on operands each of one number: computed by PyTorch on one element of each, with the
        operands' dtypes and dimension counts (so with the op's promotion and rounding)."""

        def element(arg: torch.fx.Node) -> torch.Tensor | int | float:
            operand, number = value(arg), _number(bounds[arg].lower)
            if operand is None:  # a size
                return number
            return torch.full([1] * operand.dim(), number, dtype=operand.dtype)

        args, kwargs = torch.fx.map_arg((node.args, node.kwargs), element)
        result = node.target(*args, **kwargs)
        return _Bounds.point(result.item())

    def _cast(self, bounds: _Bounds, dtype: torch.dtype) -> _Bounds:
        """The bounds of the elements once converted to ``dtype`` (rounding is monotonic: bounds round as they do)."""
        if dtype == torch.bool:
            if self._always(bounds.lower, operator.gt, 0) or self._always(bounds.upper, operator.lt, 0):
                return _TRUE
            if self._always(bounds.lower, operator.ge, 0) and self._always(bounds.upper, operator.le, 0):
                return _FALSE
            return _EITHER
        if dtype.is_floating_point:
            lower, upper = (
                self._numeric(expr, end) for expr, end in ((bounds.lower, "lower"), (bounds.upper, "upper"))
            )
            return _Bounds(_rounded(lower, dtype), _rounded(upper, dtype))
        if dtype.is_complex or not (bounds.lower.is_integer and bounds.upper.is_integer):
            raise _NotProvable(f"a conversion to {dtype} of values that may not be integers")
        info = torch.iinfo(dtype)
        if not (
            self._always(bounds.lower, operator.ge, info.min) and self._always(bounds.upper, operator.le, info.max)
        ):
            raise _NotProvable(f"a conversion to {dtype} that may overflow")
        return bounds

    def _numeric(self, expr: sympy.Expr, end: str) -> sympy.Expr:
        """The least (or greatest) value of ``expr`` over the export range, as a number."""
        try:
            extreme = getattr(bound_sympy(expr, self._ranges), end)
        except (TypeError, ValueError) as error:
            raise _NotProvable(f"cannot bound {expr}") from error
        if extreme.free_symbols:
            raise _NotProvable(f"cannot bound {expr}")
        return extreme

    @staticmethod
    def _is_number(bounds: _Bounds) -> bool:
        return not bounds.lower.free_symbols and not bounds.upper.free_symbols

    # -- the check at both ends of the range ---------------------------------------------------------------------

    def _computed_at_ends(self, mask: torch.fx.Node) -> dict[str, torch.Tensor]:
        """The mask computed with PyTorch with every size symbol at its least, then at its greatest value (its least
        plus 64 if it has none), from the values its bounds were computed from."""
        known = {node for node, bounds in self._bounds.items() if isinstance(bounds, _Bounds)}
        computation = ancestors([mask], expand=known.__contains__) & known
        nodes = [node for node in self.graph.nodes if node in computation]
        return {ends: computed_at_sizes(mask, nodes, at) for ends, at in sizes_at_range_ends(self._ranges).items()}


_ARANGE_ARGUMENTS = (("start", 0), ("end", None), ("step", 1))

_CLAIMS: dict[str, Callable[[torch.Tensor], bool]] = {
    "all-true": lambda mask: bool(mask.all()),
    "all-false": lambda mask: not bool(mask.any()),
    "all-zero": lambda mask: bool((mask == 0).all()),
}


def _integer_arithmetic(
    node: torch.fx.Node, bounds: dict[torch.fx.Node, _Bounds], bounds_of: Callable[[Any], _Bounds]
) -> _Bounds:
    """Exact interval arithmetic on integer elements: ``add``, ``sub``, ``rsub``, ``neg``, ``mul``."""
    target = node.target
    if target is aten.neg.default:
        inner = bounds_of(node.args[0])
        return _Bounds(-inner.upper, -inner.lower)
    given = arguments(node)
    a, b = bounds_of(given["input"]), bounds_of(given["other"])
    alpha = given.get("alpha", 1)
    if not isinstance(alpha, int) or alpha < 0:
        raise _NotProvable(f"{node.name} scales by alpha {alpha!r}")
    if target in (aten.add.Tensor, aten.add.Scalar):
        return _Bounds(a.lower + alpha * b.lower, a.upper + alpha * b.upper)
    if target in (aten.sub.Tensor, aten.sub.Scalar):
        return _Bounds(a.lower - alpha * b.upper, a.upper - alpha * b.lower)
    if target is aten.rsub.Scalar:
        return _Bounds(b.lower - alpha * a.upper, b.upper - alpha * a.lower)
    if target in (aten.mul.Tensor, aten.mul.Scalar):
        products = [x * y for x in (a.lower, a.upper) for y in (b.lower, b.upper)]
        return _Bounds(sympy.Min(*products), sympy.Max(*products))
    raise _NotProvable(f"{node.name} divides integers")


def _read_by_softmax(node: torch.fx.Node) -> bool:
    return any(user.target in _SOFTMAX for user in node.users)


def _is_float(node: torch.fx.Node) -> bool:
    dtype = dtype_of(node)
    return dtype is not None and dtype.is_floating_point


def _expr(number: Any) -> sympy.Expr:
    if isinstance(number, torch.SymInt):
        return sympy.sympify(number.node.expr)
    if isinstance(number, bool):
        return sympy.Integer(int(number))
    if isinstance(number, int):
        return sympy.Integer(number)
    if isinstance(number, float):
        return sympy.Float(number) if abs(number) != float("inf") else (sympy.oo if number > 0 else -sympy.oo)
    raise _NotProvable(f"{number!r} is not a number")


def _number(expr: sympy.Expr) -> int | float:
    return int(expr) if expr.is_integer else float(expr)


def _rounded(number: sympy.Expr, dtype: torch.dtype) -> sympy.Expr:
    """``number`` as an element of ``dtype`` holds it: converted by PyTorch, as the elements are."""
    if number.is_integer and abs(int(number)) > _EXACT_INTEGERS:
        raise _NotProvable(f"{number} is too large to convert exactly")
    return _expr(torch.tensor(_number(number), dtype=torch.float64).to(dtype).item())

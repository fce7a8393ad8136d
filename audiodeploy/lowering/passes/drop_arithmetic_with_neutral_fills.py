"""Drop an addition or subtraction of a tensor of zeros, and a product or quotient by a tensor of ones.

Models fill tensors with a neutral number where an optional input is absent,
then compute with them as if it were there: VITS's WaveNet adds
``zeros_like(hidden)`` when it has no speaker conditioning and starts its skip sum
from ``zeros_like(inputs)``; a recipe that runs one utterance multiplies by an
all-ones padding mask (``ones_like(latents[:, :1])``). Each such op is work on
every element, and it hides what it reads from the rewrites that follow: a
channel slice of ``conv(x) + zeros`` picks channels of a sum, which
:mod:`channel_selections_as_convolutions` writes as an extra selection
convolution, where the same slice of ``conv(x)`` is the convolution cut to those
channels, for no work at all. This pass returns the other operand::

    before                                          after

    h ── zeros_like ──┐
    h ────────────────┴─ add ── x[:, :C] ──         h ── x[:, :C] ──

    z ── slice ── ones_like ──┐                     x ──
    x ────────────────────────┴─ mul ──

for ``a + zeros``, ``zeros + a``, ``a - zeros``, ``a * ones``, ``ones * a`` and
``a / ones``, where the fill is ``zeros_like``, ``ones_like``, ``full_like``,
``new_zeros``, ``new_ones``, ``new_full``, ``zeros``, ``ones`` or ``full`` of that
number (as its dtype holds it), or a ``neg`` or ``exp`` of such a fill that gives it
(VITS's coupling layers scale by ``exp(-zeros_like(mean))``), or a cast or copy of one (EnCodec multiplies its
input by an all-true mask, ``ones_like(x).bool()``, when given no padding mask). Multiplying and dividing by one returns every
element as it is, NaN and infinities included. Adding a zero (or subtracting
one) does too but for the sign of a zero: ``-0.0 + 0.0`` is ``+0.0``, where the
operand kept is ``-0.0``. The two compare equal, and only a division by that
zero, ``copysign``, ``signbit`` or ``atan2`` tells them apart.

It runs before :mod:`length_only_values_as_constants` and
:mod:`full_like_as_clamp`, which would otherwise store a ``ones`` of the length
as a constant or write a ``zeros_like`` as a clamp, still read by the op.

The pass leaves the op as it is, and does nothing on a program without one,
when neither operand is such a fill, the result is not the kept operand's shape
and dtype (the fill broadcasts or promotes it), or an ``add`` or ``sub`` scales
the fill by an ``alpha`` that is not finite or the kept operand by one that is
not 1.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from audiodeploy.lowering.passes._graph import FILL_VALUES, NodeRewritePass, Skip, arguments, same_value_type, value

aten = torch.ops.aten

_OF_ONE = frozenset({aten.neg.default, aten.exp.default, aten._to_copy.default, aten.alias.default, aten.clone.default})
"""Ops of one tensor whose value on a fill is a fill: a flow's ``exp(-log_scale)`` of a zero log-scale, and a cast
or copy, as EnCodec's all-true padding mask ``ones_like(x).bool()`` (a cast is done by the ``.to`` of the
result's dtype below)."""

_NEUTRAL = {aten.add.Tensor: 0, aten.sub.Tensor: 0, aten.mul.Tensor: 1, aten.div.Tensor: 1}
"""Each op and the number that, as its second operand, leaves its first as it is."""
_COMMUTATIVE = frozenset({aten.add.Tensor, aten.mul.Tensor})


class DropArithmeticWithNeutralFillsPass(NodeRewritePass):
    targets = frozenset(_NEUTRAL)

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        first, second, alpha = given["input"], given["other"], given.get("alpha", 1)
        neutral = _NEUTRAL[node.target]
        if _fill_of(second) == neutral:
            if not _is_finite_number(alpha):
                return Skip(f"it scales the fill by alpha {alpha!r}")
            kept = first
        elif node.target in _COMMUTATIVE and _fill_of(first) == neutral:
            if alpha != 1:
                return Skip(f"it scales the other operand by alpha {alpha!r}")
            kept = second
        elif node.target in _COMMUTATIVE:
            return Skip(f"neither operand is a tensor filled with {neutral}")
        else:
            return Skip(f"its second operand is not a tensor filled with {neutral}")
        if not same_value_type(value(kept), value(node)):
            return Skip("the fill broadcasts or promotes the result: it is not the other operand's shape and dtype")
        return kept


def _fill_of(operand: Any) -> int | float | None:
    """The number every element of ``operand`` is, as its dtype holds it: a fill op's, or an op of :data:`_OF_ONE`
    computed by PyTorch on one element of its input's; None for any other operand."""
    filled = value(operand)
    if filled is None or operand.op != "call_function":
        return None
    if operand.target in _OF_ONE:
        inner, source = _fill_of(operand.args[0]), value(operand.args[0])
        if inner is None or source is None:
            return None
        return operand.target(torch.tensor(inner, dtype=source.dtype)).to(filled.dtype).item()
    if operand.target not in FILL_VALUES:
        return None
    fill = FILL_VALUES[operand.target](arguments(operand))
    if isinstance(fill, bool) or not isinstance(fill, (int, float)):
        return None
    return torch.tensor(fill).to(filled.dtype).item()


def _is_finite_number(number: Any) -> bool:
    return isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number)

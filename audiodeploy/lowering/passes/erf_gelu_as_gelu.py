"""Write a GELU spelled out with ``erf`` as the ``gelu`` op, which XNNPACK delegates.

Some models write the exact GELU by hand, ``0.5 * x * (1 + erf(x / sqrt(2)))``
(transformers' ``GELUActivation(use_gelu_python=True)``, older research code).
ExecuTorch 1.5.1's XNNPACK partitioner has no config for ``erf``, so each such
GELU cuts the delegate, while ``gelu`` (``approximate="none"``, the same
function) is delegated as XNNPACK's own GELU::

    before

    x ─┬─ div(sqrt(2)) ── erf ── add(1) ──┐
       └─ mul(0.5) ───────────────────────┴─ mul ──

    after

    x ── gelu ──

The pass looks from each ``erf`` outwards: its argument is ``x / sqrt(2)`` or
``x * (1 / sqrt(2))`` (the constant as float32 rounds it), its only reader adds
one, and the product that reads the sum, through multiplications and divisions
by numbers and by ``x``, each read once, is ``0.5 * x * (1 + erf)`` in any order
(``x * 0.5 * (...)``, ``x * (...) / 2``, ...). XNNPACK's GELU is exact to a few
units in the last place, as PyTorch's ``erf`` is.

The pass leaves an ``erf`` as it is, and does nothing on a program without one,
when it is not in such a product (``erf`` alone has no delegated form: written
with ``gelu`` it would divide by its argument), or ``x`` is not float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, insert_op, value

aten = torch.ops.aten

_FLOAT32_SQRT2 = torch.tensor(math.sqrt(2.0), dtype=torch.float32).item()
_FLOAT32_SQRT1_2 = torch.tensor(1.0 / math.sqrt(2.0), dtype=torch.float32).item()


def _as_float32(number: float) -> float:
    """``number`` rounded to float32, as a float32 tensor op rounds a Python scalar it is given."""
    return torch.tensor(number, dtype=torch.float32).item()


@dataclass(frozen=True)
class _Product:
    """A product of graph values and a number: ``scale * prod(factors)``."""

    factors: tuple[torch.fx.Node, ...]
    scale: float


class ErfGeluAsGeluPass(NodeRewritePass):
    targets = frozenset({aten.erf.default})

    def rewrite(self, node: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node] | Skip:
        x = _gelu_input(node.args[0])
        if x is None:
            return Skip("its argument is not x / sqrt(2) or x * (1 / sqrt(2))")
        val = value(x)
        if val is None or val.dtype != torch.float32:
            return Skip("not a float32 tensor")
        one_plus = _only_user(node)
        if one_plus is None or not _adds_one(one_plus, node):
            return Skip("nothing but 1 + erf reads it")
        root = _gelu_product(one_plus, x)
        if root is None:
            return Skip("1 + erf is not in a product 0.5 * x * (1 + erf) of the same x")
        return {root: insert_op(self.graph, aten.gelu.default, (x,), origin=root)}


def _gelu_input(scaled: object) -> torch.fx.Node | None:
    """``x`` when ``scaled`` is ``x / sqrt(2)`` or ``x * (1 / sqrt(2))`` with the constant as float32 rounds it."""
    if not isinstance(scaled, torch.fx.Node) or scaled.op != "call_function" or scaled.kwargs:
        return None
    if scaled.target == aten.div.Tensor and len(scaled.args) == 2:
        x, divisor = scaled.args
        if isinstance(x, torch.fx.Node) and _is_number(divisor) and _as_float32(divisor) == _FLOAT32_SQRT2:
            return x
    if scaled.target == aten.mul.Tensor and len(scaled.args) == 2:
        for x, factor in (scaled.args, scaled.args[::-1]):
            if isinstance(x, torch.fx.Node) and _is_number(factor) and _as_float32(factor) == _FLOAT32_SQRT1_2:
                return x
    return None


def _adds_one(node: torch.fx.Node, erf: torch.fx.Node) -> bool:
    """Whether ``node`` is ``erf + 1`` (or ``1 + erf``)."""
    if node.target != aten.add.Tensor or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return False
    return node.args in ((erf, 1), (1, erf))


def _gelu_product(one_plus: torch.fx.Node, x: torch.fx.Node) -> torch.fx.Node | None:
    """The first node from ``one_plus`` up (through products read once) that is ``0.5 * x * one_plus``."""
    node, product = one_plus, _Product((one_plus,), 1.0)
    while (user := _only_user(node)) is not None:
        extended = _extend(user, node, product)
        if extended is None:
            return None
        node, product = user, extended
        if product.scale == 0.5 and sorted(product.factors, key=id) == sorted((x, one_plus), key=id):
            return node
    return None


def _extend(user: torch.fx.Node, operand: torch.fx.Node, product: _Product) -> _Product | None:
    """``product`` (the value of ``operand``) as ``user`` extends it, if ``user`` multiplies or divides it by a
    number or multiplies it by a product of values read only there."""
    if user.kwargs or len(user.args) != 2:
        return None
    if user.target == aten.div.Tensor and user.args[0] is operand and _is_number(user.args[1]):
        return _Product(product.factors, product.scale / float(user.args[1]))
    if user.target != aten.mul.Tensor:
        return None
    other = user.args[1] if user.args[0] is operand else user.args[0]
    if _is_number(other):
        return _Product(product.factors, product.scale * float(other))
    if not isinstance(other, torch.fx.Node):
        return None
    factors = _factors(other)
    return _Product(product.factors + factors.factors, product.scale * factors.scale)


def _factors(node: torch.fx.Node) -> _Product:
    """``node`` as a product: the multiplications by numbers and values read only there, unfolded."""
    if node.op == "call_function" and not node.kwargs and len(node.args) == 2 and len(node.users) == 1:
        left, right = node.args
        if node.target == aten.mul.Tensor:
            parts = [_factors(arg) if isinstance(arg, torch.fx.Node) else arg for arg in (left, right)]
            if all(isinstance(part, _Product) or _is_number(part) for part in parts):
                factors = tuple(f for part in parts if isinstance(part, _Product) for f in part.factors)
                scale = math.prod(part.scale if isinstance(part, _Product) else float(part) for part in parts)
                return _Product(factors, scale)
        if node.target == aten.div.Tensor and isinstance(left, torch.fx.Node) and _is_number(right):
            inner = _factors(left)
            return _Product(inner.factors, inner.scale / float(right))
    return _Product((node,), 1.0)


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 and users[0].op == "call_function" else None


def _is_number(arg: object) -> bool:
    return isinstance(arg, (int, float)) and not isinstance(arg, bool)

"""Write a Euclidean norm over fixed channels as a square, a sum XNNPACK delegates, and a square root.

``F.normalize(x, dim=1)`` (DAC's codebook projection, and its factorized codes)
exports as ``linalg_vector_norm(x, 2, [1], keepdim)``, ``clamp_min``, an
``expand`` of the norm back to ``x``'s shape and ``div``. Edge lowering
decomposes the norm into ``pow``, ``sum`` and ``pow``; ExecuTorch 1.5.1's
XNNPACK partitioner takes none of them, nor the ``expand`` at a dynamic length,
so each normalization cuts the delegate in three. The square is a ``mul``, the
root a ``sqrt``, and the sum over the channels of ``[N, C, T]`` a convolution
with a ``[1, C, 1]`` kernel of ones (over other dimensions, a ``sum`` that
:mod:`.sum_and_mean_as_xnnpack_reductions` writes as a linear). ``div``
broadcasts by itself, so an ``expand`` of the clamped norm read only by
broadcasting ops is dropped::

    before

    x [N, C, T] ── linalg_vector_norm(2, [1], keepdim) ── clamp_min(eps) ── expand [N, C, T] ── div(x, .)

    after

    x [N, C, T] ── mul(x, x) ── conv1d(ones [1, C, 1]) ── sqrt ── clamp_min(eps) ── div(x, .)

The sum adds the same squares, in another order: the result differs from
PyTorch's by rounding only.

The pass leaves a norm as it is, and does nothing on a program without one,
unless it is a float32 2-norm (``ord`` 2) over given dimensions whose sizes are
fixed, in the input's own dtype.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    is_static,
    value,
)

aten = torch.ops.aten

_BROADCASTING = frozenset({aten.div.Tensor, aten.mul.Tensor})
"""Ops that broadcast their operands: they read an expanded value as well as the value before the expand."""


class VectorNormAsSumOfSquaresPass(NodeRewritePass):
    targets = frozenset({aten.linalg_vector_norm.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | dict[torch.fx.Node, torch.fx.Node] | Skip:
        given = arguments(node)
        x = given["input"]
        val = value(x)
        if val is None or val.dtype != torch.float32 or given["dtype"] is not None:
            return Skip("not a float32 norm in its input's own dtype")
        if given["ord"] != 2:
            return Skip(f"a norm of order {given['ord']!r}, not 2")
        if not given["dim"]:
            return Skip("a norm over every dimension")
        rank = val.dim()
        dims = sorted(d % rank for d in given["dim"])
        if not all(is_static(val.shape[d]) for d in dims):
            return Skip("a dimension it sums over depends on the input length")
        keepdim = bool(given["keepdim"])
        squares = insert_op(self.graph, aten.mul.Tensor, (x, x), origin=node)
        if rank == 3 and dims == [1] and keepdim:
            channels = int(val.shape[1])
            ones = add_constant(self.exported_program, self.graph, "norm_sum_weight", torch.ones(1, channels, 1))
            summed = insert_op(self.graph, aten.conv1d.default, (squares, ones), origin=node)
        else:
            summed = insert_op(self.graph, aten.sum.dim_IntList, (squares, dims, keepdim), origin=node)
        norm = insert_op(self.graph, aten.sqrt.default, (summed,), origin=node)
        replacements = {node: norm}
        replacements.update(_broadcast_expands(node))
        return replacements


def _broadcast_expands(norm: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node]:
    """The ``expand`` after the norm (or after its ``clamp_min``), each mapped to what it expands, when only
    broadcasting ops read it and the shape it expands to is theirs anyway (their other operand's)."""
    source = norm
    if len(source.users) == 1:
        (user,) = source.users
        if user.target in (aten.clamp_min.default, aten.clamp.default):
            source = user
    found: dict[torch.fx.Node, torch.fx.Node] = {}
    for expand in source.users:
        if expand.target != aten.expand.default or not expand.users:
            continue
        expanded = value(expand)
        if expanded is None:
            continue
        if all(_broadcasts_to(user, expand, expanded.shape) for user in expand.users):
            found[expand] = source
    return found


def _broadcasts_to(user: torch.fx.Node, expand: torch.fx.Node, shape: torch.Size) -> bool:
    """Whether ``user`` is a broadcasting binary op whose other operand has ``shape`` (so its result does too)."""
    if user.target not in _BROADCASTING or len(user.args) != 2 or user.kwargs:
        return False
    others = [arg for arg in user.args if arg is not expand]
    if len(others) != 1:
        return False
    other = value(others[0]) if isinstance(others[0], torch.fx.Node) else None
    return (
        other is not None
        and other.dim() == len(shape)
        and all(statically_known_true(a == b) for a, b in zip(other.shape, shape))
    )

"""Drop a reshape and the reshape back when only row-wise ops (a softmax over the last dimension) sit between.

DeBERTa's disentangled attention (transformers' SEW-D) adds its 3-D scores ``[B·H, T, T]``, views them as
``[B, H, T, T]`` for its masked softmax, and views the probabilities back to 3-D for the ``bmm`` with the values. At
a dynamic length both views have two symbolic sizes, which no XNNPACK 1.5.1 reshape takes: each leaves the delegate,
two cuts in every layer (once the mask that masks nothing is dropped, only the softmax is left between them). A
softmax over the last dimension, and an elementwise op, computes each row from that row alone, and reshapes that
keep the last dimension keep the rows, so the pass runs them on the tensor before the first reshape::

    before

    scores [B·H, T, T] ── view [B, H, T, T] ── softmax(-1) ── view [B·H, T, T] ── bmm ──

    after

    scores [B·H, T, T] ── softmax(-1) ── bmm ──

The ops between must be a softmax or log-softmax over the last dimension, an inference ``dropout`` (the identity)
or an elementwise op of one tensor (:data:`~audiodeploy.lowering.passes._graph.ELEMENTWISE`), each read only by the
next. The pass leaves a reshape as it is, and does nothing on a program without such a pair, when what it reshapes
is not itself a reshape through such ops, something else reads the first reshape or the ops between, the last
dimension changes, or the second reshape does not give back the first one's input shape.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import (
    ELEMENTWISE,
    RESHAPES,
    NodeRewritePass,
    Skip,
    insert_op,
    same_shape,
    sizes_always,
    tensor_of,
)

aten = torch.ops.aten

_SOFTMAXES = frozenset({aten.softmax.int, aten._softmax.default, aten.log_softmax.int, aten._log_softmax.default})


class ReshapeRoundTripsAroundRowOpsPass(NodeRewritePass):
    targets = RESHAPES

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        chain: list[torch.fx.Node] = []
        current = node.args[0]
        while isinstance(current, torch.fx.Node) and current.target not in RESHAPES:
            if not _is_row_op(current) or len(current.users) != 1:
                return Skip("what it reshapes is not a reshape through row-wise ops read only by each other")
            chain.append(current)
            current = current.args[0]
        if not isinstance(current, torch.fx.Node) or current.target not in RESHAPES or len(current.users) != 1:
            return Skip("what it reshapes is not a reshape read only by the ops between")
        source = current.args[0]
        if not isinstance(source, torch.fx.Node):
            return Skip("the first reshape reads no tensor")
        before, between, after = tensor_of(source), tensor_of(current), tensor_of(node)
        if not same_shape(before, after):
            return Skip("the second reshape does not give back the first one's input shape")
        if not sizes_always(operator.eq, before.shape[-1], between.shape[-1]):
            return Skip("the reshapes change the last dimension, which the ops between work along")
        result = source
        for op in reversed(chain):
            args = (result, -1, *op.args[2:]) if op.target in _SOFTMAXES else (result, *op.args[1:])
            result = insert_op(self.graph, op.target, args, dict(op.kwargs), origin=op)
        return result


def _is_row_op(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes each row of its one tensor (along the last dimension) from that row alone."""
    if node.op != "call_function":
        return False
    if node.target in _SOFTMAXES:
        dim, rank = node.args[1], tensor_of(node).dim()
        return isinstance(dim, int) and dim % rank == rank - 1
    if node.target == aten.dropout.default:
        return node.args[2] is False or node.kwargs.get("train") is False
    return node.target in ELEMENTWISE

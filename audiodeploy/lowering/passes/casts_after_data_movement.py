"""Move a cast out of float32 after the views, stacks and concatenations that read it.

Codec codes are computed as float32 inside the program (:mod:`.argmax_as_max_pooling` casts its index to
``int64`` right where the search was) and then reshaped and stacked (DAC's ``indices.reshape(..)`` and
``torch.stack(codes, 1)``). XNNPACK holds no integer tensors, so ExecuTorch 1.5.1's partitioner declines every
view, stack and concatenation of the ``int64`` codes: each runs on a portable kernel and cuts the delegate. A cast
is elementwise and these ops only move elements, so the cast commutes with them exactly; moved after them, they
run on float32 inside the delegate and one cast at the end leaves it::

    before

    a float32 ── _to_copy(int64) ─┐
    b float32 ── _to_copy(int64) ─┴─ stack(1) ── [..] int64

    after

    a float32 ── unsqueeze(1) ─┐
    b float32 ── unsqueeze(1) ─┴─ cat(1) ── _to_copy(int64) ── [..] int64

A moved stack is written as the concatenation of its pieces unsqueezed: edge lowering would write it as a
concatenation and a view whose sizes are symbolic, which XNNPACK declines at a dynamic length.

A cast read by other ops too stays for those. The pass leaves a data movement as it is, and does nothing on a
program without one, unless every tensor it reads is a cast from float32 to a dtype that is not a float (the
same dtype for each), that changes nothing else.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    MOVES_ELEMENTS,
    NodeRewritePass,
    Skip,
    arguments,
    insert_op,
    tensor_of,
    value,
)

aten = torch.ops.aten

_OF_TENSOR_LIST = frozenset({aten.stack.default, aten.cat.default})
"""Ops that move the elements of the tensors listed in their first argument."""


class CastsAfterDataMovementPass(NodeRewritePass):
    targets = MOVES_ELEMENTS | _OF_TENSOR_LIST

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        listed = node.target in _OF_TENSOR_LIST
        read = node.args[0]
        tensors = list(read) if listed and isinstance(read, (list, tuple)) else [read]
        dtypes = {_cast_out_of_float(t) for t in tensors}
        if len(dtypes) != 1 or None in dtypes:
            return Skip("not every tensor it reads is a cast from float32 to one dtype that is not a float")
        (dtype,) = dtypes
        sources = [t.args[0] for t in tensors]
        if node.target == aten.stack.default:
            moved = self._stack_as_cat(sources, arguments(node)["dim"], node)
        else:
            first = sources if listed else sources[0]
            args = (first, *node.args[1:])
            moved = insert_op(self.graph, node.target, args, dict(node.kwargs), origin=node)
        return insert_op(self.graph, aten._to_copy.default, (moved,), {"dtype": dtype}, origin=node)

    def _stack_as_cat(self, pieces: list, dim: int, origin: torch.fx.Node) -> torch.fx.Node:
        """``stack(pieces, dim)`` as the concatenation of the pieces unsqueezed at ``dim``: edge lowering writes a
        stack as a concatenation and a view whose sizes are symbolic, which XNNPACK declines at a dynamic length."""
        dim = dim % (tensor_of(pieces[0]).dim() + 1)
        unsqueezed = [insert_op(self.graph, aten.unsqueeze.default, (p, dim), origin=origin) for p in pieces]
        return insert_op(self.graph, aten.cat.default, (unsqueezed, dim), origin=origin)


def _cast_out_of_float(node: object) -> torch.dtype | None:
    """The dtype ``node`` casts a float32 tensor to, if it is such a cast and that dtype is not a float."""
    if not isinstance(node, torch.fx.Node) or node.target != aten._to_copy.default or set(node.kwargs) != {"dtype"}:
        return None
    source, result = value(node.args[0]), value(node)
    if source is None or result is None or source.dtype != torch.float32 or result.dtype.is_floating_point:
        return None
    return result.dtype

"""Move a cast of integers to float32 before the selections and views that lead to it, up to where they start.

Codes a codec decodes come in as an ``int64`` input and are selected per codebook (DAC's ``audio_codes[:, i, :]``)
before their lookup, which :mod:`.embedding_as_one_hot_gemm` computes on a float32 index it casts. XNNPACK holds
no integer tensors, so ExecuTorch 1.5.1's partitioner declines the selections and the cast: each runs on a
portable kernel before the delegate. A cast is elementwise and these ops only move elements, so the cast
commutes with them exactly; moved before them, one cast of the input leaves the selections to the delegate::

    before

    codes [N, Q, T] int64 ── select(1, i) ── _to_copy(float32) ──

    after

    codes [N, Q, T] int64 ── _to_copy(float32) ── slice(1, i, i + 1) ── view [N, T] ──

A moved ``select`` along a fixed dimension is written as a slice of one and a view: XNNPACK has no select, and
:mod:`.channel_selections_as_convolutions` takes a slice of channels at a dynamic length. Casts of the same
tensor moved there become one. Integers of more than 24 bits are rounded by the cast before the
selection as they were after it. The pass leaves a cast as it is, and does nothing on a program without one,
unless it casts integers to float32 and changes nothing else, and what it reads is a view or selection.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    MOVES_ELEMENTS,
    NodeRewritePass,
    Skip,
    insert_op,
    insert_reshape,
    is_static,
    static_view_sizes,
    tensor_of,
    value,
)

aten = torch.ops.aten


class CastsBeforeDataMovementPass(NodeRewritePass):
    targets = frozenset({aten._to_copy.default})

    def __init__(self, exported_program: torch.export.ExportedProgram) -> None:
        super().__init__(exported_program)
        self._casts: dict[torch.fx.Node, torch.fx.Node] = {}

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        source, result = value(node.args[0]), value(node)
        if source is None or result is None or set(node.kwargs) != {"dtype"} or result.dtype != torch.float32:
            return Skip("not a cast to float32 that changes nothing else")
        if source.dtype.is_floating_point or source.dtype.is_complex or source.dtype == torch.bool:
            return Skip("it does not cast integers")
        moves = []
        start = node.args[0]
        while isinstance(start, torch.fx.Node) and start.op == "call_function" and start.target in MOVES_ELEMENTS:
            moves.append(start)
            start = start.args[0]
        if not moves:
            return Skip("it reads no view or selection")
        assert isinstance(start, torch.fx.Node)
        if start not in self._casts:
            self._casts[start] = insert_op(self.graph, aten._to_copy.default, (start,), dict(node.kwargs), origin=node)
        moved = self._casts[start]
        for move in reversed(moves):
            moved = self._select_as_slice(moved, move, node) or insert_op(
                self.graph, move.target, (moved, *move.args[1:]), dict(move.kwargs), origin=node
            )
        return moved

    def _select_as_slice(self, x: torch.fx.Node, move: torch.fx.Node, origin: torch.fx.Node) -> torch.fx.Node | None:
        """``move`` on ``x`` as a slice of one and a view, if it is a select along a fixed dimension: XNNPACK has
        no select, and :mod:`.channel_selections_as_convolutions` takes a slice of channels at a dynamic length."""
        if move.target != aten.select.int:
            return None
        _, dim, index = move.args
        size = tensor_of(x).shape[dim]
        sizes = static_view_sizes(tensor_of(move).shape)
        if not is_static(size) or sizes is None:
            return None
        start = index % int(size)
        piece = insert_op(self.graph, aten.slice.Tensor, (x, dim, start, start + 1), origin=origin)
        return insert_reshape(self.graph, piece, sizes, origin=origin)

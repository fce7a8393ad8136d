"""Write the index of the largest (or smallest) score as max poolings and exact arithmetic XNNPACK delegates.

A vector quantizer's codebook search (DAC's ``dist.max(1)[1]``, ``cdist(..).argmin(-1)``) picks, per row of
scores ``s [.., K]``, the index of its largest or smallest entry. ExecuTorch 1.5.1's XNNPACK partitioner has no
config for ``argmax`` or ``argmin``, and its ``max.dim`` config declines a ``max.dim`` whose indices are read
(its node visitor has XNNPACK's argmax pooling: a config that accepts the indices, tried by hand, delegates it
and returns PyTorch's int64 indices; but an integer tensor cannot become a float inside the delegate, since
1.5.1 delegates no dtype conversion, so a lookup of the index would still cut the delegate). So the search, and
everything after it that reads the index, runs outside the delegate.

The largest entry ``m`` is a max pooling (``max.dim`` of a 4-D ``[1, 1, M, K]`` read for its values only, which
XNNPACK delegates). ``m - s_k`` is exactly zero where ``s_k`` equals it and at least the smallest normal float
(2^-126) elsewhere, so ``relu(1 - (m - s_k) * 2^126)`` is exactly 1 at every largest entry and 0 elsewhere.
Weighting those by the constant row ``K, K - 1, .., 1`` and taking the largest again gives ``K - first``, where
``first`` is the first largest entry, the one PyTorch picks on a tie. The index leaves as a float (exact for
``K < 2^24``) and is cast to ``int64`` for what reads it; :mod:`.casts_after_data_movement` moves that cast past
the views and stacks after it, and :mod:`.embedding_as_one_hot_gemm` reads the float for a codebook lookup::

    before

    s [.., K] ── argmax(-1) ── [..] int64                  (or max.dim(-1)[1]; argmin and min.dim of -s)

    after

    s [.., K] ── view [1, 1, M, K] ─┬─ max.dim(3, keepdim)[0] = m ─┐
                                    └──────────────────────────────┴─ sub(m, s) ── mul(-2^126) ── add(1) ── relu ──
        ── mul([K, .., 1]) ── max.dim(3, keepdim)[0] ── sub(K) ── neg ── view [..] ── _to_copy(int64) ── [..] int64

``max.dim`` read for its values becomes XNNPACK's max pooling over the row (its pooling width ``K``). Every step
is exact: the largest of several floats is one of them, and the rest is integer arithmetic on 0, 1 and ``K``.
Two caveats, both on scores a search does not produce: XNNPACK flushes subnormals to zero, so two scores whose
difference is subnormal (both below about 2^-125 in magnitude) tie here; a NaN or infinite score gives an
unspecified index, where PyTorch picks the NaN.

The pass leaves a search as it is, and does nothing on a program without one, unless it is along the last
dimension of a float32 tensor of fixed size ``K < 2^24`` there and with at most one other dimension that depends
on the input length, and (``max.dim``, ``min.dim``) something reads its indices.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import (
    FLOAT32_EXACT_INTEGERS,
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    insert_reshape,
    is_static,
    static_view_sizes,
    tensor_of,
    value,
)

aten = torch.ops.aten

_LARGEST = frozenset({aten.argmax.default, aten.max.dim})
_WITH_VALUES = frozenset({aten.max.dim, aten.min.dim})
_TO_ONE = float(2**126)
"""The smallest normal float32 times this is 1: any positive difference of scores scales to 1 or more."""


class ArgmaxAsMaxPoolingPass(NodeRewritePass):
    targets = frozenset({aten.argmax.default, aten.argmin.default, aten.max.dim, aten.min.dim})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | dict[torch.fx.Node, torch.fx.Node] | Skip:
        given = arguments(node)
        scores = given["input"]
        val = value(scores)
        if val is None or val.dtype != torch.float32 or val.dim() == 0:
            return Skip("its input is not a float32 tensor of one or more dimensions")
        if given["dim"] is None or given["dim"] % val.dim() != val.dim() - 1:
            return Skip("it does not select along the last dimension")
        codes = val.shape[-1]
        if not is_static(codes) or int(codes) >= FLOAT32_EXACT_INTEGERS:
            return Skip("the size it selects along is not fixed, or not exact as a float32")
        if static_view_sizes(val.shape) is None:
            return Skip("more than one of its dimensions depends on the input length")
        indices, values = self._outputs(node)
        if indices is None:
            return Skip("nothing reads its indices")
        index_sizes = static_view_sizes(tensor_of(indices).shape)
        values_sizes = static_view_sizes(tensor_of(values).shape) if values is not None else []
        if index_sizes is None or values_sizes is None:
            return Skip("more than one dimension of its result depends on the input length")
        codes = int(codes)
        if node.target not in _LARGEST:
            scores = insert_op(self.graph, aten.neg.default, (scores,), origin=node)
        rows = insert_reshape(self.graph, scores, [1, 1, -1, codes], origin=node)
        largest = self._row_max(rows, node)
        gaps = insert_op(self.graph, aten.sub.Tensor, (largest, rows), origin=node)
        scaled = insert_op(self.graph, aten.mul.Tensor, (gaps, -_TO_ONE), origin=node)
        shifted = insert_op(self.graph, aten.add.Tensor, (scaled, 1.0), origin=node)
        is_largest = insert_op(self.graph, aten.relu.default, (shifted,), origin=node)
        countdown = torch.arange(codes, 0, -1, dtype=torch.float32)
        ranks = add_constant(self.exported_program, self.graph, "argmax_countdown", countdown)
        ranked = insert_op(self.graph, aten.mul.Tensor, (is_largest, ranks), origin=node)
        first_rank = self._row_max(ranked, node)
        below = insert_op(self.graph, aten.sub.Tensor, (first_rank, float(codes)), origin=node)
        index = insert_op(self.graph, aten.neg.default, (below,), origin=node)
        index = insert_reshape(self.graph, index, index_sizes, origin=node)
        cast = insert_op(self.graph, aten._to_copy.default, (index,), {"dtype": tensor_of(indices).dtype}, origin=node)
        if node.target not in _WITH_VALUES:
            return cast
        replacements = {indices: cast}
        if values is not None:
            if node.target not in _LARGEST:
                largest = insert_op(self.graph, aten.neg.default, (largest,), origin=node)
            replacements[values] = insert_reshape(self.graph, largest, values_sizes, origin=node)
        return replacements

    def _row_max(self, rows: torch.fx.Node, origin: torch.fx.Node) -> torch.fx.Node:
        """The largest entry of each row of a 4-D ``[1, 1, M, K]``, kept as ``[1, 1, M, 1]``: XNNPACK's max pooling."""
        pooled = insert_op(self.graph, aten.max.dim, (rows, 3, True), origin=origin)
        return insert_op(self.graph, operator.getitem, (pooled, 0), origin=origin)

    @staticmethod
    def _outputs(node: torch.fx.Node) -> tuple[torch.fx.Node | None, torch.fx.Node | None]:
        """What reads the search's index and (``max.dim``, ``min.dim``) its values: the node itself for ``argmax``."""
        if node.target not in _WITH_VALUES:
            return node, None
        found: dict[int, torch.fx.Node] = {}
        for user in node.users:
            if user.target is operator.getitem and user.users:
                found[user.args[1]] = user
        return found.get(1), found.get(0)

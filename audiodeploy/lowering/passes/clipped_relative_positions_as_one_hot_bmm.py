"""Write relative-position scores from a table clipped to a window (``relative_key``) as a GEMM and a one-hot bmm.

Conformers with ``relative_key`` position embeddings (transformers' Wav2Vec2-BERT; BERT's ``relative_key``)
score each query against a learned row per clipped distance: a ``[T, T]`` grid of
``clamp(j - i, -left, right) + left`` indexes a ``[K, D]`` table (``K = left + right + 1``) and the
``[T, T, D]`` rows are contracted with the queries. At a dynamic length ExecuTorch 1.5.1's XNNPACK
partitioner takes neither the integer grid, the ``embedding`` nor the 4-D ``einsum``'s reshapes with two
symbolic sizes, and :mod:`length_only_values_as_constants` stores the ``[T, T, D]`` rows at the longest
length (a program 22 times stock's for a hidden size of 32). The scores only pick, for query ``i`` and
key ``j``, one of the ``K`` products of the query with the table::

    before

    n ── arange ─┬─ view [1, n] ──┐
                 └─ view [n, 1] ──┴─ sub ── clamp(-left, right) ── add(left) ── embedding(table [K, D]) ──┐
    q [1, H, n, D] ─────────────────────────────────────────────────────────────── einsum(bhld,lrd->bhlr) ── [1, H, n, n]

    after

    q [1, H, n, D] ── view [H, n, D] ── linear(table) [H, n, K] ── permute [n, H, K] ──┐
    positions [Tmax] (constant) ── slice(0, n) ─┬─ view [1, 1, n] ──┐                   │
                                                └─ view [n, 1, 1] ──┴─ sub ── add(left) ── clamp(0, K - 1) ──┐
    rows [1, K, 1] (constant: 0 .. K - 1) ────────────────── sub ── abs ── neg ── add(1) ── relu [n, K, n] ──┴─ bmm ──
        ── [n, H, n] ── permute [H, n, n] ── unsqueeze(0) ── [1, H, n, n]

``relu(1 - |k - c|)`` is 1 where ``k`` is the clipped distance and 0 elsewhere: every operand is a small
integer, which float32 holds exactly, so the one-hot is exact, and each score is one product of a query
with a table row plus zeros, as the ``einsum`` computed it (for finite values; a non-finite product makes
its row's zero terms NaN). The one-hot is batched over the queries, shared by the heads, and costs
``K`` multiply-adds per score where the ``einsum`` costs ``D``: this is the banded GEMM that a window
of ``K`` rows allows, and no constant grows with the length beyond the ``Tmax`` positions. The last
``unsqueeze`` gives the 3-D scores the 4-D shape the attention reads; XNNPACK cannot take it (two symbolic
sizes), but :mod:`attention_heads_as_batch`, which runs after this pass, reads the 3-D scores through it.

Why not the Transformer-XL relative shift of Wav2Vec2-Conformer (a zero column, a view to
``[T + 1, 2T - 1]``, a slice and a view back) or DeBERTa's log-bucketed ``gather`` (SEW-D) the same way:
inside one XNNPACK 1.5.1 delegate at a dynamic length a ``[T, T]`` tensor can only come from a ``bmm``
with a fixed inner size or from elementwise broadcasting; no reshape, squeeze, unsqueeze, slice or 1-D
convolution of a tensor with two symbolic sizes is taken, and a 4-D one cannot be brought back to the
3-D a ``bmm`` takes. Picking ``C[i, f(i - j)]`` out of ``[T, K]`` rows that way costs ``K``
multiply-adds a score: fine for a window of ``K`` rows, but the shift's table spans ``2 Tmax - 1``
distances and SEW-D's buckets 512, ``2 Tmax / D`` and ``512 / D`` times the products they replace
(:mod:`relative_position_gather_as_shift` makes SEW-D's gather a GEMM and cheap copies instead).

The pass leaves a contraction as it is, and does nothing on a program without one, when its equation is
not ``bhld,lrd->bhlr``, its query is not a float32 ``[1, H, T, D]`` tensor, its position rows are not an
``embedding`` of a constant table that only it reads, or the index is not ``clamp(j - i + offset, low,
high)`` within the table, computed from the length alone, at every length of the exported range.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from audiodeploy.lowering.passes._graph import (
    ARANGE_OPS,
    METADATA_CHECKS,
    NodeRewritePass,
    Skip,
    add_constant,
    ancestors,
    arguments,
    evaluate,
    insert_op,
    insert_reshape,
    is_pure,
    length_range,
    value,
)

aten = torch.ops.aten

_EQUATION = "bhld,lrd->bhlr"


class ClippedRelativePositionsAsOneHotBmmPass(NodeRewritePass):
    targets = frozenset({aten.einsum.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        equation, operands = node.args[0], node.args[1]
        if not isinstance(equation, str) or equation.replace(" ", "") != _EQUATION or len(operands) != 2:
            return Skip(f"its equation is not {_EQUATION}")
        query, rows = operands
        q = value(query)
        if q is None or q.dtype != torch.float32 or q.dim() != 4 or not statically_known_true(q.shape[0] == 1):
            return Skip("its query is not a float32 [1, H, T, D] tensor")
        if not isinstance(rows, torch.fx.Node) or rows.target != aten.embedding.default:
            return Skip("its position rows are not an embedding lookup")
        table, index = arguments(rows)["weight"], arguments(rows)["indices"]
        if table not in self.constants or self.constants[table].dim() != 2 or self.constants[table].dtype != q.dtype:
            return Skip("the embedding table is not a constant float32 [K, D] tensor")
        if any(user is not node and user.target not in METADATA_CHECKS for user in rows.users):
            return Skip("something else reads the position rows")
        window = self._window(index, len(self.constants[table]))
        if isinstance(window, Skip):
            return window
        offset, low, high, length, longest = window
        heads, head_dim = int(q.shape[1]), int(q.shape[3])
        for check in [user for user in rows.users if user.target in METADATA_CHECKS]:
            self.graph.erase_node(check)  # checks the dtype of the rows the rewrite no longer computes
        return self._one_hot_scores(node, query, table, (offset, low, high), length, longest, heads, head_dim)

    def _window(self, index: torch.fx.Node, table_rows: int) -> tuple[int, int, int, torch.fx.Node, int] | Skip:
        """``(offset, low, high)`` of ``index = clamp(j - i + offset, low, high)``, the node giving its length, and
        the longest length; checked at every length of the range."""
        val = value(index)
        if val is None or val.dtype not in (torch.int64, torch.int32) or val.dim() != 2:
            return Skip("its index is not a 2-D integer tensor")
        n = val.shape[0]
        if not isinstance(n, torch.SymInt) or not statically_known_true(n == val.shape[1]):
            return Skip("its index is not [T, T] with T the dynamic length")
        computation = ancestors([index], expand=lambda x: x.target != aten.sym_size.int)
        if any(
            x.op != "call_function" or not (x.target == aten.sym_size.int or is_pure(x.target)) for x in computation
        ):
            return Skip("its index is computed from more than the length")
        span = length_range(self.exported_program, n)
        if isinstance(span, Skip):
            return span
        symbol, first, last = span
        ends = [arguments(a)["end"] for a in computation if a.target in ARANGE_OPS]
        length = next(
            (e for e in ends if isinstance(e, torch.fx.Node) and statically_known_true(e.meta["val"] == n)), None
        )
        if length is None:
            return Skip("no arange of its index reads its length")
        order = [x for x in index.graph.nodes if x in computation]

        def at(symbol_value: int) -> torch.Tensor:
            known = {
                x: int(x.meta["val"].node.expr.subs(symbol, symbol_value))
                if isinstance(x.meta["val"], torch.SymInt)
                else int(x.meta["val"])
                for x in order
                if x.target == aten.sym_size.int
            }
            return evaluate(order, known)[index]

        longest = at(last)
        low, high = int(longest.min()), int(longest.max())
        steps = longest[0]  # j - i = j on the first row
        inner = [j for j in range(len(steps)) if low < int(steps[j]) < high]
        if not inner or low < 0 or high >= table_rows:
            return Skip("its index is not a clipped distance within the table")
        offset = int(steps[inner[0]]) - inner[0]
        for symbol_value in range(first, last + 1):
            got = at(symbol_value)
            positions = torch.arange(len(got))
            expected = (positions[None, :] - positions[:, None] + offset).clamp(low, high)
            if not torch.equal(got, expected.to(got.dtype)):
                return Skip(f"its index at length {len(got)} is not clamp(j - i + {offset}, {low}, {high})")
        return offset, low, high, length, len(longest)

    def _one_hot_scores(
        self,
        node: torch.fx.Node,
        query: torch.fx.Node,
        table: torch.fx.Node,
        window: tuple[int, int, int],
        length: torch.fx.Node,
        longest: int,
        heads: int,
        head_dim: int,
    ) -> torch.fx.Node:
        ep, graph = self.exported_program, self.graph
        offset, low, high = window

        def op(target, *args: object) -> torch.fx.Node:
            return insert_op(graph, target, args, origin=node)

        positions = add_constant(ep, graph, f"{node.name}_positions", torch.arange(longest, dtype=torch.float32))
        with graph.inserting_after(length):  # the cut reads the length and a constant: before any delegate
            cut = insert_op(graph, aten.slice.Tensor, (positions, 0, 0, length), origin=node)
        keys = op(aten.view.default, cut, [1, 1, -1])
        queries = op(aten.view.default, cut, [-1, 1, 1])
        # Float numbers: an integer one becomes an int64 0-d constant cast outside the delegate.
        distances = op(aten.add.Tensor, op(aten.sub.Tensor, keys, queries), float(offset))
        clipped = op(aten.clamp.default, distances, float(low), float(high))
        table_rows = torch.arange(len(self.constants[table]), dtype=torch.float32).view(1, -1, 1)
        rows = add_constant(ep, graph, f"{node.name}_rows", table_rows)
        distance = op(aten.abs.default, op(aten.sub.Tensor, rows, clipped))
        one_hot = op(aten.relu.default, op(aten.add.Tensor, op(aten.neg.default, distance), 1.0))
        products = op(aten.linear.default, insert_reshape(graph, query, [heads, -1, head_dim], origin=node), table)
        scores = op(aten.bmm.default, op(aten.permute.default, products, [1, 0, 2]), one_hot)
        return op(aten.unsqueeze.default, op(aten.permute.default, scores, [1, 0, 2]), 0)

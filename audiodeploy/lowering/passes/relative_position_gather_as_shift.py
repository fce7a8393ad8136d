"""Write a ``gather`` of scores by relative position as a product with the rows of every distance and a shift.

DeBERTa's disentangled attention (transformers' SEW-D; DeBERTa-v2 text encoders) scores each query against every
position bucket, ``A = bmm(q, Kᵀ)`` of ``[N, T, B]`` for a ``[B, D]`` table of position keys, and then picks for
key ``j`` of query ``i`` the column of their bucket, ``f(i - j)`` (log-bucketed distances, clamped to the table):
``gather(A, -1, index)`` with an integer ``[N, T, T]`` index computed from the length alone. XNNPACK 1.5.1 has no
gather, and ExecuTorch's portable kernel takes about 12 ns an element: at 10 s of audio SEW-D base spent 40% of its
time there (426 of 1,068 ms). Since the index depends on ``i - j`` only (a Toeplitz grid), the scores are::

    before

    q [N, T, D] ──────────────────────────────┐
    K [N, B, D] ── transpose ── Kᵀ [N, D, B] ──┴── bmm ── A [N, T, B] ──┐
    n ── arange ── ... ── index [N, T, T] (f(i - j), from the length alone) ── gather(-1) ── [N, T, T]

    after

    columns [2 Tmax] (constant: f(Tmax - 1 - k)) ── slice(Tmax - T, Tmax + T) ──┐
    K [N, B, D] ──────────────────────────────────────────────── index_select(1) ── [N, 2T, D] ── transpose ──┐
    q [N, T, D] ──────────────────────────────────────────────────────────────────────────────────────────── bmm
        ── E [N, T, 2T] ── view [N, 2T²] ── slice(1, 0, T(2T - 1)) ── view [N, T, 2T - 1] ── slice(2, T - 1) ── [N, T, T]

``E[i, m]`` scores query ``i`` against the bucket of distance ``T - 1 - m``, and row ``i`` of the ``[T, 2T - 1]``
view starts ``i`` elements later in ``E`` than row ``i`` of ``E`` does, so its column ``T - 1 + j`` is
``E[i, T - 1 + j - i]``: distance ``i - j``. Every score is the same product of a query with a table row as before
(equal to eager's up to the GEMM's order of additions). The product costs ``2T`` products a query where the one it
replaces cost ``B`` (the same for SEW-D at 10 s of audio), the row selection copies ``2T`` rows, and the views and
slices (two symbolic sizes: outside the delegate, as the gather was) copy the scores a few times with ``memcpy``:
measured on ``[12, 250, 250]`` scores, 0.7 ms against the gather's 9.8. No constant grows with the length beyond
the ``2 Tmax`` column numbers.

The pass leaves a ``gather`` as it is, and does nothing on a program without one, when it does not gather the last
dimension of a float ``bmm`` that only it reads, the batch ``N`` is symbolic, its index is not ``[N, T, T]`` for
the ``T`` rows of the scores (self-attention), is computed from more than constants and the length, or is not the
same ``f(i - j)`` within the table for every batch entry at the shortest and the longest length of the exported
range (the ends, as :mod:`length_only_values_as_constants` checks a value computed from the length).
"""

from __future__ import annotations

import operator

import sympy
import torch

from audiodeploy.lowering.passes._graph import (
    METADATA_CHECKS,
    NodeRewritePass,
    Skip,
    add_constant,
    ancestors,
    evaluated_at,
    insert_op,
    is_pure,
    length_range,
    sizes_always,
    tensor_of,
    value,
)

aten = torch.ops.aten


class RelativePositionGatherAsShiftPass(NodeRewritePass):
    targets = frozenset({aten.gather.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        scores, dim, index = node.args[0], node.args[1], node.args[2]
        if not isinstance(scores, torch.fx.Node) or scores.target != aten.bmm.default:
            return Skip("it does not gather from a bmm")
        a = tensor_of(scores)
        if not a.dtype.is_floating_point or dim not in (-1, 2):
            return Skip("it does not gather the last dimension of float scores")
        if any(user is not node and user.target not in METADATA_CHECKS for user in scores.users):
            return Skip("something else reads the scores it gathers from")
        rows = a.shape[1]
        i = value(index)
        if i is None or i.dtype not in (torch.int64, torch.int32) or i.dim() != 3:
            return Skip("its index is not a 3-D integer tensor")
        if not isinstance(a.shape[0], int):
            return Skip("its batch size is symbolic")
        if not (
            sizes_always(operator.eq, i.shape[0], a.shape[0])
            and sizes_always(operator.eq, i.shape[1], rows)
            and sizes_always(operator.eq, i.shape[2], rows)
        ):
            return Skip("its index is not [N, T, T] for the T rows of the scores")
        ends = self._range_ends(rows)
        if isinstance(ends, Skip):
            return ends
        symbol, (shortest, longest) = ends
        computation = ancestors([index], expand=lambda n: n not in self.constants and n.target != aten.sym_size.int)
        if any(n not in self.constants and (n.op != "call_function" or not is_pure(n.target)) for n in computation):
            return Skip("its index is computed from more than constants and the length")
        order = [n for n in self.graph.nodes if n in computation]
        buckets = int(a.shape[2])

        def at(symbol_value: int) -> torch.Tensor:
            return evaluated_at(order, index, self.constants, symbol, symbol_value)

        longest_index = at(longest[0])
        distances = _bucket_of_distance(longest_index)
        if isinstance(distances, Skip):
            return distances
        if int(distances.min()) < 0 or int(distances.max()) >= buckets:
            return Skip(f"its index reads outside the {buckets} columns of the scores")
        if shortest != longest and not _is_toeplitz(at(shortest[0]), distances, longest[1]):
            return Skip(
                f"its index at length {shortest[1]} is not the same function of i - j as at length {longest[1]}"
            )
        for check in [user for user in scores.users if user.target in METADATA_CHECKS]:
            self.graph.erase_node(check)
        return self._shifted_scores(node, scores, distances, longest[1])

    def _range_ends(self, rows: int | torch.SymInt) -> tuple[sympy.Symbol | None, list[tuple[int, int]]] | Skip:
        """The length's symbol (None at a fixed length) and, at the shortest and the longest length, the symbol's
        value and the scores' rows there."""
        if not isinstance(rows, torch.SymInt):
            return None, [(0, int(rows))] * 2
        lengths = length_range(self.exported_program, rows)
        if isinstance(lengths, Skip):
            return lengths
        symbol, low, high = lengths
        ends = [(bound, int(rows.node.expr.subs(symbol, bound))) for bound in (low, high)]
        return symbol, sorted(ends, key=lambda end: end[1])

    def _shifted_scores(
        self, node: torch.fx.Node, scores: torch.fx.Node, distances: torch.Tensor, longest: int
    ) -> torch.fx.Node:
        graph = self.graph
        query, keys_t = scores.args[0], scores.args[1]

        def op(target, *args: object) -> torch.fx.Node:
            return insert_op(graph, target, args, origin=node)

        def size(target, x: int | torch.fx.Node, y: int | torch.fx.Node) -> int | torch.fx.Node:
            both_numbers = isinstance(x, int) and isinstance(y, int)
            return target(x, y) if both_numbers else op(target, x, y)

        batch, rows = int(tensor_of(scores).shape[0]), tensor_of(scores).shape[1]
        # The length read from the query: the scores are no longer computed.
        n: int | torch.fx.Node = rows if isinstance(rows, int) else op(aten.sym_size.int, query, 1)
        # Column k of the constant is the bucket of distance Tmax - 1 - k; its last repeats the one before, so that
        # a cut of 2T columns reads one column past the 2T - 1 distances (its scores are never kept).
        steps = torch.arange(2 * longest).clamp(max=2 * longest - 2)
        columns = add_constant(self.exported_program, graph, f"{node.name}_buckets", distances[2 * longest - 2 - steps])
        cut = op(aten.slice.Tensor, columns, 0, size(operator.sub, longest, n), size(operator.add, longest, n))
        keys = _untransposed(keys_t)
        if keys is None:
            keys = op(aten.transpose.int, keys_t, 1, 2)
        selected = op(aten.transpose.int, op(aten.index_select.default, keys, 1, cut), 1, 2)
        everything = op(aten.bmm.default, query, selected)
        flat = op(aten.view.default, everything, [batch, -1])
        span = size(operator.sub, size(operator.mul, 2, n), 1)  # 2T - 1 distances
        # The first T rows of 2T - 1 elements, each starting one element further into its row of E.
        skewed = op(aten.view.default, op(aten.slice.Tensor, flat, 1, 0, size(operator.mul, n, span)), [batch, n, -1])
        return op(aten.slice.Tensor, skewed, 2, size(operator.sub, n, 1), span)


def _untransposed(keys_t: object) -> torch.fx.Node | None:
    """``K`` when ``keys_t`` is ``K`` with its last two dimensions swapped, else None."""
    if not isinstance(keys_t, torch.fx.Node):
        return None
    if keys_t.target == aten.transpose.int and tuple(keys_t.args[1:]) in {(1, 2), (2, 1), (-1, -2), (-2, -1)}:
        return keys_t.args[0]
    if keys_t.target == aten.permute.default and list(keys_t.args[1]) == [0, 2, 1]:
        return keys_t.args[0]
    return None


def _bucket_of_distance(index: torch.Tensor) -> torch.Tensor | Skip:
    """``f(d)`` for ``d = -(T - 1) .. T - 1`` (entry ``d + T - 1``) when ``index[b, i, j] = f(i - j)`` for every
    batch entry ``b``."""
    if not torch.equal(index, index[:1].expand_as(index)):
        return Skip("its index differs between batch entries")
    grid = index[0]
    distances = torch.cat([grid[0].flip(0), grid[1:, 0]])  # f(-(T - 1)) .. f(0) .. f(T - 1)
    if not _is_toeplitz(index, distances, len(grid)):
        return Skip("its index is not a function of i - j")
    return distances


def _is_toeplitz(index: torch.Tensor, distances: torch.Tensor, longest: int) -> bool:
    """Whether every batch entry of ``index`` (``[N, T, T]``) is ``f(i - j)``, read from ``distances`` (``f`` of
    ``-(longest - 1) .. longest - 1``)."""
    positions = torch.arange(index.shape[-1])
    grid = distances[positions[:, None] - positions[None, :] + longest - 1]
    return torch.equal(index, grid.to(index.dtype).expand_as(index))

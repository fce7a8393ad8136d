"""Write a mean or a sum over the last dimensions as a reduction XNNPACK delegates.

ExecuTorch 1.5.1 delegates ``mean.dim`` only as XNNPACK's global average
pooling (a 4-D input averaged over dims 2 and 3 with ``keepdim=True``), and
``sum`` not at all. Layer norm's mean over the channels of ``[1, T, C]``, a
waveform's mean over its samples, or WavLM's gate summing groups of four
projections stay on the portable kernels. This pass rewrites a mean or sum over
the trailing dimensions in a delegated form, depending on whether the number of
reduced elements ``K`` is fixed::

    before

    x [.., K] ── mean(-1, keepdim) ── [.., 1]            (or sum)

    after, K fixed (layer norm over channels, WavLM's gate)

    x [.., K] ── linear(W) ── [.., 1]                    W: a [1, K] constant filled with 1/K (a sum: with 1)

    after, K fixed and above `LINEAR_REDUCTION_LIMIT`, and the kept sizes fixed (a group norm over all of a
    fixed-length [C, L]; with kept sizes that depend on the input length, the linear form above)

    x [.., K] ── view [1, P·S, -1, 1] ── mean([2, 3], keepdim) ── view [P, S] ── linear(W) ── [.., 1]
                                                             W: [1, S] filled with 1/S (a sum: with K/S)

    after, K depends on the input length (a mean only: a waveform's samples, group norm over time)

    x [.., K] ── view [1, P, -1, 1] ── mean([2, 3], keepdim) ── view [.., 1]

    a reduction over other dimensions (a classifier's mean over the frames of [1, T, C]) is the same after a
    permute that moves the reduced dimensions innermost, which XNNPACK delegates:

    x [1, T, C] ── permute [0, 2, 1] ── [1, C, T] ── (as above) ── [1, C]

The linear form needs no layout change; its weight is a lifted constant (one per
reduction; the program stores identical bytes once). A long fixed reduction is pooled
instead, each row split into ``S`` channels (a divisor of ``K``, at most `POOLING_SPLIT`)
that XNNPACK's pooling sums in vector lanes. The pooling form needs the leading
dimensions (``P`` elements) to be fixed so that each reshape has at most one
inferred size; XNNPACK transposes the pooling input to channels-last.

The pass leaves a reduction as it is, and does nothing on a program without one, when
it is already a 4-D mean over dims 2 and 3, when it converts the dtype or the input is not float32, when it is a
sum over a number of elements that depends on the input length (a sum has no
pooling form), or when the dimensions kept depend on the input length in a way a
single inferred reshape size cannot express.
"""

from __future__ import annotations

import math

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    is_static,
    static_view_sizes,
    tensor_of,
    value,
)

aten = torch.ops.aten

LINEAR_REDUCTION_LIMIT = 16_384
"""The most elements a fixed-size reduction sums as a linear. XNNPACK packs a linear's weight in tiles of 8 to 64
output channels, so a one-row weight is stored and read several times over: nothing beside layer norm's hundreds
of channels, but over EnCodec's group norm of [32, 48000] a 6 MiB row took about 100 MiB packed and 9 ms a call,
where pooling takes well under a millisecond."""
POOLING_SPLIT = 64
"""Pooling channels a long fixed-size reduction is split into (a divisor of its size, at most this many)."""


class SumAndMeanAsXnnpackReductionsPass(NodeRewritePass):
    targets = frozenset({aten.mean.dim, aten.sum.dim_IntList})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        val = value(x)
        if val is None or val.dtype != torch.float32 or given["dtype"] is not None:
            return Skip("not a float32 reduction in its input's own dtype")
        rank = val.dim()
        dims = sorted(d % rank for d in (range(rank) if not given["dim"] else given["dim"]))
        keepdim = bool(given["keepdim"])
        is_mean = node.target == aten.mean.dim
        if is_mean and rank == 4 and dims == [2, 3] and keepdim:
            return Skip("already XNNPACK's global average pooling")
        kept = [d for d in range(rank) if d not in dims]
        lead = [val.shape[d] for d in kept]
        count = math.prod(val.shape[d] for d in dims)
        out_sizes = static_view_sizes(list(node.meta["val"].shape))
        if out_sizes is None:
            return Skip("two or more of its output sizes depend on the input length")
        if dims != list(range(rank - len(dims), rank)):
            x = insert_op(self.graph, aten.permute.default, (x, kept + dims), origin=node)
        # Pooled in split rows only where the rows are fixed too: its views need fixed leading sizes.
        if is_static(count) and (int(count) <= LINEAR_REDUCTION_LIMIT or not is_static(math.prod(lead))):
            reduced = self._as_linear(node, x, lead, int(count), len(dims), 1.0 / int(count) if is_mean else 1.0)
        elif is_static(count):
            reduced = self._as_split_pooling(node, x, lead, int(count), is_mean)
        elif is_mean:
            reduced = self._as_pooling(node, x, lead)
        else:
            return Skip("a sum over a length that depends on the input")
        if isinstance(reduced, Skip):
            return reduced
        if list(tensor_of(reduced).shape) != list(node.meta["val"].shape):
            reduced = insert_op(self.graph, aten.view.default, (reduced, out_sizes), origin=node)
        return reduced

    def _as_linear(
        self, node: torch.fx.Node, x: torch.fx.Node, lead: list, count: int, reduced_dims: int, weight: float
    ) -> torch.fx.Node | Skip:
        if reduced_dims > 1:
            sizes = static_view_sizes(lead + [count])
            if sizes is None:
                return Skip("two or more of its kept sizes depend on the input length")
            x = insert_op(self.graph, aten.view.default, (x, sizes), origin=node)
        weights = add_constant(
            self.exported_program, self.graph, f"reduction_weight_{count}", torch.full((1, count), weight)
        )
        return insert_op(self.graph, aten.linear.default, (x, weights), origin=node)

    def _as_pooling(self, node: torch.fx.Node, x: torch.fx.Node, lead: list, split: int = 1) -> torch.fx.Node | Skip:
        planes = math.prod(lead)
        if not is_static(planes):
            return Skip("a mean over a dynamic length whose kept sizes also depend on the input length")
        x = insert_op(self.graph, aten.view.default, (x, [1, int(planes) * split, -1, 1]), origin=node)
        return insert_op(self.graph, aten.mean.dim, (x, [2, 3], True), origin=node)

    def _as_split_pooling(
        self, node: torch.fx.Node, x: torch.fx.Node, lead: list, count: int, is_mean: bool
    ) -> torch.fx.Node | Skip:
        # Each reduced row splits into `split` pooling channels (XNNPACK's pooling runs across channels in vector
        # lanes); a small linear then reduces the channels' means.
        split = math.gcd(count, POOLING_SPLIT)
        pooled = self._as_pooling(node, x, lead, split)
        if isinstance(pooled, Skip):
            return pooled
        rows = insert_op(self.graph, aten.view.default, (pooled, [int(math.prod(lead)), split]), origin=node)
        return self._as_linear(node, rows, [], split, 1, 1.0 / split if is_mean else count / split)

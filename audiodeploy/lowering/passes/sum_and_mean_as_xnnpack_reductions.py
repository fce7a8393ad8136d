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

    after, K depends on the input length (a mean only: a waveform's samples, group norm over time)

    x [.., K] ── view [1, P, -1, 1] ── mean([2, 3], keepdim) ── view [.., 1]

    a reduction over other dimensions (a classifier's mean over the frames of [1, T, C]) is the same after a
    permute that moves the reduced dimensions innermost, which XNNPACK delegates:

    x [1, T, C] ── permute [0, 2, 1] ── [1, C, T] ── (as above) ── [1, C]

The linear form needs no layout change; its weight is a lifted constant (one per
reduction; the program stores identical bytes once). The pooling form needs the leading
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
        if is_static(count):
            reduced = self._as_linear(node, x, lead, int(count), len(dims), 1.0 / int(count) if is_mean else 1.0)
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

    def _as_pooling(self, node: torch.fx.Node, x: torch.fx.Node, lead: list) -> torch.fx.Node | Skip:
        planes = math.prod(lead)
        if not is_static(planes):
            return Skip("a mean over a dynamic length whose kept sizes also depend on the input length")
        x = insert_op(self.graph, aten.view.default, (x, [1, int(planes), -1, 1]), origin=node)
        return insert_op(self.graph, aten.mean.dim, (x, [2, 3], True), origin=node)

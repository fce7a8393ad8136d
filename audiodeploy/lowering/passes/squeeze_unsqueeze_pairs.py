"""Drop a squeeze and the unsqueeze that undoes it, with only elementwise ops between them.

Rewrites that treat a signal ``[N, C, T]`` as an image of one row ``[N, C, 1, T]``
(:mod:`strided_conv_as_gemm`, the per-channel group norm of
:mod:`decompose_normalization`) start with ``unsqueeze(x, 2)`` and end with
``squeeze(y, 2)``, each on its own. Where one feeds the next, XNNPACK keeps the
image in its channels-last layout, but a ``squeeze`` or ``unsqueeze`` is a
contiguous-layout op to it: each pair costs two transposes of the whole signal
(about 60 ms at 10 s of audio in wav2vec2-base's feature encoder). The pass
applies the elementwise ops between them to the image instead::

    before

    y [N, C, 1, T] ── squeeze(2) ── gelu ── unsqueeze(2) ── conv2d ──

    after

    y [N, C, 1, T] ── gelu ── conv2d ──

The ops between must be elementwise functions of one tensor, each read only by
the next (otherwise the squeezed values are still needed, and the ops would run
twice). The pass leaves a pair as it is, and does nothing on a program without
one, when the squeezed dimension is not of size one or the unsqueeze puts it
back elsewhere.
"""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassResult

from audiodeploy.lowering.passes._graph import ExportedProgramPass, insert_op, replace_node, rewrite_done, value

aten = torch.ops.aten

ELEMENTWISE = {
    aten.gelu.default,
    aten.relu.default,
    aten.leaky_relu.default,
    aten.silu.default,
    aten.tanh.default,
    aten.sigmoid.default,
    aten.hardtanh.default,
    aten.elu.default,
}
"""Ops of one tensor (and scalars) that compute each element from that element alone."""


class SqueezeUnsqueezePairsPass(ExportedProgramPass):
    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != aten.unsqueeze.default:
                continue
            chain, squeezed = elementwise_chain(node.args[0])
            if not _undoes(node, squeezed):
                continue
            image = squeezed.args[0]
            with graph.inserting_before(node):
                for op in reversed(chain):
                    image = insert_op(graph, op.target, (image, *op.args[1:]), dict(op.kwargs), origin=op)
            replace_node(self.exported_program, node, image)
            modified = True
        if modified:
            rewrite_done(self.exported_program)
        return PassResult(graph_module, modified)


def elementwise_chain(node: torch.fx.Node) -> tuple[list[torch.fx.Node], torch.fx.Node]:
    """The elementwise ops, last first, read only by each other from ``node`` back; and what the first reads."""
    chain = []
    while node.op == "call_function" and node.target in ELEMENTWISE and len(node.users) == 1:
        chain.append(node)
        node = node.args[0]
    return chain, node


def _undoes(unsqueeze: torch.fx.Node, squeezed: torch.fx.Node) -> bool:
    """Whether ``unsqueeze`` puts back the size-one dimension ``squeezed`` removed."""
    if squeezed.op != "call_function" or squeezed.target != aten.squeeze.dim:
        return False
    image, dim = value(squeezed.args[0]), squeezed.args[1]
    if image is None or image.dim() != value(unsqueeze).dim():
        return False
    dim %= image.dim()
    return image.shape[dim] == 1 and unsqueeze.args[1] % image.dim() == dim

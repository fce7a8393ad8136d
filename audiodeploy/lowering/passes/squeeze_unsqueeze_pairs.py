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

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, elementwise_chain, insert_op, tensor_of, value

aten = torch.ops.aten


class SqueezeUnsqueezePairsPass(NodeRewritePass):
    targets = frozenset({aten.unsqueeze.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        chain, squeezed = elementwise_chain(node.args[0])
        if not _undoes(node, squeezed):
            return Skip("it does not put back a dimension squeezed before it (through elementwise ops)")
        image = squeezed.args[0]
        for op in reversed(chain):
            image = insert_op(self.graph, op.target, (image, *op.args[1:]), dict(op.kwargs), origin=op)
        return image


def _undoes(unsqueeze: torch.fx.Node, squeezed: torch.fx.Node) -> bool:
    """Whether ``unsqueeze`` puts back the size-one dimension ``squeezed`` removed."""
    if squeezed.op != "call_function" or squeezed.target != aten.squeeze.dim:
        return False
    image, dim = value(squeezed.args[0]), squeezed.args[1]
    if image is None or image.dim() != tensor_of(unsqueeze).dim():
        return False
    dim %= image.dim()
    return image.shape[dim] == 1 and unsqueeze.args[1] % image.dim() == dim

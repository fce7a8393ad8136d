"""Write the selection of the one entry of a size-1 dimension as a squeeze.

``x[0]`` on a batch of one (Mimi's ``torch.cdist(x[None], codebook[None])[0]``, a model's ``logits[0]``) exports
as ``aten.select``, which ExecuTorch 1.5.1's XNNPACK partitioner has no config for, so it runs on a portable
kernel and cuts the delegate. Where the dimension has one entry the selection reads every element in order: it is
a squeeze, which :mod:`.static_reshape` writes as a delegated view::

    before                                   after

    x [.., 1, ..] ── select(d, 0 or -1) ──   x [.., 1, ..] ── squeeze([d]) ──

The pass leaves a selection as it is, and does nothing on a program without one, unless its dimension has one
entry (a fixed size).
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, arguments, insert_op, value

aten = torch.ops.aten


class UnitSelectAsSqueezePass(NodeRewritePass):
    targets = frozenset({aten.select.int})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x = given["input"]
        val = value(x)
        if val is None:
            return Skip("its input is not a tensor")
        dim = given["dim"] % val.dim()
        if not isinstance(val.shape[dim], int) or val.shape[dim] != 1:
            return Skip(f"dimension {dim} has {val.shape[dim]} entries, not one")
        return insert_op(self.graph, aten.squeeze.dims, (x, [dim]), origin=node)

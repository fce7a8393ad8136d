"""Drop ``detach`` and ``alias``: at inference each is its input.

A straight-through estimator (DAC's ``projected + (quantized - projected).detach()``, and the ``.detach()`` of
its training losses) exports as ``aten.detach``, and a slice of a whole dimension (EnCodec's ``padded[..., :end]``
when no padding was added) as ``aten.alias``; edge lowering writes both as ``alias_copy``. ExecuTorch 1.5.1's
XNNPACK partitioner has no config for ``alias_copy``, so each one copies its tensor on a portable kernel and cuts
the delegate in two. A program runs without autograd: the value is its input's::

    before                         after

    x ── detach ── y               x ── y
    x ── alias ── y

The pass leaves a ``detach`` or an ``alias`` as it is, and does nothing on a program without one, when the program
returns it
directly (the output would then be another value's storage, or the program's input).
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip

aten = torch.ops.aten


class DropAliasesPass(NodeRewritePass):
    targets = frozenset({aten.detach.default, aten.alias.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if any(user.op == "output" for user in node.users):
            return Skip("the program returns it")
        source = node.args[0]
        assert isinstance(source, torch.fx.Node)
        return source

"""Drop ``detach``, ``alias`` and a concatenation of one tensor: at inference each is its input.

A straight-through estimator (DAC's ``projected + (quantized - projected).detach()``, and the ``.detach()`` of
its training losses) exports as ``aten.detach``, and a slice of a whole dimension (EnCodec's ``padded[..., :end]``
when no padding was added) as ``aten.alias``; edge lowering writes both as ``alias_copy``. ExecuTorch 1.5.1's
XNNPACK partitioner has no config for ``alias_copy``, so each one copies its tensor on a portable kernel and cuts
the delegate in two. A concatenation of one tensor (a residual quantizer's ``torch.cat`` of its codes when it
has one codebook, as Mimi's semantic one) is a copy, which XNNPACK declines as a concatenation of fewer than two.
A program runs without autograd and the graph is functional: the value is its input's::

    before                         after

    x ── detach ── y               x ── y
    x ── alias ── y
    x ── cat([x]) ── y

The pass leaves a ``detach``, an ``alias`` or a concatenation as it is, and does nothing on a program without one,
when the program returns it directly (the output would then be another value's storage, or the program's input),
or when the concatenation joins more than one tensor.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip

aten = torch.ops.aten


class DropAliasesPass(NodeRewritePass):
    targets = frozenset({aten.detach.default, aten.alias.default, aten.cat.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if any(user.op == "output" for user in node.users):
            return Skip("the program returns it")
        source = node.args[0]
        if node.target == aten.cat.default:
            if not isinstance(source, (list, tuple)) or len(source) != 1:
                return Skip("a concatenation of more than one tensor")
            (source,) = source
        assert isinstance(source, torch.fx.Node)
        return source

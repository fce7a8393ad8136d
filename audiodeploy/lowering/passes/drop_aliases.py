"""Drop ``detach``, ``alias``, a concatenation of one tensor, a repeat once, a padding by nothing and a reshape to the
shape a tensor has: at inference each is its input.

A straight-through estimator (DAC's ``projected + (quantized - projected).detach()``, and the ``.detach()`` of
its training losses) exports as ``aten.detach``, and a slice of a whole dimension (EnCodec's ``padded[..., :end]``
when no padding was added) as ``aten.alias``; edge lowering writes both as ``alias_copy``. ExecuTorch 1.5.1's
XNNPACK partitioner has no config for ``alias_copy``, so each one copies its tensor on a portable kernel and cuts
the delegate in two. A concatenation of one tensor (a residual quantizer's ``torch.cat`` of its codes when it
has one codebook, as Mimi's semantic one) is a copy, which XNNPACK declines as a concatenation of fewer than two.
So is a ``repeat`` once along every dimension (SEW-D repeats its position keys over ``batch // heads``, 1 in a
program of one utterance), which XNNPACK 1.5.1 has no config for. A padding by zero on every side (Mimi's causal
padding before each kernel-1 convolution: its causal padding, kernel minus stride, is 0) copies the whole tensor, and it stands
between two convolutions that :mod:`conv_chains_as_images` would otherwise keep channels-last. So does a reshape to
the shape its input has (DAC's Snake activation flattens ``[N, C, ...]`` to ``[N, C, T]`` and back, on ``[N, C, T]``),
which is a contiguous-layout op to XNNPACK. A program runs without autograd and the graph is functional: the value
is its input's::

    before                         after

    x ── detach ── y               x ── y
    x ── alias ── y
    x ── cat([x]) ── y
    x ── repeat(1, ..., 1) ── y
    x ── pad([0, ..., 0]) ── y         (any mode; constant_pad_nd too)
    x ── view(x.shape) ── y            (reshape too)

The pass leaves a ``detach``, an ``alias``, a concatenation or a repeat as it is, and does nothing on a program
without one, when the program returns it directly (the output would then be another value's storage, or the
program's input), when the concatenation joins more than one tensor, when the repeat repeats a dimension or adds
one, when the padding's amounts are not all the number 0, or when the reshape's shape differs from its input's at
some length.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import RESHAPES, NodeRewritePass, Skip, same_shape, tensor_of

aten = torch.ops.aten


class DropAliasesPass(NodeRewritePass):
    targets = frozenset(
        {
            aten.detach.default,
            aten.alias.default,
            aten.cat.default,
            aten.repeat.default,
            aten.pad.default,
            aten.constant_pad_nd.default,
            *RESHAPES,
        }
    )

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if any(user.op == "output" for user in node.users):
            return Skip("the program returns it")
        source = node.args[0]
        if node.target == aten.cat.default:
            if not isinstance(source, (list, tuple)) or len(source) != 1:
                return Skip("a concatenation of more than one tensor")
            (source,) = source
        if node.target == aten.repeat.default:
            repeats = node.args[1]
            assert isinstance(source, torch.fx.Node)
            if len(repeats) != source.meta["val"].dim() or any(not (isinstance(r, int) and r == 1) for r in repeats):
                return Skip(f"repeat{tuple(repeats)} repeats a dimension or adds one")
        if node.target in (aten.pad.default, aten.constant_pad_nd.default):
            amounts = node.args[1]
            if any(not (isinstance(amount, int) and amount == 0) for amount in amounts):
                return Skip(f"it pads by {list(amounts)}")
        if node.target in RESHAPES and not same_shape(tensor_of(node), tensor_of(source)):
            return Skip("a reshape to another shape")
        assert isinstance(source, torch.fx.Node)
        return source

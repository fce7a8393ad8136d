"""Write the pieces of an ``unbind`` as one ``select`` each.

Iterating over a tensor (``for indices in codes``: EnCodec's, X-Codec's and Higgs Audio's quantizers look each
codebook's codes up this way) exports as ``aten.unbind`` and a ``getitem`` per piece. No XNNPACK config takes an
``unbind``, and an op that starts from a list of tensors is out of reach of the passes that move a cast or take a
selection into the delegate (:mod:`.casts_before_data_movement`, :mod:`.channel_selections_as_convolutions`). Each
piece is the selection of one index, which those passes take::

    before                                    after

    x [.., Q, ..] ── unbind(d) ── getitem(i) ──     x [.., Q, ..] ── select(d, i) ──

Those quantizers iterate over ``codes.transpose(0, 1)`` (``[Q, B, T]`` from ``[B, Q, T]``). Where the dimensions
left after the selection keep their order, a piece of a transposed (or permuted) tensor is the selection of the
dimension it came from in the tensor itself, and the transpose is left unread::

    codes [B, Q, T] ── transpose(0, 1) ── unbind(0) ── getitem(i) ──     codes [B, Q, T] ── select(1, i) ──

That puts the codebooks back in the channels, where a cast moved to the input leaves a slice of channels.
The pass leaves an ``unbind`` as it is, and does nothing on a program without one, unless every use of it is a
``getitem`` of one piece.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Rewrite, Skip, arguments, insert_op, tensor_of

aten = torch.ops.aten


class UnbindAsSelectsPass(NodeRewritePass):
    targets = frozenset({aten.unbind.int})

    def rewrite(self, node: torch.fx.Node) -> Rewrite:
        pieces = list(node.users)
        if not all(user.target is operator.getitem and isinstance(user.args[1], int) for user in pieces):
            return Skip("its list of pieces is read whole, not piece by piece")
        given = arguments(node)
        source, dim = _untransposed(given["input"], given["dim"])
        replacements = {}
        for piece in pieces:
            with self.graph.inserting_before(piece):
                selection = (source, dim, piece.args[1])
                replacements[piece] = insert_op(self.graph, aten.select.int, selection, origin=piece)
        return replacements


def _untransposed(x: torch.fx.Node, dim: int) -> tuple[torch.fx.Node, int]:
    """The tensor and dimension to select from for a piece of `x` along `dim`: those of the tensor `x` transposes
    when the other dimensions keep their order; else `x` and `dim`."""
    rank = tensor_of(x).dim()
    dim %= rank
    if x.target == aten.transpose.int:
        first, second = (d % rank for d in x.args[1:3])
        order = list(range(rank))
        order[first], order[second] = order[second], order[first]
    elif x.target == aten.permute.default:
        order = [d % rank for d in x.args[1]]
    else:
        return x, dim
    rest = order[:dim] + order[dim + 1 :]
    if rest != sorted(rest):
        return x, dim
    return x.args[0], order[dim]

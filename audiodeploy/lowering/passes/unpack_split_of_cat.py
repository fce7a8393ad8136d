"""Take the pieces of a split straight from the concatenation they undo.

``torch.nn.functional.multi_head_attention_forward`` (WavLM's attention) packs
the q, k and v biases with ``torch.cat`` and splits them again inside: each
linear's bias is then computed, shared by three GEMMs, and XNNPACK declines all
three. Splitting a concatenation back along the same boundaries is the identity,
so each piece is replaced by the tensor that went in::

    before                                     after

    q_bias ─┐                                  q_bias ── linear (q)
    k_bias ─┼─ cat ── split ─┬─ [0] ── linear  k_bias ── linear (k)
    v_bias ─┘                ├─ [1] ── linear  v_bias ── linear (v)
                             └─ [2] ── linear

Also for a ``slice`` that covers exactly one input of the ``cat``. Nothing is
computed or stored anew: the program only shrinks. The pass does nothing when
the split's boundaries differ from the concatenation's, when it splits along
another dimension, or when shapes are dynamic along that dimension.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip

aten = torch.ops.aten


def _static_sizes(nodes: list[torch.fx.Node], dim: int) -> list[int] | None:
    sizes = []
    for node in nodes:
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or not isinstance(value.shape[dim], int):
            return None
        sizes.append(value.shape[dim])
    return sizes


def _cat_pieces(cat: torch.fx.Node) -> tuple[int, list[torch.fx.Node], list[int]] | None:
    """(normalized dim, inputs, offsets of each input along dim), for a static cat."""
    inputs = list(cat.args[0])
    value = cat.meta.get("val")
    if not isinstance(value, torch.Tensor) or not all(isinstance(i, torch.fx.Node) for i in inputs):
        return None
    dim = (cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)) % value.dim()
    sizes = _static_sizes(inputs, dim)
    if sizes is None:
        return None
    offsets = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    return dim, inputs, offsets


def _split_boundaries(split: torch.fx.Node, total: int) -> list[int]:
    if split.target == aten.split.Tensor:
        size = split.args[1]
        return list(range(0, total, size)) + [total]
    sizes = split.args[1]
    return [sum(sizes[:i]) for i in range(len(sizes) + 1)]


def _split_dim(node: torch.fx.Node, rank: int) -> int:
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    return dim % rank


class UnpackSplitOfCatPass(NodeRewritePass):
    targets = frozenset({aten.split.Tensor, aten.split_with_sizes.default, aten.slice.Tensor})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | dict[torch.fx.Node, torch.fx.Node] | Skip:
        """The cat input each piece of ``node`` equals, in place of that piece."""
        cat = node.args[0]
        if not (isinstance(cat, torch.fx.Node) and cat.target == aten.cat.default):
            return Skip("it does not cut a cat")
        pieces = _cat_pieces(cat)
        if pieces is None:
            return Skip("the cat's input sizes along its dimension are not all fixed")
        dim, inputs, offsets = pieces
        rank = cat.meta["val"].dim()
        if node.target == aten.slice.Tensor:
            return _slice_piece(node, dim, rank, inputs, offsets)
        if _split_dim(node, rank) != dim or _split_boundaries(node, offsets[-1]) != offsets:
            return Skip("its pieces are not the cat's inputs")
        equal = {user: inputs[user.args[1]] for user in node.users if user.target is operator.getitem}
        return equal or Skip("its pieces are not read by getitem")


def _slice_piece(
    node: torch.fx.Node, dim: int, rank: int, inputs: list[torch.fx.Node], offsets: list[int]
) -> torch.fx.Node | Skip:
    """The cat input a slice of the cat equals."""
    slice_dim = (node.args[1] if len(node.args) > 1 else 0) % rank
    start = node.args[2] if len(node.args) > 2 else 0
    end = node.args[3] if len(node.args) > 3 else offsets[-1]
    step = node.args[4] if len(node.args) > 4 else 1
    if slice_dim != dim or step != 1:
        return Skip("it slices another dimension, or with a step")
    for index in range(len(inputs)):
        if (start, min(end, offsets[-1])) == (offsets[index], offsets[index + 1]):
            return inputs[index]
    return Skip("its bounds are not one of the cat's inputs")

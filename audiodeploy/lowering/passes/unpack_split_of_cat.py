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
from torch.fx.passes.infra.pass_base import PassResult

from audiodeploy.lowering.passes._graph import ExportedProgramPass

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


class UnpackSplitOfCatPass(ExportedProgramPass):
    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        rewired = 0
        for node in list(graph_module.graph.nodes):
            rewired += _rewire_pieces(node)
        if rewired:
            graph_module.graph.eliminate_dead_code()
            graph_module.recompile()
        return PassResult(graph_module, rewired > 0)


def _rewire_pieces(node: torch.fx.Node) -> int:
    """Point the users of ``node``'s pieces at the cat inputs they equal; how many were rewired."""
    if node.op != "call_function" or not node.args:
        return 0
    cat = node.args[0]
    if not (isinstance(cat, torch.fx.Node) and cat.target == aten.cat.default):
        return 0
    pieces = _cat_pieces(cat)
    if pieces is None:
        return 0
    dim, inputs, offsets = pieces
    rank = cat.meta["val"].dim()
    rewired = 0
    if node.target in (aten.split.Tensor, aten.split_with_sizes.default):
        if _split_dim(node, rank) != dim or _split_boundaries(node, offsets[-1]) != offsets:
            return 0
        for user in list(node.users):
            if user.target is operator.getitem:
                user.replace_all_uses_with(inputs[user.args[1]])
                rewired += 1
    elif node.target == aten.slice.Tensor:
        slice_dim = (node.args[1] if len(node.args) > 1 else 0) % rank
        start = node.args[2] if len(node.args) > 2 else 0
        end = node.args[3] if len(node.args) > 3 else offsets[-1]
        step = node.args[4] if len(node.args) > 4 else 1
        if slice_dim != dim or step != 1:
            return 0
        for index in range(len(inputs)):
            if (start, min(end, offsets[-1])) == (offsets[index], offsets[index + 1]):
                node.replace_all_uses_with(inputs[index])
                return 1
    return rewired

"""Run multi-head attention of one utterance as 3-D batched matmuls, heads as the batch.

Eager attention computes ``softmax(q @ kᵀ * scale) @ v`` on ``[1, H, T, D]``
tensors. Edge lowering turns each 4-D ``matmul`` into ``expand``, ``view`` to
``[H, T, D]``, ``bmm``, and ``view`` back to ``[1, H, T, T]``: with a dynamic
length ``T`` that last view has two symbolic sizes, which XNNPACK's reshape
cannot express, and ExecuTorch 1.5.1 declines it together with the symbolic
``expand_copy``: every attention is cut out of the delegate. With a batch of one,
the leading 1 carries nothing, so this pass drops it over the whole attention
block and keeps it 3-D from the head split to the head merge::

    before
    q [1, T, C] ── view [1, T, H, D] ── transpose(1, 2) ───────────────────┐
    k [1, T, C] ── view [1, T, H, D] ── transpose(1, 2) ── transpose(2, 3) ─┴─ matmul [1, H, T, T]
        ── mul(scale) ── softmax(-1) ─────────────────────────────┐
    v [1, T, C] ── view [1, T, H, D] ── transpose(1, 2) ───────────┴─ matmul [1, H, T, D]
        ── transpose(1, 2) ── clone ── view [1, T, C]

    after
    q [1, T, C] ── view [T, H, D] ── transpose(0, 1) ───────────────────┐
    k [1, T, C] ── view [T, H, D] ── transpose(0, 1) ── transpose(1, 2) ─┴─ bmm [H, T, T]
        ── mul(scale) ── softmax(-1) ──────────────────────────┐
    v [1, T, C] ── view [T, H, D] ── transpose(0, 1) ───────────┴─ bmm [H, T, D]
        ── transpose(0, 1) ── clone ── view [1, T, C]

Every reshape then has one size that depends on ``T`` (see
:mod:`~audiodeploy.lowering.passes.static_reshape`), and ``bmm``, ``permute``,
``mul`` and ``softmax`` are delegated.

The region rewritten starts at a 4-D ``matmul`` whose operands and result have a
leading size of 1 and the same second size (no broadcasting), and grows through
the ops that leave dimension 0 alone: ``transpose``/``permute`` not moving it,
``softmax`` over another dimension, ``clone``, ``slice``, ``cat`` and constant padding of the other dimensions, a
reshape from one shape with the leading 1 to another (a Transformer-XL relative shift's skew: where its view has
two sizes that depend on the length, that view and the slices around it run outside the delegate, on the 3-D
tensors, as they ran on the 4-D ones, and the products and the softmax around them stay batched matmuls inside it),
and arithmetic with a Python scalar, with another such 4-D tensor (an attention
mask added to the scores, and what computes it) or with a tensor of at most two dimensions (a mask of
``[queries, keys]``, which broadcasts against the 3-D region as against the 4-D one, and is read as it is). A tensor entering the region is
reshaped without its leading 1, except a constant, which is stored without it, and an
``unsqueeze(x, 0)``, whose ``x`` is read as it is; a
result leaving it goes to a reshape, or is given its leading 1 back. The pass leaves a
region as it is, and does nothing on a program without one (no 4-D matmul, or a
batch larger than one), when one of those reshapes would need two sizes that
depend on the input length.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    ARITHMETIC,
    CONSTANT_PADDINGS,
    RESHAPES,
    NodeRewritePass,
    Skip,
    add_constant,
    constant_padding,
    insert_op,
    insert_reshape,
    static_view_sizes,
    tensor_of,
    value,
)

aten = torch.ops.aten

_ARITHMETIC = {
    aten.mul.Tensor,
    aten.div.Tensor,
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Scalar,
    aten.div.Scalar,
    aten.add.Scalar,
    aten.sub.Scalar,
}


def _unit_batch_4d(node: object) -> bool:
    val = value(node) if isinstance(node, torch.fx.Node) else None
    return val is not None and val.dim() == 4 and isinstance(val.shape[0], int) and val.shape[0] == 1


def _broadcasts_over_last_two(node: object) -> bool:
    """A tensor of at most two dimensions: it broadcasts against the 3-D region as against the 4-D one."""
    val = value(node) if isinstance(node, torch.fx.Node) else None
    return val is not None and val.dim() <= 2


def _is_batched_matmul(node: torch.fx.Node) -> bool:
    if node.target != aten.matmul.default or not all(_unit_batch_4d(n) for n in (node, *node.args[:2])):
        return False
    a, b = (tensor_of(n) for n in node.args[:2])
    return isinstance(a.shape[1], int) and a.shape[1] == b.shape[1]


def _keeps_batch_dim(node: torch.fx.Node) -> bool:
    """An op the region may contain besides matmul: it leaves dimension 0 alone."""
    if node.op != "call_function" or not _unit_batch_4d(node):
        return False
    target, args = node.target, node.args
    if target == aten.cat.default:
        return all(_unit_batch_4d(t) for t in args[0]) and len(args) > 1 and args[1] % 4 != 0
    if not _unit_batch_4d(args[0]):
        return False
    if target == aten.transpose.int:
        return all(d % 4 != 0 for d in args[1:3])
    if target == aten.permute.default:
        return args[1][0] % 4 == 0
    if target in (aten.softmax.int, aten._softmax.default):
        return args[1] % 4 != 0
    if target == aten.clone.default:
        return True
    if target == aten.slice.Tensor:
        return args[1] % 4 != 0
    if target in RESHAPES:
        return True  # both shapes lead with the 1: the rest reshapes alone
    if (padding := constant_padding(node)) is not None:
        return len(padding[1]) <= 6  # F.pad's pairs from the last dimension: dimension 0 is not padded
    if target in _ARITHMETIC:
        if len(args) != 2 or node.kwargs:
            return False
        return isinstance(args[1], (int, float)) or (
            target in ARITHMETIC and (_unit_batch_4d(args[1]) or _broadcasts_over_last_two(args[1]))
        )
    return target == aten.matmul.default and _is_batched_matmul(node)


class AttentionHeadsAsBatchPass(NodeRewritePass):
    def candidates(self) -> list[torch.fx.Node]:
        """The first batched matmul of each region, the regions grown before any is rewritten."""
        self._regions: dict[torch.fx.Node, set[torch.fx.Node]] = {}
        claimed: set[torch.fx.Node] = set()
        for node in self.graph.nodes:
            if node not in claimed and node.op == "call_function" and _is_batched_matmul(node):
                self._regions[node] = _grow_region(node, claimed)
                claimed |= self._regions[node]
        return list(self._regions)

    def rewrite(self, seed: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node] | Skip:
        """The region of ``seed`` on 3-D tensors: what leaves it, reshaped back or given its leading 1 again."""
        ep, graph = self.exported_program, self.graph
        order = [n for n in graph.nodes if n in self._regions[seed]]
        region = set(order)
        entries = {a for n in order for a in n.all_input_nodes if a not in region and value(a) is not None}
        constant_entries = {e for e in entries if e in self.constants}
        # A metadata check (dtype, device) on a region's node checks what the rewrite keeps: dropped with the node.
        checks = [u for n in order for u in n.users if u.target is aten._assert_tensor_metadata.default]
        exits = {n: [u for u in n.users if u not in region and u not in checks] for n in order}
        # Plan every reshape first: the region is rewritten whole or not at all.
        already_3d = {e: source for e in entries if (source := _without_leading_one(e)) is not None}
        already_3d.update({e: e for e in entries if _broadcasts_over_last_two(e)})
        entry_sizes = {
            e: static_view_sizes(tensor_of(e).shape[1:]) for e in entries - constant_entries - already_3d.keys()
        }
        exit_sizes = {
            n: static_view_sizes(tensor_of(n).shape)
            for n, users in exits.items()
            if any(not _reshapes(u, n) for u in users)
        }
        if any(s is None for s in (*entry_sizes.values(), *exit_sizes.values())):
            return Skip("a reshape into or out of the region would have two sizes that depend on the input")
        sizes = {node: s for node, s in (*entry_sizes.items(), *exit_sizes.items()) if s is not None}

        for check in checks:
            graph.erase_node(check)
        squeezed: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in order:
            with graph.inserting_before(node):
                for entry in node.all_input_nodes:
                    if entry in constant_entries and entry not in squeezed:
                        self.release_constant(entry)  # what was read as 4-D is now stored as 3-D
                        squeezed[entry] = add_constant(ep, graph, f"{entry.name}_3d", self.constants[entry].squeeze(0))
                    elif entry in already_3d:
                        squeezed[entry] = already_3d[entry]
                    elif entry in entries and entry not in squeezed:
                        squeezed[entry] = insert_reshape(graph, _reshape_source(entry), sizes[entry], origin=entry)
                squeezed[node] = _squeezed_op(graph, node, squeezed)
        # A reshape leaving the region reshapes the 3-D result instead; anything else reads the result given its
        # leading 1 back. The region's own nodes are then read by nothing and dropped.
        replacements: dict[torch.fx.Node, torch.fx.Node] = {}
        for node, users in exits.items():
            for user in users:
                if _reshapes(user, node):
                    with graph.inserting_before(user):
                        replacements[user] = insert_reshape(graph, squeezed[node], list(user.args[1]), origin=user)
        for node in exit_sizes:
            # Before the node after it, not after it: a reshape that copies first inserts two nodes, in order.
            with graph.inserting_before(squeezed[node].next):
                replacements[node] = insert_reshape(graph, squeezed[node], sizes[node], origin=node)
        return replacements


def _reshapes(user: torch.fx.Node, node: torch.fx.Node) -> bool:
    """Whether ``user`` is a reshape of ``node``."""
    return user.target in RESHAPES and user.args[0] is node


def _grow_region(seed: torch.fx.Node, claimed: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """``seed`` and the ops around it that leave dimension 0 alone, outside the regions ``claimed`` already."""
    region = {seed}
    stack = [seed]
    while stack:
        node = stack.pop()
        neighbours = [*node.users, *_tensor_operands(node)]
        for other in neighbours:
            if other not in region and other not in claimed and _keeps_batch_dim(other):
                region.add(other)
                stack.append(other)
    return region


def _tensor_operands(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The tensors ``node`` computes on: its first two arguments, or the tensors a ``cat`` joins (not the sizes a
    reshape reads)."""
    operands = node.args[0] if node.target == aten.cat.default else node.args[:2]
    return [a for a in operands if isinstance(a, torch.fx.Node)]


def _without_leading_one(entry: torch.fx.Node) -> torch.fx.Node | None:
    """The 3-D tensor that ``entry`` only gave a leading 1 (an ``unsqueeze(x, 0)``), to be read as it is: a reshape
    into the region would need two sizes that depend on the input where ``x`` has two already."""
    if entry.target != aten.unsqueeze.default or entry.args[1] not in (0, -4):
        return None
    source = entry.args[0]
    source_value = value(source) if isinstance(source, torch.fx.Node) else None
    if source_value is not None and source_value.dim() == 3:
        if (
            source.target == aten.unsqueeze.default
            and source.args[1] in (0, -3)
            and _broadcasts_over_last_two(source.args[0])
        ):
            return source.args[0]  # a [queries, keys] mask given two leading 1s: it broadcasts as it is
        return source
    return None


def _reshape_source(entry: torch.fx.Node) -> torch.fx.Node:
    """Reshape what a reshape read rather than its result: one copy instead of two."""
    return entry.args[0] if entry.target in RESHAPES else entry


def _squeezed_op(graph: torch.fx.Graph, node: torch.fx.Node, squeezed: dict) -> torch.fx.Node:
    """``node`` on 3-D inputs: dimension ``d`` of the 4-D op is ``d - 1``."""
    target, args = node.target, node.args
    if target == aten.cat.default:
        return insert_op(graph, target, ([squeezed[t] for t in args[0]], args[1] % 4 - 1), origin=node)
    x = squeezed[args[0]]
    if target == aten.matmul.default:
        return insert_op(graph, aten.bmm.default, (x, squeezed[args[1]]), origin=node)
    if target == aten.transpose.int:
        return insert_op(graph, target, (x, args[1] % 4 - 1, args[2] % 4 - 1), origin=node)
    if target == aten.permute.default:
        return insert_op(graph, target, (x, [d % 4 - 1 for d in args[1][1:]]), origin=node)
    if target in (aten.softmax.int, aten._softmax.default):
        return insert_op(graph, target, (x, args[1] % 4 - 1, *args[2:]), dict(node.kwargs), origin=node)
    if target == aten.clone.default:
        return insert_op(graph, target, (x,), dict(node.kwargs), origin=node)
    if target == aten.slice.Tensor:
        return insert_op(graph, target, (x, args[1] % 4 - 1, *args[2:]), origin=node)
    if target in RESHAPES:
        if list(tensor_of(args[0]).shape) == list(tensor_of(node).shape):
            return x
        return insert_op(graph, target, (x, list(args[1])[1:]), origin=node)
    if target in CONSTANT_PADDINGS:
        return insert_op(graph, target, (x, *args[1:]), dict(node.kwargs), origin=node)
    other = squeezed.get(args[1], args[1])
    return insert_op(graph, target, (x, other, *args[2:]), dict(node.kwargs), origin=node)

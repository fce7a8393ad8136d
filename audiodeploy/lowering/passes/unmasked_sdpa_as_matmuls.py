"""Write an unmasked ``scaled_dot_product_attention`` as the matmuls and softmax it computes.

Edge lowering decomposes ``scaled_dot_product_attention`` with mask handling even
when there is no mask (``eq``, ``full_like``, ``logical_not``, ``any``, ``where`` on
the attention weights), none of which ExecuTorch 1.5.1's XNNPACK partitioner
takes: each attention is cut out of the delegate, with that bookkeeping around it
on the portable kernels. Without a mask, dropout or causality the op is just::

    before                                         after

    q ──┐                                          q ────────────── matmul ── mul(scale) ── softmax(-1) ── matmul ──
    k ──┼─ scaled_dot_product_attention ──         k ── transpose(-2, -1) ─┘                                │
    v ──┘                                          v ───────────────────────────────────────────────────────┘

with ``scale = 1 / sqrt(head dim)`` unless given, which
:mod:`~audiodeploy.lowering.passes.attention_heads_as_batch` then runs as 3-D
``bmm`` inside the delegate.

The pass leaves an attention as it is, and does nothing on a program without one,
when it has a mask, dropout, ``is_causal`` or grouped-query heads, when its inputs
are not float32, or when the head dimension depends on the input length.
"""

from __future__ import annotations

import math

import torch
from torch.fx.passes.infra.pass_base import PassResult

from audiodeploy.lowering.passes._graph import ExportedProgramPass, argument, insert_op, is_static, replace_node, rewrite_done, value

aten = torch.ops.aten


class UnmaskedSdpaAsMatmulsPass(ExportedProgramPass):
    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != aten.scaled_dot_product_attention.default:
                continue
            scale = _plain_attention_scale(node)
            if scale is None:
                continue
            q, k, v = node.args[:3]
            with graph.inserting_before(node):
                keys = insert_op(graph, aten.transpose.int, (k, -2, -1), origin=node)
                scores = insert_op(graph, aten.matmul.default, (q, keys), origin=node)
                scaled = insert_op(graph, aten.mul.Tensor, (scores, scale), origin=node)
                weights = insert_op(graph, aten.softmax.int, (scaled, -1), origin=node)
                out = insert_op(graph, aten.matmul.default, (weights, v), origin=node)
            replace_node(self.exported_program, node, out)
            modified = True
        if modified:
            rewrite_done(self.exported_program)
        return PassResult(graph_module, modified)


def _plain_attention_scale(node: torch.fx.Node) -> float | None:
    """The softmax scale of an attention without mask, dropout, causality or grouped heads; else None."""
    q, k, v = (value(n) for n in node.args[:3])
    if any(t is None or t.dtype != torch.float32 for t in (q, k, v)):
        return None
    if (
        argument(node, 3, "attn_mask") is not None
        or argument(node, 4, "dropout_p", 0.0) != 0.0
        or argument(node, 5, "is_causal", False)
        or node.kwargs.get("enable_gqa", False)
        or not is_static(q.shape[-1])
    ):
        return None
    scale = argument(node, 6, "scale")
    return 1.0 / math.sqrt(int(q.shape[-1])) if scale is None else float(scale)

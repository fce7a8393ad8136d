"""Write ``scaled_dot_product_attention`` without a boolean mask as the matmuls and softmax it computes.

Edge lowering decomposes ``scaled_dot_product_attention`` with mask handling even
when there is no mask (``eq``, ``full_like``, ``logical_not``, ``any``, ``where`` on
the attention weights), none of which ExecuTorch 1.5.1's XNNPACK partitioner
takes: each attention is cut out of the delegate, with that bookkeeping around it
on the portable kernels. Without dropout or causality, and with no mask or a float
mask added to the scores (torchaudio's WavLM adds its gated relative-position
bias that way), the op is just::

    before                                         after

    q ──┐                                          q ────────────── matmul ── mul(scale) ── add(mask) ── softmax(-1) ── matmul ──
    k ──┼─ scaled_dot_product_attention ──         k ── transpose(-2, -1) ─┘                  │                          │
    v ──┤                                          v ─────────────────────────────────────────┼──────────────────────────┘
 mask ──┘                                       mask ─────────────────────────────────────────┘ (if any)

with ``scale = 1 / sqrt(head dim)`` unless given, which
:mod:`~audiodeploy.lowering.passes.attention_heads_as_batch` then runs as 3-D
``bmm`` inside the delegate.

The bookkeeping exists for one case: a row whose scores are all ``-inf`` gives
zeros instead of softmax's NaN. Only a mask holding ``-inf`` makes such a row, so
a float mask is taken only when it is computed from data that holds none: finite
constants, outputs of bounded ops (``sigmoid``, ``tanh``, ``softmax``), and the
model's activations, the outputs of its GEMMs and convolutions (position scores a
query computes, as Wav2Vec2-BERT's are), through ops none of which has an
infinite argument (``masked_fill(-inf)``, ``full(-inf)``). A GEMM of finite values
can still overflow; a row of the mask that overflowed to ``-inf`` in every
element, which takes activations beyond 1e38, is the one place the result would
differ from sdpa's (NaN, where sdpa gives zeros). A mask read from a user input
without a GEMM between, which may hold ``-inf`` by design, is left alone.

The pass leaves an attention as it is, and does nothing on a program without one,
when its mask is boolean or may hold an infinity, when it has dropout,
``is_causal`` or grouped-query heads, when its inputs are not float32, or when
the head dimension depends on the input length.
"""

from __future__ import annotations

import functools
import math

import torch
from torch.utils import _pytree as pytree

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    ancestors,
    arguments,
    constant_sources,
    insert_op,
    is_static,
    tensor_of,
    value,
)

aten = torch.ops.aten

_BOUNDED = {aten.sigmoid.default, aten.tanh.default, aten.softmax.int, aten._softmax.default}
_ACTIVATIONS = {
    aten.linear.default,
    aten.matmul.default,
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.einsum.default,
    aten.conv1d.default,
    aten.conv2d.default,
    aten.convolution.default,
}
"""Ops whose output is the model's activation: finite for finite operands, unless a product overflows."""


class SdpaAsMatmulsPass(NodeRewritePass):
    targets = frozenset({aten.scaled_dot_product_attention.default})

    @functools.cached_property
    def _constants(self) -> dict[torch.fx.Node, torch.Tensor]:
        return constant_sources(self.exported_program)

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        scale = _plain_attention_scale(node)
        if isinstance(scale, Skip):
            return scale
        given = arguments(node)
        q, k, v, mask = given["query"], given["key"], given["value"], given["attn_mask"]
        if mask is not None and not self._is_finite_float_mask(mask):
            return Skip("its mask is not a float32 mask computed from finite values")
        keys = insert_op(self.graph, aten.transpose.int, (k, -2, -1), origin=node)
        scores = insert_op(self.graph, aten.matmul.default, (q, keys), origin=node)
        scaled = insert_op(self.graph, aten.mul.Tensor, (scores, scale), origin=node)
        if mask is not None:
            scaled = insert_op(self.graph, aten.add.Tensor, (scaled, mask), origin=node)
        weights = insert_op(self.graph, aten.softmax.int, (scaled, -1), origin=node)
        return insert_op(self.graph, aten.matmul.default, (weights, v), origin=node)

    def _is_finite_float_mask(self, mask: torch.fx.Node) -> bool:
        """A float32 mask computed from finite constants, activations and bounded ops' outputs, without infinite
        arguments."""
        if value(mask) is None or tensor_of(mask).dtype != torch.float32:
            return False
        sources = self._constants

        def carries_data(n: torch.fx.Node) -> bool:
            # A size read from a tensor carries none of its data; a bounded op's output is finite, and so is an
            # activation (see the module docstring).
            return n.op != "placeholder" and value(n) is not None and n.target not in _BOUNDED | _ACTIVATIONS

        for node in ancestors([mask], expand=carries_data):
            if node.op == "placeholder":
                if node not in sources or not torch.isfinite(sources[node]).all():
                    return False
            elif carries_data(node) and any(
                isinstance(a, float) and math.isinf(a) for a in pytree.tree_leaves((node.args, node.kwargs))
            ):
                return False
        return True


def _plain_attention_scale(node: torch.fx.Node) -> float | Skip:
    """The softmax scale of an attention without dropout, causality or grouped heads."""
    given = arguments(node)
    q, k, v = (value(given[name]) for name in ("query", "key", "value"))
    if any(t is None or t.dtype != torch.float32 for t in (q, k, v)):
        return Skip("not a float32 attention")
    if given["dropout_p"] != 0.0 or given["is_causal"]:
        return Skip("an attention with dropout or a causal mask")
    if given["enable_gqa"]:
        return Skip("an attention of grouped query heads")
    head_size = tensor_of(given["query"]).shape[-1]
    if not is_static(head_size):
        return Skip("its head size depends on the input")
    scale = given["scale"]
    return 1.0 / math.sqrt(int(head_size)) if scale is None else float(scale)

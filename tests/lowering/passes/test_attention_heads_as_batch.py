"""Eager multi-head attention of one utterance, as 3-D bmm with the heads as batch: one delegate."""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes.attention_heads_as_batch import AttentionHeadsAsBatchPass
from tests.lowering.passes.modules import (
    lower_attention_stock_and_rewritten,
    lowered_learnt_relative_shift,
)
from tests.pipeline import assert_rewrites, export_aten


class EagerAttention(torch.nn.Module):
    """transformers' wav2vec2 attention with ``attn_implementation="eager"`` and no mask."""

    def __init__(self, embed: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, embed // heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (torch.nn.Linear(embed, embed) for _ in range(4))

    def forward(self, x):
        batch, frames, _ = x.shape
        shape = (batch, frames, -1, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        weights = torch.matmul(q, k.transpose(2, 3)) * self.head_dim**-0.5
        weights = torch.nn.functional.softmax(weights, dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).contiguous()
        return self.out_proj(out.reshape(batch, frames, -1))


def test_fp32_attention_over_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    stock = lower_attention_stock_and_rewritten(EagerAttention().eval(), "AttentionHeadsAsBatchPass")
    assert stock.delegates > 1 and stock.ops_outside_delegates.get("aten.expand_copy") == 4  # 2 per matmul


def test_fp32_static_attention_is_written_as_3d_bmms():
    torch.manual_seed(0)
    counts = {"aten.matmul.default": 0, "aten.bmm.default": 2}
    assert_rewrites(EagerAttention().eval(), [(torch.randn(1, 20, 32),)], "AttentionHeadsAsBatchPass", counts)


def test_does_nothing_on_a_batch_of_two():
    ep = export_aten(EagerAttention().eval(), (torch.randn(2, 20, 32),))
    assert not AttentionHeadsAsBatchPass(ep)(ep.graph_module).modified


def test_fp32_attention_around_a_relative_shift_left_outside_is_a_batch():
    """The skew's views have two sizes that depend on the length: they stay outside the delegate, in 3-D, and the
    products and the softmax around them are batched matmuls inside it (stock lowering leaves the 4-D matmuls'
    expand copies outside too, and splits the delegate at each)."""
    report = lowered_learnt_relative_shift()
    assert "AttentionHeadsAsBatchPass" in report.rewrites, report.rewrites
    # Outside: the table cut to the length, and the skew's two views and two slices.
    assert report.ops_outside_delegates == {"aten.slice_copy": 3, "aten.view_copy": 2, "sym_size.int": 1}, report

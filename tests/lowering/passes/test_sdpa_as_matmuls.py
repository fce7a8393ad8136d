"""scaled_dot_product_attention without a boolean mask as matmuls and softmax: no mask bookkeeping, one delegate."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from audiodeploy.lowering.passes.sdpa_as_matmuls import SdpaAsMatmulsPass
from tests.lowering.passes.modules import (
    ATTENTION_FRAMES,
    attention_ends,
    lower_attention_stock_and_rewritten,
    relative_position_buckets,
)
from tests.pipeline import assert_rewrites, export_aten


class SdpaAttention(torch.nn.Module):
    """torchaudio's wav2vec2 attention: heads split, ``F.scaled_dot_product_attention``, heads merged."""

    def __init__(self, embed: int = 32, heads: int = 4, masked: bool = False, scale: float | None = None) -> None:
        super().__init__()
        self.heads, self.head_dim, self.masked, self.scale = heads, embed // heads, masked, scale
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (torch.nn.Linear(embed, embed) for _ in range(4))

    def forward(self, x):
        batch, frames, embed = x.shape
        q, k, v = (
            proj(x).view(batch, frames, self.heads, self.head_dim).transpose(2, 1)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        mask = torch.ones(frames, frames, dtype=torch.bool).tril() if self.masked else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return self.out_proj(out.transpose(1, 2).reshape(batch, -1, embed))


def test_fp32_unmasked_sdpa_over_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    stock = lower_attention_stock_and_rewritten(SdpaAttention().eval(), "SdpaAsMatmulsPass")
    assert {"aten.logical_not", "aten.any"} <= set(stock.ops_outside_delegates)


def test_fp32_unmasked_sdpa_keeps_an_explicit_scale():
    torch.manual_seed(0)
    module = SdpaAttention(scale=0.7).eval()  # eager's numbers: 0.7, not the default 1 / sqrt(8)
    counts = {"aten.scaled_dot_product_attention.default": 0, "aten.bmm.default": 2}
    assert_rewrites(module, [(torch.randn(1, 20, 32),)], "SdpaAsMatmulsPass", counts)


def test_does_nothing_on_attention_with_a_boolean_mask():
    ep = export_aten(SdpaAttention(masked=True).eval(), (torch.randn(1, 20, 32),))
    assert not SdpaAsMatmulsPass(ep)(ep.graph_module).modified


class GatedBiasAttention(torch.nn.Module):
    """torchaudio's WavLM attention: a relative-position bias, gated per frame, added to the scores by SDPA."""

    def __init__(self, embed: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(embed, 3 * embed)
        self.gate = torch.nn.Linear(embed, heads)
        self.embed = torch.nn.Embedding(16, heads)

    def forward(self, x):  # x [1, T, C]
        frames = x.shape[1]
        q, k, v = (t.view(1, frames, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(32, dim=-1))
        bias = self.embed(relative_position_buckets(frames)).permute(2, 0, 1).unsqueeze(0)  # [1, H, T, T]
        gate = torch.sigmoid(self.gate(x)).transpose(1, 2).unsqueeze(-1)  # [1, H, T, 1]
        mask = (gate * 2.0 + 1.0) * bias
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(1, frames, 32)


def test_fp32_sdpa_with_a_gated_bias_mask_is_written_as_3d_matmuls_on_a_constant_bias():
    torch.manual_seed(0)
    # The bias is a constant cut to the length (its buckets and lookup are gone), the attention 3-D with the mask.
    gone = ("aten.scaled_dot_product_attention.default", "aten.arange.default", "aten.embedding.default")
    counts = {**dict.fromkeys(gone, 0), "aten.slice.Tensor": 2, "aten.bmm.default": 2}
    cases = [(torch.randn(1, 20, 32),), *attention_ends()]
    result = assert_rewrites(
        GatedBiasAttention().eval(), cases, "SdpaAsMatmulsPass", counts, dynamic_shapes=({1: ATTENTION_FRAMES},)
    )
    assert {"LengthOnlyValuesAsConstantsPass", "AttentionHeadsAsBatchPass"} <= set(result.changed), result.changed


class UserMaskAttention(torch.nn.Module):
    def forward(self, q, mask):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask * 1.0)


class NegativeInfinityMaskAttention(torch.nn.Module):
    def forward(self, q):
        keep = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).tril()
        mask = torch.zeros(q.shape[2], q.shape[2]).masked_fill(~keep, float("-inf"))
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_does_nothing_on_a_float_mask_that_may_hold_negative_infinity():
    q = torch.randn(1, 2, 6, 8)
    for module, inputs in (
        (UserMaskAttention(), (q, torch.zeros(1, 2, 6, 6))),
        (NegativeInfinityMaskAttention(), (q,)),
    ):
        ep = export_aten(module, inputs)
        assert not SdpaAsMatmulsPass(ep)(ep.graph_module).modified, module


class PositionScoresMaskAttention(torch.nn.Module):
    """A float mask of scores the queries compute (Wav2Vec2-BERT's relative positions): activations, finite."""

    def __init__(self) -> None:
        super().__init__()
        self.positions = torch.nn.Linear(8, 6)

    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=self.positions(q) * 0.5)


def test_fp32_sdpa_with_a_mask_of_activations_is_matmuls():
    cases = [(torch.randn(1, 2, 6, 8),)]
    counts = {"aten.scaled_dot_product_attention.default": 0, "aten.softmax.int": 1}
    assert_rewrites(PositionScoresMaskAttention().eval(), cases, "SdpaAsMatmulsPass", counts)

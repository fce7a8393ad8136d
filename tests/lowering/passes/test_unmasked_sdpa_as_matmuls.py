"""An unmasked scaled_dot_product_attention as matmuls and softmax: no mask bookkeeping, one delegate."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.unmasked_sdpa_as_matmuls import UnmaskedSdpaAsMatmulsPass
from tests.pipeline import export_aten, lower_and_compare

FRAMES = Dim("frames", min=8, max=64)


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
    module = SdpaAttention().eval()
    x = torch.randn(1, 20, 32)
    stock = lower_and_compare(module, (x,), rewrite=False, dynamic_shapes=({1: FRAMES},))
    assert {"aten.logical_not", "aten.any"} <= set(stock.ops_outside_delegates)
    report = lower_and_compare(
        module,
        (x,),
        dynamic_shapes=({1: FRAMES},),
        also_run=[(torch.randn(1, 8, 32),), (torch.randn(1, 64, 32),)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "UnmaskedSdpaAsMatmulsPass" in report.rewrites


def test_fp32_unmasked_sdpa_keeps_an_explicit_scale():
    torch.manual_seed(0)
    report = lower_and_compare(SdpaAttention(scale=0.7).eval(), (torch.randn(1, 20, 32),))
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_does_nothing_on_masked_attention():
    ep = export_aten(SdpaAttention(masked=True).eval(), (torch.randn(1, 20, 32),))
    assert not UnmaskedSdpaAsMatmulsPass(ep)(ep.graph_module).modified

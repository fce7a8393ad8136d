"""Reshapes with a symbolic size, written with integer sizes and one -1: delegated with a dynamic length."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.static_reshape import StaticReshapePass
from tests.lowering.passes.modules import ATTENTION_FRAMES
from tests.pipeline import (
    assert_op_counts,
    assert_program_matches_eager,
    assert_rewrites,
    export_aten,
    lower_and_compare,
    lower_stock_and_rewritten,
)

FRAMES = Dim("frames", min=8, max=64)


class SplitAndMergeHeads(torch.nn.Module):
    """Reshapes the way transformers writes them: the length read from the tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        frames = x.shape[1]
        heads = self.proj(x).view(1, frames, -1, 8)
        return self.proj((heads * 2.0).reshape(1, frames, 32))


class UnsqueezeWaveform(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 10, stride=5)

    def forward(self, waveform):
        return self.conv(waveform.unsqueeze(1))


def symbolic_views(program) -> list[str]:
    """The views whose sizes are not all numbers: XNNPACK 1.5.1 declines those."""
    return [
        node.name
        for node in program.graph.nodes
        if node.target == torch.ops.aten.view.default and not all(isinstance(size, int) for size in node.args[1])
    ]


def test_fp32_reshapes_with_symbolic_sizes_are_one_delegate():
    x = torch.randn(1, 20, 32)
    module = SplitAndMergeHeads().eval()
    stock, report = lower_stock_and_rewritten(
        module, (x,), "StaticReshapePass", dynamic_shapes=({1: FRAMES},), also_run=[(torch.randn(1, 64, 32),)]
    )
    assert stock.ops_outside_delegates.get("aten.view_copy", 0) >= 2
    assert report.rewrites == ("StaticReshapePass",)


def test_fp32_unsqueeze_of_a_dynamic_waveform_is_a_static_view():
    samples = Dim("samples", min=100, max=4000)
    cases = [(torch.randn(1, n),) for n in (1000, 100, 4000)]
    counts = {"aten.unsqueeze.default": 0}
    result = assert_rewrites(
        UnsqueezeWaveform().eval(), cases, "StaticReshapePass", counts, dynamic_shapes=({1: samples},)
    )
    assert symbolic_views(result.program) == []


class Flatten(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], x.shape[1], -1) + 1.0


def test_does_nothing_on_static_reshapes_or_two_symbolic_sizes():
    ep = export_aten(SplitAndMergeHeads().eval(), (torch.randn(1, 20, 32),))
    assert not StaticReshapePass(ep)(ep.graph_module).modified
    both = export_aten(Flatten(), (torch.randn(3, 20, 4, 4),), dynamic_shapes=({0: Dim("batch", max=8), 1: FRAMES},))
    assert not StaticReshapePass(both)(both.graph_module).modified


class ReshapeToOwnShape(torch.nn.Module):
    """WavLM's view(bias, [-1, T, T]) of an [H, T, T] bias: two sizes from the length, the same shape."""

    def forward(self, x):  # x [H, T, T]
        return x.view(-1, x.shape[1], x.shape[2]) * 2.0


def test_fp32_reshape_to_the_same_shape_is_dropped():
    square = Dim("square", min=4, max=32)
    cases = [(torch.randn(2, n, n),) for n in (10, 4, 32)]
    dynamic = ({1: square, 2: square},)
    # the lowering's drop_aliases drops the model's own such reshapes first; this pass, those rewrites emit
    ep = export_aten(ReshapeToOwnShape(), cases[0], dynamic_shapes=dynamic)
    assert StaticReshapePass(ep)(ep.graph_module).modified
    assert_op_counts(ep, {"aten.view.default": 0})
    assert_program_matches_eager(ep, ReshapeToOwnShape(), cases)


class HeadsInnerAttention(torch.nn.Module):
    """torchaudio's layout: heads split by a view of [1, T, H, D], attended with a float mask computed from the
    input, merged back by a view. Export writes the merge as a ``view`` of the layout PyTorch's CPU attention returns;
    attention as matmuls lays its output out otherwise, and that view no longer views it."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        frames = x.shape[1]
        q, k, v = (t.view(1, frames, 2, 16).transpose(2, 1) for t in self.qkv(x).chunk(3, -1))
        mask = torch.tanh(x[..., :1]) * torch.tanh(x[..., 1:2]).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return out.transpose(1, 2).reshape(1, -1, 32)


def test_a_view_whose_input_a_rewrite_laid_out_anew_gets_a_copy_first():
    """Before, edge lowering failed: "Cannot view a tensor with shape [1, s27, 2, 16] and strides (32*s27, 16,
    16*s27, 1) as a tensor with shape (1, s27, 32)"."""
    torch.manual_seed(0)
    module = HeadsInnerAttention().eval()
    report = lower_and_compare(
        module,
        (torch.randn(1, 20, 32),),
        dynamic_shapes=({1: ATTENTION_FRAMES},),
        also_run=[(torch.randn(1, n, 32),) for n in (8, 64)],
    )
    assert {"SdpaAsMatmulsPass", "StaticReshapePass"} <= set(report.rewrites), report.rewrites

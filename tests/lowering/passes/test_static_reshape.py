"""Reshapes with a symbolic size, written with integer sizes and one -1: delegated with a dynamic length."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.static_reshape import StaticReshapePass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

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
    assert_rewrites(ReshapeToOwnShape(), cases, "StaticReshapePass", {"aten.view.default": 0}, dynamic_shapes=dynamic)

"""Replicate paddings of the last dimension as concatenations: one delegate over a dynamic or fixed length."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.replicate_padding_as_concat import ReplicatePaddingAsConcatPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class PaddedLowPass(torch.nn.Module):
    """BigVGAN's down-sampler: replicate-pad 5 left and 6 right, a depthwise stride-2 low-pass; twice at one length,
    so both paddings can share one selector."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(channels, channels, 12, stride=2, groups=channels)

    def forward(self, x):
        first = F.pad(x, (5, 6), mode="replicate")
        second = F.pad(torch.sin(x), (5, 6), mode="replicate")
        return self.conv(first * second)


class PaddedBoth(torch.nn.Module):
    def __init__(self, mode: str, padding: tuple[int, ...]) -> None:
        super().__init__()
        self.mode, self.padding = mode, padding

    def forward(self, x):
        return F.pad(x, self.padding, mode=self.mode) * 2.0


def test_fp32_replicate_padding_over_dynamic_length_is_one_delegate_and_exact():
    torch.manual_seed(0)
    module = PaddedLowPass().eval()
    x = torch.randn(1, 8, 20)
    stock, report = lower_stock_and_rewritten(
        module,
        (x,),
        "ReplicatePaddingAsConcatPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 8, 4),), (torch.randn(1, 8, 64),)],
        atol=1e-6,
    )
    assert stock.delegates > 1 and "aten.index" in stock.ops_outside_delegates
    # The rest keep the selector's two chained convolutions on one image.
    assert report.rewrites[0] == "ReplicatePaddingAsConcatPass" and "ConvChainsAsImagesPass" in report.rewrites


def test_paddings_of_one_length_share_one_selector():
    ep = export_aten(PaddedLowPass().eval(), (torch.randn(1, 8, 20),), dynamic_shapes=({2: FRAMES},))
    assert ReplicatePaddingAsConcatPass(ep)(ep.graph_module).modified
    targets = [node.target for node in ep.graph.nodes]
    assert targets.count(torch.ops.aten.pad.default) == 0
    assert targets.count(torch.ops.aten.bmm.default) == 2
    # The row of ones and its one-hot columns, once; the module's own low-pass.
    assert targets.count(torch.ops.aten.conv1d.default) == 3


def test_fp32_replicate_padding_of_a_fixed_length_or_a_batch_is_written_as_concatenations():
    torch.manual_seed(0)
    module = PaddedLowPass().eval()
    # At one length the edges are static slices: no selector.
    fixed = {"aten.pad.default": 0, "aten.cat.default": 2, "aten.bmm.default": 0}
    assert_rewrites(module, [(torch.randn(1, 8, 20),)], "ReplicatePaddingAsConcatPass", fixed, atol=1e-6)
    # Two signals: the rows of [2, 8, T] are viewed as [1, 16, T] for the selection.
    batch = [(torch.randn(2, 8, n),) for n in (20, 4, 64)]
    counts = {"aten.pad.default": 0, "aten.cat.default": 2, "aten.bmm.default": 2}
    assert_rewrites(module, batch, "ReplicatePaddingAsConcatPass", counts, dynamic_shapes=({2: FRAMES},), atol=1e-6)


def test_does_nothing_on_constant_or_reflect_padding_or_padding_of_two_dimensions():
    cases = [
        (PaddedBoth("constant", (2, 3)), torch.randn(1, 4, 20)),
        (PaddedBoth("reflect", (2, 3)), torch.randn(1, 4, 20)),
        (PaddedBoth("replicate", (1, 1, 2, 2)), torch.randn(1, 4, 6, 20)),
    ]
    for module, x in cases:
        ep = export_aten(module, (x,))
        assert not ReplicatePaddingAsConcatPass(ep)(ep.graph_module).modified

"""Means and sums over the last dimensions, as a linear (fixed count) or global average pooling (dynamic count)."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.sum_and_mean_as_xnnpack_reductions import SumAndMeanAsXnnpackReductionsPass
from tests.pipeline import export_aten, lower_and_compare

FRAMES = Dim("frames", min=8, max=64)


class CenterChannels(torch.nn.Module):
    """[1, T, C]: subtract each frame's mean over its channels."""

    def forward(self, x):
        return x - x.mean(dim=-1, keepdim=True)


class CenterTime(torch.nn.Module):
    """[1, C, T]: subtract each channel's mean over time (a length that depends on the input)."""

    def forward(self, x):
        return x - x.mean(dim=-1, keepdim=True)


class MeanOfLastTwo(torch.nn.Module):
    """[1, T, 4, 8] -> [1, T]: mean over two trailing dimensions, not kept."""

    def forward(self, x):
        return x.mean(dim=(-2, -1)) * 3.0


def test_fp32_mean_over_fixed_channels_with_dynamic_length_is_one_delegate():
    x = torch.randn(1, 20, 32)
    stock = lower_and_compare(CenterChannels(), (x,), rewrite=False, dynamic_shapes=({1: FRAMES},))
    assert stock.ops_outside_delegates.get("aten.mean") == 1
    report = lower_and_compare(
        CenterChannels(), (x,), dynamic_shapes=({1: FRAMES},), also_run=[(torch.randn(1, 64, 32),)]
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert report.rewrites == ("SumAndMeanAsXnnpackReductionsPass",)


def test_fp32_mean_over_dynamic_length_is_one_delegate():
    report = lower_and_compare(
        CenterTime(),
        (torch.randn(1, 16, 20),),
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 16, 8),), (torch.randn(1, 16, 64),)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_fp32_mean_over_two_trailing_dims_without_keepdim_is_one_delegate():
    report = lower_and_compare(
        MeanOfLastTwo(),
        (torch.randn(1, 20, 4, 8),),
        dynamic_shapes=({1: FRAMES},),
        also_run=[(torch.randn(1, 64, 4, 8),)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


class GroupSum(torch.nn.Module):
    """WavLM's gate: [1, H, T, 8] viewed as [1, H, T, 2, 4] and summed over the groups of four."""

    def forward(self, x):
        return torch.sigmoid(x.view(1, 2, x.shape[2], 2, 4).sum(-1))


class SumOverTime(torch.nn.Module):
    def forward(self, x):
        return x - x.sum(dim=-1, keepdim=True)


def test_fp32_sum_over_fixed_groups_is_one_delegate():
    stock = lower_and_compare(GroupSum(), (torch.randn(1, 2, 20, 8),), rewrite=False, dynamic_shapes=({2: FRAMES},))
    assert stock.ops_outside_delegates.get("aten.sum") == 1
    report = lower_and_compare(
        GroupSum(), (torch.randn(1, 2, 20, 8),), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 2, 64, 8),)]
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_sum_over_dynamic_length_has_no_pooling_form():
    ep = export_aten(SumOverTime(), (torch.randn(1, 4, 20),), dynamic_shapes=({2: FRAMES},))
    assert not SumAndMeanAsXnnpackReductionsPass(ep)(ep.graph_module).modified


class SpatialMean(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3), keepdim=True)


class MeanOverChannels(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=1)


def test_does_nothing_on_global_average_pooling_or_leading_dims():
    for module, x in ((SpatialMean(), torch.randn(1, 4, 5, 6)), (MeanOverChannels(), torch.randn(2, 4, 5))):
        ep = export_aten(module, (x,))
        assert not SumAndMeanAsXnnpackReductionsPass(ep)(ep.graph_module).modified, module


class NormsAroundUndelegatedOp(torch.nn.Module):
    """Two layer norms in two delegates: cumsum has no XNNPACK config."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.LayerNorm(8), torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.second(torch.cumsum(self.first(x), dim=-1))


def test_fp32_means_in_two_delegates_each_get_their_weight():
    report = lower_and_compare(NormsAroundUndelegatedOp().eval(), (torch.randn(2, 8),))
    assert (report.delegates, report.ops_outside_delegates) == (2, {"aten.cumsum": 1})

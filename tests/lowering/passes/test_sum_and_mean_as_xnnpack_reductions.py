"""Means and sums over the last dimensions, as a linear (fixed count) or global average pooling (dynamic count)."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.sum_and_mean_as_xnnpack_reductions import SumAndMeanAsXnnpackReductionsPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare, lower_stock_and_rewritten

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


def pooling_means(program) -> int:
    """The means in the one form XNNPACK 1.5.1 takes, global average pooling: over dims 2 and 3 of a 4-D tensor,
    kept."""
    return sum(
        node.target == torch.ops.aten.mean.dim
        and node.args[0].meta["val"].dim() == 4
        and sorted(d % 4 for d in node.args[1]) == [2, 3]
        and len(node.args) > 2
        and node.args[2]
        for node in program.graph.nodes
    )


def assert_written_as_reductions(module, cases, dynamic_shapes, written: dict[str, int]) -> None:
    """``module`` rewritten by the pass: no sum left, the ops ``written`` (a mean left is XNNPACK's global average
    pooling) and eager's numbers on each case (the first, the example)."""
    counts = {"aten.sum.dim_IntList": 0, **written}
    rewrite = "SumAndMeanAsXnnpackReductionsPass"
    result = assert_rewrites(module, cases, rewrite, counts, dynamic_shapes=dynamic_shapes)
    assert pooling_means(result.program) == written.get("aten.mean.dim", 0)


def test_fp32_mean_over_fixed_channels_with_dynamic_length_is_one_delegate():
    x = torch.randn(1, 20, 32)
    stock, report = lower_stock_and_rewritten(
        CenterChannels(),
        (x,),
        "SumAndMeanAsXnnpackReductionsPass",
        dynamic_shapes=({1: FRAMES},),
        also_run=[(torch.randn(1, 64, 32),)],
    )
    assert stock.ops_outside_delegates.get("aten.mean") == 1
    assert report.rewrites == ("SumAndMeanAsXnnpackReductionsPass",)


def test_fp32_mean_over_dynamic_length_is_global_average_pooling():
    cases = [(torch.randn(1, 16, n),) for n in (20, 8, 64)]
    assert_written_as_reductions(CenterTime(), cases, ({2: FRAMES},), {"aten.mean.dim": 1})


def test_fp32_mean_over_two_trailing_dims_without_keepdim_is_a_linear():
    cases = [(torch.randn(1, n, 4, 8),) for n in (20, 8, 64)]
    assert_written_as_reductions(MeanOfLastTwo(), cases, ({1: FRAMES},), {"aten.mean.dim": 0, "aten.linear.default": 1})


class WholeGroupNorm(torch.nn.Module):
    """[1, 32, L] normalized over all of it, as EnCodec's 48 kHz convolutions are (``GroupNorm(1, 32)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(1, 32)

    def forward(self, x):
        return self.norm(x)


def test_a_long_fixed_reduction_is_pooled_in_split_rows_then_a_small_linear():
    """A fixed count of 32 x 6000 elements: as a linear its one-row weight would be 750 KiB, stored, and packed by
    XNNPACK many times over; pooled over 64 channels of 3000 elements, then a [1, 64] linear, each mean is
    delegated, and the sum is more accurate too."""
    x = torch.randn(1, 32, 6000) * 3 + 1
    cases = [(x,)]
    result = assert_rewrites(
        WholeGroupNorm(), cases, "SumAndMeanAsXnnpackReductionsPass", {"aten.linear.default": 2}, atol=1e-5
    )
    assert pooling_means(result.program) == 2
    pooled = [n for n in result.program.graph.nodes if n.target == torch.ops.aten.mean.dim]
    assert [list(n.args[0].meta["val"].shape) for n in pooled] == [[1, 64, 3000, 1]] * 2
    report = lower_and_compare(WholeGroupNorm(), (x,), atol=1e-5)
    assert report.delegates == 1 and not report.ops_outside_delegates


class GroupSum(torch.nn.Module):
    """WavLM's gate: [1, H, T, 8] viewed as [1, H, T, 2, 4] and summed over the groups of four."""

    def forward(self, x):
        return torch.sigmoid(x.view(1, 2, x.shape[2], 2, 4).sum(-1))


class SumOverTime(torch.nn.Module):
    def forward(self, x):
        return x - x.sum(dim=-1, keepdim=True)


def test_fp32_sum_over_fixed_groups_is_a_linear():
    cases = [(torch.randn(1, 2, n, 8),) for n in (20, 8, 64)]
    assert_written_as_reductions(GroupSum(), cases, ({2: FRAMES},), {"aten.linear.default": 1})


def test_sum_over_dynamic_length_has_no_pooling_form():
    ep = export_aten(SumOverTime(), (torch.randn(1, 4, 20),), dynamic_shapes=({2: FRAMES},))
    assert not SumAndMeanAsXnnpackReductionsPass(ep)(ep.graph_module).modified


class SpatialMean(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3), keepdim=True)


class MeanOverChannels(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=1)


class MeanOverFrames(torch.nn.Module):
    """A classifier's pooling: [1, T, C] -> [1, C], the mean over the frames (not the innermost dimension)."""

    def forward(self, x):
        return x.mean(dim=1) * 2.0


def test_does_nothing_on_global_average_pooling():
    ep = export_aten(SpatialMean(), (torch.randn(1, 4, 5, 6),))
    assert not SumAndMeanAsXnnpackReductionsPass(ep)(ep.graph_module).modified


def test_a_mean_over_leading_dims_is_permuted_innermost_first():
    cases = [(torch.randn(2, 4, 5),)]
    counts = {"aten.permute.default": 1, "aten.linear.default": 1}
    assert_written_as_reductions(MeanOverChannels(), cases, None, counts)
    cases = [(torch.randn(1, n, 16),) for n in (20, 8, 64)]
    counts = {"aten.permute.default": 1, "aten.mean.dim": 1}
    assert_written_as_reductions(MeanOverFrames(), cases, ({1: FRAMES},), counts)


class NormsAroundUndelegatedOp(torch.nn.Module):
    """Two layer norms in two delegates: cumsum has no XNNPACK config."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.LayerNorm(8), torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.second(torch.cumsum(self.first(x), dim=-1))


def test_fp32_means_in_two_delegates_each_get_their_weight():
    # Lowered: the partitioner's case of a linear's constant weight in each of two delegates.
    report = lower_and_compare(NormsAroundUndelegatedOp().eval(), (torch.randn(2, 8),))
    assert (report.delegates, report.ops_outside_delegates) == (2, {"aten.cumsum": 1})


class LongRowsOfFrames(torch.nn.Module):
    """[1, T, 128, 160]: a sum over 20,480 fixed elements for each of a length's frames (a codebook search's
    one-hot rows are as long)."""

    def forward(self, x):
        return x.sum(dim=(-2, -1)) + 1.0


def test_a_long_fixed_reduction_of_rows_whose_count_depends_on_the_length_stays_a_linear():
    """Pooling in split rows needs the rows fixed: here the frames are not, so the linear form takes it, as it did
    before the pooling form existed (a sum left to the portable kernels split Mimi's encoder into 31 delegates)."""
    cases = [(0.01 * torch.randn(1, n, 128, 160),) for n in (20, 8, 64)]  # sums near 1: fp32 order aside
    assert_written_as_reductions(LongRowsOfFrames(), cases, ({1: FRAMES},), {"aten.linear.default": 1})

"""Layer norm, group norm and variance written with means: delegated whole, and the same numbers as eager.

The layer norm is lowered, its .pte run with ExecuTorch's runtime; the other norms are checked on the rewritten
program, run by PyTorch. Both are compared with eager PyTorch at the shortest and longest length of the exported
range.
"""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.decompose_normalization import DecomposeNormalizationPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare, lower_stock_and_rewritten

FRAMES = Dim("frames", min=8, max=64)
SAMPLES = Dim("samples", min=400, max=4000)
NORMS = ("aten.layer_norm.default", "aten.group_norm.default", "aten.var.correction", "aten.var.dim")


class LayerNormBlock(torch.nn.Module):
    """[1, T, C] -> linear -> layer norm -> linear, as in every transformer layer."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.outer = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.outer(self.norm(self.inner(x)))


class GroupNormFrontEnd(torch.nn.Module):
    """wav2vec2's first feature layer: strided conv, group norm with one group per channel, gelu."""

    def __init__(self, groups: int = 16) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 16, 10, stride=5, bias=False)
        self.norm = torch.nn.GroupNorm(groups, 16, affine=True)
        self.next = torch.nn.Conv1d(16, 16, 3, stride=2)

    def forward(self, waveform):
        return self.next(torch.nn.functional.gelu(self.norm(self.conv(waveform.unsqueeze(1)))))


class WaveformNormalization(torch.nn.Module):
    """Zero mean, unit variance over the samples (transformers' feature extractor), then a conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 8, 10, stride=5)

    def forward(self, waveform):
        mean = waveform.mean(dim=-1, keepdim=True)
        variance = waveform.var(dim=-1, keepdim=True, correction=0)
        return self.conv(((waveform - mean) / torch.sqrt(variance + 1e-7)).unsqueeze(1))


def randomized(module: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial affine parameters, so that a dropped weight or bias shows."""
    torch.manual_seed(0)
    for name, parameter in module.named_parameters():
        if "norm" in name or name.startswith("1."):
            parameter.data = torch.randn_like(parameter)
    return module.eval()


def assert_written_in_means(module, cases, dynamic_shapes, written: dict[str, int]) -> None:
    """``module`` rewritten: no norm or variance left, the ops ``written`` (its means: a linear over a fixed count,
    global average pooling over a dynamic one) and eager's numbers on each case (the first, the example)."""
    counts = {**dict.fromkeys(NORMS, 0), **written}
    assert_rewrites(module, cases, "DecomposeNormalizationPass", counts, dynamic_shapes=dynamic_shapes)


def test_fp32_layer_norm_over_dynamic_length_is_one_delegate():
    module = randomized(LayerNormBlock())
    ends = [(torch.randn(1, 8, 32),), (torch.randn(1, 64, 32),)]
    stock, _ = lower_stock_and_rewritten(
        module, (torch.randn(1, 20, 32),), "DecomposeNormalizationPass", dynamic_shapes=({1: FRAMES},), also_run=ends
    )
    assert stock.ops_outside_delegates.get("aten.native_layer_norm") == 1


def test_fp32_layer_norm_as_the_program_output_is_written_in_means():
    module = randomized(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32)))
    cases = [(torch.randn(1, n, 32),) for n in (20, 8, 64)]
    # The module's linear, and the two means over the channels.
    assert_written_in_means(module, cases, ({1: FRAMES},), {"aten.linear.default": 3})


def test_fp32_group_norm_per_channel_over_dynamic_length_is_written_in_means():
    cases = [(torch.randn(1, n),) for n in (1000, 400, 4000)]
    # Each channel a row [N, C, 1, L], its two means over dims (2, 3): global average pooling.
    assert_written_in_means(randomized(GroupNormFrontEnd(groups=16)), cases, ({1: SAMPLES},), {"aten.mean.dim": 2})


def test_fp32_group_norm_with_several_channels_per_group_is_written_in_means():
    cases = [(torch.randn(1, n),) for n in (1000, 400, 4000)]
    assert_written_in_means(randomized(GroupNormFrontEnd(groups=4)), cases, ({1: SAMPLES},), {"aten.mean.dim": 2})


def test_fp32_waveform_mean_and_population_variance_are_written_in_means():
    samples = Dim("samples", min=400, max=16000)
    cases = [(0.1 * torch.randn(1, n),) for n in (1000, 400, 16000)]
    # The module's own mean and the variance's two, each over the samples.
    assert_written_in_means(WaveformNormalization().eval(), cases, ({1: samples},), {"aten.mean.dim": 3})


class SampleVariance(torch.nn.Module):
    def forward(self, x):
        return x.var(dim=-1, keepdim=True) * 2.0


def test_fp32_sample_variance_keeps_bessels_correction():
    assert_written_in_means(SampleVariance(), [(torch.randn(3, 10),)], None, {"aten.linear.default": 2})


def test_does_nothing_without_normalization():
    ep = export_aten(torch.nn.Linear(4, 4).eval(), (torch.randn(2, 4),))
    assert not DecomposeNormalizationPass(ep)(ep.graph_module).modified


STATISTICS_FRAMES = Dim("frames", min=4, max=64)


class StatisticsPooling(torch.nn.Module):
    """[1, T, C] -> [1, 4]: the mean and (unbiased) standard deviation over the frames, then a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.linear(torch.cat([x.mean(dim=1), x.std(dim=1)], dim=-1))


class ChannelVariance(torch.nn.Module):
    """[1, T, C]: the biased variance over fixed channels, kept (a hand-written instance norm's)."""

    def forward(self, x):
        return x / (x.var(dim=-1, keepdim=True, correction=0) + 1e-5)


def test_fp32_statistics_pooling_over_dynamic_frames_is_one_delegate():
    x = torch.randn(1, 20, 8)
    report = lower_and_compare(
        StatisticsPooling().eval(),
        (x,),
        dynamic_shapes=({1: STATISTICS_FRAMES},),
        also_run=[(torch.randn(1, 4, 8),), (torch.randn(1, 64, 8),)],
    )
    # The unbiased factor N / (N - 1) is a 0-d tensor of the frame count, computed before the one delegate.
    assert report.delegates == 1 and set(report.ops_outside_delegates) <= {"sym_size.int", "scalar_tensor.default"}
    assert "DecomposeNormalizationPass" in report.rewrites


def test_a_variance_over_fixed_sizes_is_means_and_a_constant_factor():
    cases = [(torch.randn(1, n, 8),) for n in (20, 4, 64)]
    counts = {"aten.var.correction": 0, "aten.var.dim": 0, "aten.scalar_tensor.default": 0}
    assert_rewrites(
        ChannelVariance(), cases, "DecomposeNormalizationPass", counts, dynamic_shapes=({1: STATISTICS_FRAMES},)
    )

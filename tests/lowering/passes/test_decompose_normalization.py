"""Layer norm, group norm and variance written with means: delegated whole, and the same numbers as eager.

Every lowering test runs the .pte with ExecuTorch's runtime and compares with eager
PyTorch at the shortest and longest length of the exported range.
"""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.decompose_normalization import DecomposeNormalizationPass
from tests.pipeline import export_aten, lower_and_compare

FRAMES = Dim("frames", min=8, max=64)


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


def test_fp32_layer_norm_over_dynamic_length_is_one_delegate():
    module = randomized(LayerNormBlock())
    x = torch.randn(1, 20, 32)
    stock = lower_and_compare(module, (x,), rewrite=False, dynamic_shapes=({1: FRAMES},))
    assert stock.ops_outside_delegates.get("aten.native_layer_norm") == 1
    report = lower_and_compare(
        module, (x,), dynamic_shapes=({1: FRAMES},), also_run=[(torch.randn(1, 8, 32),), (torch.randn(1, 64, 32),)]
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "DecomposeNormalizationPass" in report.rewrites


def test_fp32_layer_norm_as_the_program_output():
    module = randomized(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32)))
    report = lower_and_compare(
        module, (torch.randn(1, 20, 32),), dynamic_shapes=({1: FRAMES},), also_run=[(torch.randn(1, 64, 32),)]
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_fp32_group_norm_per_channel_over_dynamic_length_is_one_delegate():
    samples = Dim("samples", min=400, max=4000)
    module = randomized(GroupNormFrontEnd(groups=16))
    stock = lower_and_compare(module, (torch.randn(1, 1000),), rewrite=False, dynamic_shapes=({1: samples},))
    assert stock.ops_outside_delegates.get("aten.native_group_norm") == 1
    report = lower_and_compare(
        module,
        (torch.randn(1, 1000),),
        dynamic_shapes=({1: samples},),
        also_run=[(torch.randn(1, 400),), (torch.randn(1, 4000),)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_fp32_group_norm_with_several_channels_per_group_is_one_delegate():
    samples = Dim("samples", min=400, max=4000)
    report = lower_and_compare(
        randomized(GroupNormFrontEnd(groups=4)),
        (torch.randn(1, 1000),),
        dynamic_shapes=({1: samples},),
        also_run=[(torch.randn(1, 4000),)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_fp32_waveform_mean_and_population_variance_are_one_delegate():
    samples = Dim("samples", min=400, max=16000)
    module = WaveformNormalization().eval()
    stock = lower_and_compare(module, (torch.randn(1, 1000),), rewrite=False, dynamic_shapes=({1: samples},))
    assert {"aten.mean", "aten.var"} <= set(stock.ops_outside_delegates)
    report = lower_and_compare(
        module,
        (0.1 * torch.randn(1, 1000),),
        dynamic_shapes=({1: samples},),
        also_run=[(0.1 * torch.randn(1, 400),), (0.1 * torch.randn(1, 16000),)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


class SampleVariance(torch.nn.Module):
    def forward(self, x):
        return x.var(dim=-1, keepdim=True) * 2.0


def test_fp32_sample_variance_keeps_bessels_correction():
    report = lower_and_compare(SampleVariance(), (torch.randn(3, 10),))
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_does_nothing_without_normalization():
    ep = export_aten(torch.nn.Linear(4, 4).eval(), (torch.randn(2, 4),))
    assert not DecomposeNormalizationPass(ep)(ep.graph_module).modified

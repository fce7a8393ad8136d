"""Depthwise transposed convolutions as interleaved stride-1 phases: one delegate, equal to eager, over a dynamic
length; the padded, biased and triple-stride cases; left alone where a phase would need a crop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.depthwise_transposed_conv_as_phases import DepthwiseTransposedConvAsPhasesPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

FRAMES = Dim("frames", min=8, max=64)


class DepthwiseUpsampler(torch.nn.Module):
    """`F.conv_transpose1d(groups=C)` with a constant [C, 1, K] weight (BigVGAN's: K 12, stride 2, padding 11)."""

    def __init__(self, kernel: int = 12, stride: int = 2, padding: int = 11, bias: bool = False, channels: int = 8):
        super().__init__()
        self.weight = torch.randn(channels, 1, kernel)
        self.bias = torch.randn(channels) if bias else None
        self.stride, self.padding, self.channels = stride, padding, channels

    def forward(self, x):
        y = F.conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding, groups=self.channels)
        return torch.sin(y)


def ends() -> list[tuple[torch.Tensor]]:
    """Inputs at the shortest and the longest length of ``FRAMES``."""
    return [(torch.randn(1, 8, 8),), (torch.randn(1, 8, 64),)]


def test_fp32_bigvgan_depthwise_transposed_conv_over_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    module = DepthwiseUpsampler().eval()
    report = lower_and_compare(module, (torch.randn(1, 8, 20),), dynamic_shapes=({2: FRAMES},), also_run=ends())
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "DepthwiseTransposedConvAsPhasesPass" in report.rewrites


@pytest.mark.parametrize(
    "options",
    [{}, {"kernel": 6, "stride": 3, "padding": 0, "bias": True}],
    ids=["bigvgan-k12-s2-p11", "k6-s3-p0-bias"],
)
def test_fp32_depthwise_transposed_conv_over_dynamic_length_is_stride_one_convs_equal_to_eager(options):
    torch.manual_seed(0)
    module = DepthwiseUpsampler(**options).eval()
    x = torch.randn(1, 8, 20)
    ep = export_aten(module, (x,), dynamic_shapes=({2: FRAMES},))
    assert DepthwiseTransposedConvAsPhasesPass(ep)(ep.graph_module).modified
    targets = [node.target for node in ep.graph.nodes]
    assert torch.ops.aten.conv_transpose1d.default not in targets
    assert targets.count(torch.ops.aten.conv2d.default) == module.stride  # on one-column images
    assert len(ep.constants) == module.stride + (module.bias is not None)  # the original weight is dropped

    counts = {"aten.conv_transpose1d.default": 0}
    rewrite = "DepthwiseTransposedConvAsPhasesPass"
    assert_rewrites(module, [(x,), *ends()], rewrite, counts, dynamic_shapes=({2: FRAMES},))


class CroppedDepthwiseUpsampler(torch.nn.Module):
    """Mimi's upsampling of its latent: a depthwise transposed convolution, kernel 2s, stride s, no padding, whose
    output a slice cuts to s times the input's length, dropping ``s`` steps at the end."""

    def __init__(self, channels: int = 8, stride: int = 2) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose1d(channels, channels, 2 * stride, stride, groups=channels, bias=False)
        self.stride = stride

    def forward(self, x):
        y = self.up(x)
        return torch.sin(y[..., : y.shape[-1] - self.stride])


def test_fp32_cropped_depthwise_upsampler_takes_the_crop_in_and_is_one_delegate():
    torch.manual_seed(0)
    module = CroppedDepthwiseUpsampler().eval()
    report = lower_and_compare(module, (torch.randn(1, 8, 20),), dynamic_shapes=({2: FRAMES},), also_run=ends())
    assert (report.delegates, report.ops_outside_delegates) == (1, {})  # stock: the slice outside, two delegates
    assert "DepthwiseTransposedConvAsPhasesPass" in report.rewrites


def test_does_nothing_where_a_phase_would_need_a_crop_or_on_grouped_and_stride_one_convs():
    for module in (
        DepthwiseUpsampler(padding=15),  # BigVGAN's original crop: the first phase would start inside the input
        DepthwiseUpsampler(stride=1, padding=0),
    ):
        ep = export_aten(module.eval(), (torch.randn(1, 8, 20),))
        assert not DepthwiseTransposedConvAsPhasesPass(ep)(ep.graph_module).modified
    grouped = torch.nn.ConvTranspose1d(8, 8, 4, stride=2, padding=1, groups=2).eval()
    ep = export_aten(grouped, (torch.randn(1, 8, 20),))
    assert not DepthwiseTransposedConvAsPhasesPass(ep)(ep.graph_module).modified

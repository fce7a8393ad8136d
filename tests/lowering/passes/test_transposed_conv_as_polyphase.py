"""Strided transposed 1-D convolutions as one grouped stride-1 convolution and a phase interleave.

The upsampler's .pte runs with ExecuTorch's runtime, the weight-normed one's rewritten
program with PyTorch; each is compared with eager PyTorch at lengths of the exported
range.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

from audiodeploy.lowering.passes.transposed_conv_as_polyphase import TransposedConvAsPolyphasePass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

aten = torch.ops.aten

FRAMES = Dim("frames", min=8, max=400)


class Upsampler(torch.nn.Module):
    """HiFi-GAN's upsampling in small: kernel 2s, stride s, padding s / 2, a residual conv between."""

    def __init__(self) -> None:
        super().__init__()
        self.up1 = torch.nn.ConvTranspose1d(96, 64, 16, 8, padding=4)
        self.conv = torch.nn.Conv1d(64, 64, 3, padding=1)
        self.up2 = torch.nn.ConvTranspose1d(64, 64, 4, 2, padding=1)
        self.up3 = torch.nn.ConvTranspose1d(64, 64, 5, 5, output_padding=0)  # one phase group, no padding

    def forward(self, x):
        x = self.up1(torch.nn.functional.leaky_relu(x, 0.1))
        x = x + self.conv(torch.nn.functional.leaky_relu(x, 0.1))
        return self.up3(self.up2(x))


class CroppedUpsampler(torch.nn.Module):
    """EnCodec's and Mimi's upsampling: kernel 2s, stride s, no padding, the output cut to s times the input's length
    by a slice that drops ``k - s`` steps, all at the end (causal) or split between both ends."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, *, causal: bool) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose1d(in_channels, out_channels, 2 * stride, stride)
        self.drop_at_end = stride if causal else stride // 2
        self.drop_at_start = stride - self.drop_at_end

    def forward(self, x):
        y = self.up(x)
        end = y.shape[-1] - self.drop_at_end
        return torch.nn.functional.elu(y[..., self.drop_at_start : end])


class OddStrideUpsampler(torch.nn.Module):
    """DAC's upsampling at an odd stride: kernel 2s, padding ceil(s / 2), so the output is ``s T - 1`` steps and
    the phases fall in groups of 2 and 3; then a residual unit's convolution, as in DAC's decoder block."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.ConvTranspose1d(96, 64, 10, 5, padding=3)
        self.unit = torch.nn.Conv1d(64, 64, 7, padding=9, dilation=3)

    def forward(self, x):
        y = self.up(x)
        return y + self.unit(torch.sin(y))


def inputs() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, 96, n),) for n in (8, 37)]


def transposed_convolutions(ep) -> int:
    return sum(node.target == aten.conv_transpose1d.default for node in ep.graph.nodes)


def test_fp32_upsampler_is_polyphase_convolutions_in_one_delegate():
    torch.manual_seed(0)
    first, *others = inputs()
    report = lower_and_compare(Upsampler().eval(), first, dynamic_shapes=({2: FRAMES},), also_run=others)
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "TransposedConvAsPolyphasePass" in report.rewrites


def test_fp32_weight_norm_transposed_conv_is_reordered_then_folded():
    torch.manual_seed(0)
    module = Upsampler().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.nn.utils.weight_norm(module.up1)  # legacy, as HiFi-GAN's checkpoints hold it
    cases = [*inputs(), (torch.randn(1, 96, FRAMES.max),)]
    counts = {"aten.conv_transpose1d.default": 0, "aten._weight_norm.default": 0}
    result = assert_rewrites(module, cases, "TransposedConvAsPolyphasePass", counts, dynamic_shapes=({2: FRAMES},))
    assert len(result.folds) == 1 and result.not_folded == ()


@pytest.mark.parametrize(
    ("in_channels", "out_channels", "stride", "causal"),
    [(96, 64, 8, True), (16, 8, 5, True), (16, 8, 4, False)],
    ids=["causal", "causal-narrow", "split-crop-narrow"],
)
def test_fp32_cropped_upsampler_takes_the_crop_in_and_is_one_delegate(in_channels, out_channels, stride, causal):
    torch.manual_seed(0)
    module = CroppedUpsampler(in_channels, out_channels, stride, causal=causal).eval()
    cases = [(torch.randn(1, in_channels, n),) for n in (8, 23, 400)]
    report = lower_and_compare(module, cases[1], dynamic_shapes=({2: FRAMES},), also_run=[cases[0], cases[2]])
    assert (report.delegates, report.ops_outside_delegates) == (1, {})  # stock: the slice outside, two delegates
    assert "TransposedConvAsPolyphasePass" in report.rewrites


def test_fp32_odd_stride_upsampler_cut_short_and_in_unequal_phase_groups_is_one_delegate():
    torch.manual_seed(0)
    module = OddStrideUpsampler().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.nn.utils.weight_norm(module.up)  # computed, as DAC's
    first, *others = [*inputs(), (torch.randn(1, 96, FRAMES.max),)]
    report = lower_and_compare(module, first, dynamic_shapes=({2: FRAMES},), also_run=others)
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "TransposedConvAsPolyphasePass" in report.rewrites
    ep = export_aten(module, first, dynamic_shapes=({2: FRAMES},))
    assert TransposedConvAsPolyphasePass(ep)(ep.graph_module).modified
    assert transposed_convolutions(ep) == 0


@pytest.mark.parametrize(
    "layer",
    [
        torch.nn.ConvTranspose1d(64, 64, 8, 4, padding=1, output_padding=2),  # phase groups of sizes 3 and 1
        torch.nn.ConvTranspose1d(64, 64, 10, 5, padding=3),  # 5 T - 1 steps, groups of 2 and 3
        torch.nn.ConvTranspose1d(64, 64, 6, 3, padding=2, output_padding=1),  # 3 T - 1 steps
    ],
    ids=["unequal-groups", "odd-stride-cut", "cut-with-output-padding"],
)
def test_transposed_convolutions_of_unequal_phase_groups_or_cut_short_equal_eager(layer):
    torch.manual_seed(0)
    layer = layer.eval()
    x = torch.randn(1, 64, 20)
    ep = export_aten(layer, (x,), dynamic_shapes=({2: FRAMES},))
    assert TransposedConvAsPolyphasePass(ep)(ep.graph_module).modified
    assert transposed_convolutions(ep) == 0
    for n in (8, 20, 57):
        x = torch.randn(1, 64, n)
        torch.testing.assert_close(ep.module()(x), layer(x), rtol=1e-5, atol=1e-5)


def test_rewritten_program_keeps_no_transposed_convolution():
    ep = export_aten(Upsampler().eval(), inputs()[0], dynamic_shapes=({2: FRAMES},))
    assert transposed_convolutions(ep) == 3
    assert TransposedConvAsPolyphasePass(ep)(ep.graph_module).modified
    assert transposed_convolutions(ep) == 0


@pytest.mark.parametrize(
    "layer",
    [
        torch.nn.ConvTranspose1d(64, 32, 4, 2, padding=1),  # too narrow: the interleave costs more
        torch.nn.ConvTranspose1d(64, 64, 3, 2, padding=1),  # the stride does not divide the kernel
        torch.nn.ConvTranspose1d(64, 64, 4, 2, padding=3),  # crops beyond the padding: 2 T - 4 steps
        torch.nn.ConvTranspose1d(64, 64, 4, 2, padding=1, groups=2),
    ],
    ids=["narrow", "kernel-not-multiple", "crop", "grouped"],
)
def test_does_nothing_on_transposed_convolutions_it_cannot_write_as_phases(layer):
    ep = export_aten(layer.eval(), (torch.randn(1, 64, 20),))
    assert not TransposedConvAsPolyphasePass(ep)(ep.graph_module).modified

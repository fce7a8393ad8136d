"""1-D convolutions that read one another's output, written on one-column images: one delegate, equal to eager,
over a dynamic length, computed and constant weights; joined by residual connections too; a single convolution left
alone."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.conv_chains_as_images import ConvChainsAsImagesPass
from audiodeploy.lowering.passes.squeeze_unsqueeze_pairs import SqueezeUnsqueezePairsPass
from tests.pipeline import export_aten, lower_and_compare

aten = torch.ops.aten

FRAMES = Dim("frames", min=16, max=64)


class Chain(torch.nn.Module):
    """A weight-normed convolution and a leaky ReLU (HiFi-GAN's), a constant depthwise stride-2 low-pass and a
    dilated convolution (BigVGAN's activation output feeding its AMP block's convolution)."""

    def __init__(self, channels: int = 8, read_twice: bool = False) -> None:
        super().__init__()
        self.first = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(channels, channels, 3, padding=1))
        self.lowpass = torch.randn(channels, 1, 12)
        self.last = torch.nn.Conv1d(channels, channels, 3, padding=3, dilation=3)
        self.channels, self.read_twice = channels, read_twice

    def forward(self, x):
        y = F.leaky_relu(self.first(x), 0.1)
        z = F.conv1d(y, self.lowpass, stride=2, padding=5, groups=self.channels)
        out = self.last(z)
        return out + z if self.read_twice else out


def convolutions(ep) -> dict[str, int]:
    names = {aten.conv1d.default: "conv1d", aten.conv2d.default: "conv2d", aten.squeeze.dim: "squeeze"}
    counts = {name: 0 for name in names.values()}
    for node in ep.graph.nodes:
        if node.target in names:
            counts[names[node.target]] += 1
    return counts


def test_fp32_chain_of_computed_and_constant_weights_is_written_on_images_and_one_delegate_matches_eager():
    torch.manual_seed(0)
    module = Chain().eval()
    x = torch.randn(1, 8, 40)
    ep = export_aten(module, (x,), dynamic_shapes=({2: FRAMES},))
    assert ConvChainsAsImagesPass(ep)(ep.graph_module).modified
    assert convolutions(ep) == {"conv1d": 0, "conv2d": 3, "squeeze": 3}
    assert SqueezeUnsqueezePairsPass(ep)(ep.graph_module).modified  # what the lowering runs next
    assert convolutions(ep) == {"conv1d": 0, "conv2d": 3, "squeeze": 1}
    report = lower_and_compare(
        module, (x,), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 16),), (torch.randn(1, 8, 64),)]
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "ConvChainsAsImagesPass" in report.rewrites
    assert len(report.folds) == 1  # the weight norm, its unsqueeze included


def test_a_residual_connection_joins_convolutions_and_a_single_convolution_is_left_alone():
    torch.manual_seed(0)
    module = Chain(read_twice=True).eval()
    x = torch.randn(1, 8, 40)
    ep = export_aten(module, (x,), dynamic_shapes=({2: FRAMES},))
    assert ConvChainsAsImagesPass(ep)(ep.graph_module).modified
    assert convolutions(ep) == {"conv1d": 0, "conv2d": 3, "squeeze": 3}
    assert SqueezeUnsqueezePairsPass(ep)(ep.graph_module).modified
    assert convolutions(ep) == {"conv1d": 0, "conv2d": 3, "squeeze": 1}  # the residual add is on the image too
    report = lower_and_compare(module, (x,), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 64),)])
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    ep = export_aten(torch.nn.Conv1d(8, 8, 3).eval(), (torch.randn(1, 8, 40),))
    rewrite = ConvChainsAsImagesPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert rewrite.skipped == [("conv1d", "no elementwise ops join it to another 1-D convolution")]


class CausalChain(torch.nn.Module):
    """Mimi's causal convolutions: each pads its input on the left by its kernel less one, after an ELU."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv1d(8, 8, 7)
        self.second = torch.nn.Conv1d(8, 4, 3)

    def forward(self, x):
        y = self.first(F.pad(x, (6, 0)))
        return self.second(F.pad(F.elu(y), (2, 0)))


def test_a_padding_joins_convolutions_and_the_chain_is_one_image():
    torch.manual_seed(0)
    module = CausalChain().eval()
    x = torch.randn(1, 8, 40)
    ep = export_aten(module, (x,), dynamic_shapes=({2: FRAMES},))
    assert ConvChainsAsImagesPass(ep)(ep.graph_module).modified
    assert SqueezeUnsqueezePairsPass(ep)(ep.graph_module).modified
    assert convolutions(ep) == {"conv1d": 0, "conv2d": 2, "squeeze": 1}
    report = lower_and_compare(module, (x,), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 64),)])
    assert (report.delegates, report.ops_outside_delegates) == (1, {})

"""Elementwise ops moved past the squeezes of images they read, and a squeeze with the unsqueeze that undoes it dropped:
the ops run on the image, equal to eager in one delegate; a moved dimension or a signal nothing images again left."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes._graph import tensor_of
from audiodeploy.lowering.passes.squeeze_unsqueeze_pairs import SqueezeUnsqueezePairsPass, _pads_with_dimension
from tests.pipeline import export_aten, lower_and_compare

aten = torch.ops.aten

FRAMES = Dim("frames", min=8, max=64)


class RowImages(torch.nn.Module):
    """Two 2-D convolutions on one-row images, squeezed to a signal and unsqueezed between them."""

    def __init__(self, second_dim: int = 2, read_twice: bool = False) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(8, 8, 1)
        self.second = torch.nn.Conv2d(8, 8, 1)
        self.second_dim, self.read_twice = second_dim, read_twice

    def forward(self, x):
        signal = torch.nn.functional.gelu(self.first(x.unsqueeze(2)).squeeze(2))
        y = self.second(torch.tanh(signal).unsqueeze(self.second_dim)).squeeze(self.second_dim)
        return y + signal if self.read_twice else y


def squeezes(ep) -> int:
    return sum(1 for node in ep.graph.nodes if node.target in (aten.squeeze.dim, aten.unsqueeze.default))


def test_fp32_pair_around_elementwise_ops_is_dropped_and_one_delegate_matches_eager():
    torch.manual_seed(0)
    module = RowImages().eval()
    ep = export_aten(module, (torch.randn(1, 8, 20),), dynamic_shapes=({2: FRAMES},))
    before = squeezes(ep)
    assert SqueezeUnsqueezePairsPass(ep)(ep.graph_module).modified
    assert squeezes(ep) == before - 2
    report = lower_and_compare(
        module, (torch.randn(1, 8, 20),), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 64),)]
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


class ResidualBlock(torch.nn.Module):
    """HiFi-GAN's second residual block on one-column images: ``x + conv(leaky_relu(x))`` twice, a per-channel
    constant scale (BigVGAN's Snake keeps its alpha so), and the block's input ``x`` a signal no image gave."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(channels, channels, (3, 1), padding=(1, 0))
        self.second = torch.nn.Conv2d(channels, channels, (3, 1), padding=(1, 0))
        self.scale = torch.nn.Parameter(torch.rand(channels, 1) + 0.5)

    def forward(self, x):
        def conv(layer, signal):
            return layer(torch.nn.functional.leaky_relu(signal, 0.1).unsqueeze(-1)).squeeze(-1)

        y = conv(self.first, x) + x
        return conv(self.second, y) * self.scale + y


def test_residual_adds_of_a_signal_and_a_constant_scale_run_on_the_image_and_one_delegate_matches_eager():
    torch.manual_seed(0)
    module = ResidualBlock().eval()
    x = torch.randn(1, 8, 20)
    ep = export_aten(module, (x,), dynamic_shapes=({2: FRAMES},))
    assert SqueezeUnsqueezePairsPass(ep)(ep.graph_module).modified
    on_signal = [n.target for n in ep.graph.nodes if n.op == "call_function" and tensor_of(n).dim() == 3]
    # the block's input is made an image once; one leaky ReLU reads it before; the output is squeezed once
    assert sorted(map(str, on_signal)) == ["aten.leaky_relu.default", "aten.squeeze.dim"]
    report = lower_and_compare(module, (x,), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 64),)])
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


class Gated(torch.nn.Module):
    """An image's squeeze scaled by a signal, then read by no image op."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return torch.tanh(self.conv(x.unsqueeze(-1)).squeeze(-1) * x)


def test_does_nothing_when_the_dimension_moves_or_a_signal_read_is_never_an_image_again():
    ep = export_aten(RowImages(second_dim=3).eval(), (torch.randn(1, 8, 20),))
    SqueezeUnsqueezePairsPass(ep)(ep.graph_module)  # the gelu and the tanh move onto the image; the unsqueeze stays
    assert [n.args[1] for n in ep.graph.nodes if n.target == aten.unsqueeze.default] == [2, 3]
    ep = export_aten(Gated().eval(), (torch.randn(1, 8, 20),))
    rewrite = SqueezeUnsqueezePairsPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert ("mul", "it also reads a signal, and nothing it feeds through elementwise ops is an image again") in (
        rewrite.skipped
    )


class CausalUnits(torch.nn.Module):
    """Mimi's causal convolutions on one-column images: each pads its input on the left (``F.pad`` by
    ``kernel - 1`` zeros, and ``constant_pad_nd`` by a number), after an ELU, between squeeze and unsqueeze."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(8, 8, (3, 1))
        self.second = torch.nn.Conv2d(8, 8, (5, 1))

    def forward(self, x):
        y = self.first(torch.nn.functional.pad(x, (2, 0)).unsqueeze(-1)).squeeze(-1)
        y = torch.constant_pad_nd(torch.nn.functional.elu(y), [4, 0], 0.5)
        return self.second(y.unsqueeze(-1)).squeeze(-1)


def test_a_padding_between_images_pads_the_image_and_one_delegate_matches_eager():
    """Each such padding cost XNNPACK two transposes of the signal (Mimi's encoder at 10 s: about 40 of 374 ms)."""
    torch.manual_seed(0)
    module = CausalUnits().eval()
    x = torch.randn(1, 8, 20)
    ep = export_aten(module, (x,), dynamic_shapes=({2: FRAMES},))
    assert SqueezeUnsqueezePairsPass(ep)(ep.graph_module).modified
    paddings = [n for n in ep.graph.nodes if n.target in (aten.pad.default, aten.constant_pad_nd.default)]
    # the input's padding stays on the signal (no image gave it); the one between the convolutions pads the
    # image's time, not its size-one column, with the same number
    assert [(tensor_of(n).dim(), n.args[1:]) for n in paddings] == [(3, ([2, 0],)), (4, ([0, 0, 4, 0], 0.5))]
    assert squeezes(ep) == 2  # the input's unsqueeze and the output's squeeze
    report = lower_and_compare(module, (x,), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 64),)])
    assert (report.delegates, report.ops_outside_delegates) == (1, {})


def test_pads_keep_their_dimensions_when_a_size_one_dimension_is_inserted():
    assert _pads_with_dimension([6, 0], rank=3, dim=3) == [0, 0, 6, 0]
    assert _pads_with_dimension([6, 0], rank=3, dim=2) == [6, 0]
    assert _pads_with_dimension([1, 2, 3, 4], rank=3, dim=2) == [1, 2, 0, 0, 3, 4]
    assert _pads_with_dimension([1, 2, 3, 4], rank=3, dim=0) == [1, 2, 3, 4]

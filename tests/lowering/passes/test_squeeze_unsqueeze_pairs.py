"""A squeeze and the unsqueeze that undoes it, with elementwise ops between: dropped, the ops applied to the image."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.squeeze_unsqueeze_pairs import SqueezeUnsqueezePairsPass
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


def test_does_nothing_when_the_signal_is_read_elsewhere_or_the_dimension_moves():
    for module in (RowImages(read_twice=True), RowImages(second_dim=3)):
        ep = export_aten(module.eval(), (torch.randn(1, 8, 20),))
        assert not SqueezeUnsqueezePairsPass(ep)(ep.graph_module).modified

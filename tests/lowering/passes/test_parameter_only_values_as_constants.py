"""Values computed from parameters alone as constants: Snake's exp and reciprocal in the delegate, GEMM weights left
to the weight fold, nothing that would grow the program."""

from __future__ import annotations

import torch
from torch.export import Dim
from torch.nn.utils import weight_norm

from audiodeploy.lowering.passes.parameter_only_values_as_constants import ParameterOnlyValuesAsConstantsPass
from tests.pipeline import export_aten, lower_and_compare

FRAMES = Dim("frames", min=4, max=64)


class SnakeBetaConv(torch.nn.Module):
    """BigVGAN's SnakeBeta in log scale after a weight-normed convolution."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv = weight_norm(torch.nn.Conv1d(channels, channels, 3, padding=1))
        self.alpha = torch.nn.Parameter(torch.randn(channels) * 0.2)
        self.beta = torch.nn.Parameter(torch.randn(channels) * 0.2)

    def forward(self, x):
        x = self.conv(x)
        alpha = torch.exp(self.alpha.unsqueeze(0).unsqueeze(-1))
        beta = torch.exp(self.beta.unsqueeze(0).unsqueeze(-1))
        return x + (1.0 / (beta + 1e-9)) * torch.pow(torch.sin(x * alpha), 2)


class ExpandedBias(torch.nn.Module):
    """A [C] parameter expanded over a fixed length: storing it would write 16 times its bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(8, 1))

    def forward(self, x):
        return x + torch.exp(self.bias).expand(8, 16)


def test_fp32_snake_parameters_become_constants_in_one_delegate():
    torch.manual_seed(0)
    module = SnakeBetaConv().eval()
    x = torch.randn(1, 8, 20)
    stock = lower_and_compare(module, (x,), rewrite=False, dynamic_shapes=({2: FRAMES},))
    assert stock.ops_outside_delegates.get("aten.reciprocal") == 1
    report = lower_and_compare(module, (x,), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 64),)])
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert report.rewrites == ("ParameterOnlyValuesAsConstantsPass",)
    assert len(report.folds) == 1 and report.not_folded == ()  # the weight norm is still the fold's


def test_leaves_gemm_weights_and_growing_values_as_computed():
    torch.manual_seed(0)
    snake = export_aten(SnakeBetaConv().eval(), (torch.randn(1, 8, 20),))
    assert ParameterOnlyValuesAsConstantsPass(snake)(snake.graph_module).modified
    targets = [node.target for node in snake.graph.nodes]
    assert torch.ops.aten._weight_norm_interface.default in targets or torch.ops.aten._weight_norm.default in targets
    assert torch.ops.aten.exp.default not in targets and torch.ops.aten.reciprocal.default not in targets
    assert {"alpha", "beta"}.isdisjoint(snake.state_dict)  # the sources are dropped with their computation

    expanded = export_aten(ExpandedBias(), (torch.randn(8, 16),))
    assert not ParameterOnlyValuesAsConstantsPass(expanded)(expanded.graph_module).modified

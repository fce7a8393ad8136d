"""GELUs written with erf, as the gelu op XNNPACK delegates: one delegate, eager's numbers."""

from __future__ import annotations

import math

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.erf_gelu_as_gelu import ErfGeluAsGeluPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class ConvWrittenGeluConv(torch.nn.Module):
    """A convolution, transformers' ``GELUActivation(use_gelu_python=True)``, a convolution."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.first = torch.nn.Conv1d(channels, channels, 3, padding=1)
        self.second = torch.nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        h = self.first(x)
        return self.second(h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0))))


class WrittenGelus(torch.nn.Module):
    """The same function in three more spellings."""

    def forward(self, x):
        a = 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))
        b = x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0)))) / 2.0
        c = (x * 3.0) * (torch.erf(x * 0.7071067811865476) + 1.0) * (1.0 / 6.0)
        return torch.cat([a, b, c], 1)


def test_fp32_gelu_written_with_erf_over_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    stock, report = lower_stock_and_rewritten(
        ConvWrittenGeluConv().eval(),
        (torch.randn(1, 8, 20),),
        "ErfGeluAsGeluPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 8, 4),), (torch.randn(1, 8, 64),)],
    )
    assert stock.delegates == 2 and stock.ops_outside_delegates == {"aten.erf": 1}, stock


def test_fp32_every_spelling_of_the_erf_gelu_is_one_gelu():
    cases = [(3 * torch.randn(1, 4, n),) for n in (20, 4, 64)]
    counts = {"aten.erf.default": 0, "aten.gelu.default": 3, "aten.mul.Tensor": 0, "aten.div.Tensor": 0}
    assert_rewrites(WrittenGelus(), cases, "ErfGeluAsGeluPass", counts, dynamic_shapes=({2: FRAMES},))


class NotGelus(torch.nn.Module):
    def forward(self, x, y):
        alone = x + torch.erf(x)
        other_scale = 0.5 * x * (1 + torch.erf(x / 2.0))
        other_factor = 0.5 * y * (1 + torch.erf(x / math.sqrt(2.0)))
        half_missing = x * (1 + torch.erf(x / math.sqrt(2.0)))
        return alone, other_scale, other_factor, half_missing


def test_leaves_erf_outside_a_gelu_with_its_reason():
    ep = export_aten(NotGelus(), (torch.randn(1, 4, 8), torch.randn(1, 4, 8)))
    rewrite = ErfGeluAsGeluPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "1 + erf is not in a product 0.5 * x * (1 + erf) of the same x",
        "1 + erf is not in a product 0.5 * x * (1 + erf) of the same x",
        "its argument is not x / sqrt(2) or x * (1 / sqrt(2))",
        "its argument is not x / sqrt(2) or x * (1 / sqrt(2))",
    ], rewrite.skipped

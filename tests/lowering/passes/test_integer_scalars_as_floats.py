"""Integer scalars of float32 arithmetic as floats: no int64 constant cast outside the delegate."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.integer_scalars_as_floats import IntegerScalarsAsFloatsPass
from tests.pipeline import export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class Quantize(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 3, 1)

    def forward(self, x):
        return self.conv(torch.floor(4 * x) / 4 - 1)


def test_fp32_integer_scalars_leave_no_cast_outside_the_delegate():
    torch.manual_seed(0)
    stock, _ = lower_stock_and_rewritten(
        Quantize().eval(),
        (torch.randn(1, 3, 20),),
        "IntegerScalarsAsFloatsPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 3, 4),), (torch.randn(1, 3, 64),)],
        atol=0.0,
    )
    assert stock.ops_outside_delegates.get("dim_order_ops._to_dim_order_copy") == 3, stock


class Others(torch.nn.Module):
    def forward(self, x, n):
        return x * 2**25, n * 2, x + True, x * 0.5


def test_leaves_other_arithmetic_with_its_reasons():
    ep = export_aten(Others(), (torch.randn(2, 3), torch.randint(0, 9, (2, 3))))
    rewrite = IntegerScalarsAsFloatsPass(ep)
    assert not rewrite(ep.graph_module).modified
    other = "not arithmetic of a float32 tensor and an integer scalar"
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "its integer is not exact as a float32",
        other,
        other,
        other,
    ], rewrite.skipped

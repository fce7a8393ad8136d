"""A 1-D average pooling written as XNNPACK's 2-D one on a one-column image: one delegate at a dynamic length."""

from __future__ import annotations

import torch
from torch.export import Dim

from tests.pipeline import assert_rewrites, lower_stock_and_rewritten

PAIRS = 2 * Dim("pairs", min=4, max=32)


class ConvPoolLinear(torch.nn.Module):
    """SEW's squeezing: frames averaged in pairs between a convolution and a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1)
        self.pool = torch.nn.AvgPool1d(2, 2)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.linear(self.pool(self.conv(x.transpose(1, 2))).transpose(1, 2))


class PaddedPool(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.avg_pool1d(x, 3, stride=2, padding=1, count_include_pad=False) * 2.0


def test_fp32_average_pooling_between_gemms_over_dynamic_length_is_one_delegate():
    stock, report = lower_stock_and_rewritten(
        ConvPoolLinear().eval(),
        (torch.randn(1, 40, 8),),
        "AveragePoolingAsImagePass",
        dynamic_shapes=({1: PAIRS},),
        also_run=[(torch.randn(1, 8, 8),), (torch.randn(1, 64, 8),)],
    )
    assert stock.delegates > 1 and stock.ops_outside_delegates.get("aten.squeeze_copy") == 1


def test_padding_and_its_count_carry_over_to_the_image():
    cases = [(torch.randn(1, 4, n),) for n in (21, 8, 64)]
    counts = {"aten.avg_pool1d.default": 0, "aten.avg_pool2d.default": 1}
    assert_rewrites(
        PaddedPool(), cases, "AveragePoolingAsImagePass", counts, dynamic_shapes=({2: Dim("t", min=8, max=64)},)
    )

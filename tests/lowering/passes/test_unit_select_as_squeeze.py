"""The selection of a size-1 dimension's one entry as a squeeze: one delegate instead of two around a select_copy;
a selection from a longer dimension is left with its reason."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.unit_select_as_squeeze import UnitSelectAsSqueezePass
from tests.pipeline import export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class FirstOfBatch(torch.nn.Module):
    """A projection of a batch of one and its ``[0]``, then more delegated work."""

    def __init__(self) -> None:
        super().__init__()
        self.projection = torch.nn.Linear(6, 5)

    def forward(self, x):
        return torch.tanh(self.projection(x)[0]) * 2.0


def test_fp32_first_of_a_batch_of_one_is_one_delegate():
    torch.manual_seed(0)
    stock, _ = lower_stock_and_rewritten(
        FirstOfBatch().eval(),
        (torch.randn(1, 20, 6),),
        "UnitSelectAsSqueezePass",
        dynamic_shapes=({1: FRAMES},),
        also_run=[(torch.randn(1, 4, 6),), (torch.randn(1, 64, 6),)],
    )
    assert "aten.select_copy" in stock.ops_outside_delegates, stock


def test_leaves_a_selection_from_a_longer_dimension_with_its_reason():
    ep = export_aten(FirstOfBatch().eval(), (torch.randn(2, 20, 6),))
    rewrite = UnitSelectAsSqueezePass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == ["dimension 0 has 2 entries, not one"], rewrite.skipped

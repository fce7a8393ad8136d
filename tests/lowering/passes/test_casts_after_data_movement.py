"""Casts out of float32 moved after the views and stacks that read them: those run inside the delegate, and one
cast leaves it at the end."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.casts_after_data_movement import CastsAfterDataMovementPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

FRAMES = Dim("frames", min=4, max=64)


class StackedCodes(torch.nn.Module):
    """Two rows of integer codes computed as floats, cast where they are computed, then reshaped and stacked."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv1d(4, 1, 1)
        self.second = torch.nn.Conv1d(4, 1, 1)

    def forward(self, x):
        codes = [
            torch.floor(conv(x).abs()).to(torch.int64).transpose(1, 2).reshape(1, -1)
            for conv in (self.first, self.second)
        ]
        return torch.stack(codes, 1)


def test_fp32_stacked_codes_are_one_delegate_and_one_cast():
    torch.manual_seed(0)
    cases = [(3 * torch.randn(1, 4, n),) for n in (20, 4, 64)]
    stock = lower_and_compare(StackedCodes().eval(), cases[0], rewrite=False, dynamic_shapes=({2: FRAMES},))
    report = lower_and_compare(StackedCodes().eval(), cases[0], dynamic_shapes=({2: FRAMES},), also_run=cases[1:])
    assert stock.ops_outside_delegates.get("aten.view_copy", 0) >= 2 and "aten.cat" in stock.ops_outside_delegates
    assert report.delegates == 1 and report.ops_outside_delegates == {"dim_order_ops._to_dim_order_copy": 1}, report
    assert "CastsAfterDataMovementPass" in report.rewrites


def test_fp32_cast_moves_past_each_data_movement_and_stays_for_its_other_users():
    cases = [(3 * torch.randn(1, 4, n),) for n in (20, 4, 64)]
    counts = {"aten._to_copy.default": 1, "aten.stack.default": 0, "aten.cat.default": 1}
    result = assert_rewrites(
        StackedCodes().eval(), cases, "CastsAfterDataMovementPass", counts, dynamic_shapes=({2: FRAMES},)
    )
    (output,) = result.program.graph.find_nodes(op="output")
    assert output.args[0][0].target == torch.ops.aten._to_copy.default


class OtherCasts(torch.nn.Module):
    def forward(self, x, n):
        return (
            x.to(torch.float16).reshape(-1),
            torch.cat([x.to(torch.int64), x.to(torch.int32)]),
            n.to(torch.int32).transpose(0, 1),
            torch.stack([x.to(torch.int64), x]),
        )


def test_leaves_other_casts_with_their_reasons():
    ep = export_aten(OtherCasts(), (torch.randn(2, 3), torch.randint(0, 9, (2, 3))))
    rewrite = CastsAfterDataMovementPass(ep)
    assert not rewrite(ep.graph_module).modified
    reason = "not every tensor it reads is a cast from float32 to one dtype that is not a float"
    assert [r for _, r in rewrite.skipped] == [reason] * 4, rewrite.skipped

"""A straight-through estimator's detach, a slice of a whole dimension and a concatenation of one tensor, dropped:
one delegate instead of two around an alias_copy or a cat."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.drop_aliases import DropAliasesPass
from tests.pipeline import export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class StraightThrough(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.before = torch.nn.Conv1d(3, 3, 1)
        self.after = torch.nn.Conv1d(3, 3, 1)

    def forward(self, x):
        latents = self.before(x)
        quantized = torch.floor(latents)
        return self.after(latents + (quantized - latents).detach())


def test_fp32_straight_through_estimator_is_one_delegate():
    torch.manual_seed(0)
    stock, _ = lower_stock_and_rewritten(
        StraightThrough().eval(),
        (torch.randn(1, 3, 20),),
        "DropAliasesPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 3, 4),), (torch.randn(1, 3, 64),)],
    )
    assert "aten.alias_copy" in stock.ops_outside_delegates, stock


class WholeSliceOfPadded(torch.nn.Module):
    """EnCodec's _pad1d: the padded signal cut back by the extra padding, which is none: an ``alias`` of it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 3, 3)

    def forward(self, x):
        padded = torch.nn.functional.pad(x, (2, 0))
        return self.conv(padded[..., : padded.shape[-1] - 0])


def test_fp32_a_slice_of_a_whole_dimension_is_one_delegate():
    torch.manual_seed(0)
    program = export_aten(WholeSliceOfPadded().eval(), (torch.randn(1, 3, 20),))
    assert "aten.alias.default" in {str(n.target) for n in program.graph.nodes}  # what export makes of it
    lower_stock_and_rewritten(
        WholeSliceOfPadded().eval(), (torch.randn(1, 3, 20),), "DropAliasesPass", also_run=[(torch.randn(1, 3, 20),)]
    )


class ConcatenationOfOne(torch.nn.Module):
    """A residual quantizer with one codebook: its codes concatenated from a list of one."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 3, 1)

    def forward(self, x):
        return torch.tanh(torch.cat([self.conv(x)], dim=1))


def test_fp32_a_concatenation_of_one_tensor_is_one_delegate():
    torch.manual_seed(0)
    stock, _ = lower_stock_and_rewritten(
        ConcatenationOfOne().eval(),
        (torch.randn(1, 3, 20),),
        "DropAliasesPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 3, 4),)],
    )
    assert "aten.cat" in stock.ops_outside_delegates, stock


class Returned(torch.nn.Module):
    def forward(self, x):
        return (x * 2).detach()


def test_leaves_a_returned_detach_with_its_reason():
    ep = export_aten(Returned(), (torch.randn(2, 3),))
    rewrite = DropAliasesPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == ["the program returns it"], rewrite.skipped

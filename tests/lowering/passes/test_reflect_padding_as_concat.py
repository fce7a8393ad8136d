"""Reflect paddings of the last dimension as concatenations: one delegate over a dynamic or fixed length."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.reflect_padding_as_concat import ReflectPaddingAsConcatPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=8, max=64)


class ReflectPaddedConv(torch.nn.Module):
    """A codec's convolution with reflect padding: pad 3 left and 2 right, a kernel of 6; twice at one length, so
    both paddings share one selector."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(channels, channels, 6)

    def forward(self, x):
        first = F.pad(x, (3, 2), mode="reflect")
        second = F.pad(torch.tanh(x), (3, 2), mode="reflect")
        return self.conv(first * second)


class Padded(torch.nn.Module):
    def __init__(self, mode: str, padding: tuple[int, ...]) -> None:
        super().__init__()
        self.mode, self.padding = mode, padding

    def forward(self, x):
        return F.pad(x, self.padding, mode=self.mode) * 2.0


def test_fp32_reflect_padding_over_dynamic_length_is_one_delegate_and_exact():
    torch.manual_seed(0)
    stock, report = lower_stock_and_rewritten(
        ReflectPaddedConv().eval(),
        (torch.randn(1, 4, 20),),
        "ReflectPaddingAsConcatPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 4, 8),), (torch.randn(1, 4, 64),)],
        atol=1e-6,
    )
    assert "aten.index" in stock.ops_outside_delegates and "aten.arange" in stock.ops_outside_delegates, stock


def test_paddings_of_one_length_share_one_selector():
    ep = export_aten(ReflectPaddedConv().eval(), (torch.randn(1, 4, 20),), dynamic_shapes=({2: FRAMES},))
    assert ReflectPaddingAsConcatPass(ep)(ep.graph_module).modified
    targets = [node.target for node in ep.graph.nodes]
    assert targets.count(torch.ops.aten.pad.default) == 0
    assert targets.count(torch.ops.aten.bmm.default) == 2
    # The row of ones and its one-hot columns, once; the module's own convolution.
    assert targets.count(torch.ops.aten.conv1d.default) == 3


def test_fp32_reflect_padding_of_a_dynamic_batch_or_one_side_or_fixed_length_is_exact():
    torch.manual_seed(0)
    rewrite = "ReflectPaddingAsConcatPass"
    # Two signals: the rows of [2, 3, T] are viewed as [1, 6, T] for the selection; as wide as the shortest allows.
    batch = [(torch.randn(2, 3, n),) for n in (20, 8, 64)]
    counts = {"aten.pad.default": 0, "aten.cat.default": 1, "aten.bmm.default": 1}
    assert_rewrites(Padded("reflect", (7, 7)), batch, rewrite, counts, dynamic_shapes=({2: FRAMES},), atol=0)
    right_only = [(torch.randn(1, 3, n),) for n in (20, 8)]
    assert_rewrites(Padded("reflect", (0, 1)), right_only, rewrite, counts, dynamic_shapes=({2: FRAMES},), atol=0)
    # At one length the edges are static slices of one sample each: no selector.
    fixed = {"aten.pad.default": 0, "aten.cat.default": 1, "aten.slice.Tensor": 5, "aten.bmm.default": 0}
    assert_rewrites(Padded("reflect", (3, 2)), [(torch.randn(1, 4, 20),)], rewrite, fixed, atol=0)


def test_leaves_other_paddings_with_their_reasons():
    cases = [
        (Padded("constant", (2, 3)), torch.randn(1, 4, 20), "not a reflect padding"),
        (Padded("replicate", (2, 3)), torch.randn(1, 4, 20), "not a reflect padding"),
        (Padded("reflect", (1, 1, 2, 2)), torch.randn(1, 4, 6, 20), None),
    ]
    for module, x, reason in cases:
        ep = export_aten(module, (x,))
        rewrite = ReflectPaddingAsConcatPass(ep)
        assert not rewrite(ep.graph_module).modified
        if reason is not None:
            assert [r for _, r in rewrite.skipped] == [reason], rewrite.skipped

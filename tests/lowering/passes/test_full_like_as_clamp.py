"""Fills shaped like an activation (full_like, zeros_like, ones_like, new_*) as a clamp to [c, c]: one delegate."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.full_like_as_clamp import FullLikeAsClampPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class MeanOnlyCoupling(torch.nn.Module):
    """VITS's mean-only coupling layer, reversed: the log-scale is ``zeros_like(mean)``; plus a ``full_like`` and a
    ``ones_like`` offset, so that each fill op is in the program."""

    def __init__(self, half: int = 4) -> None:
        super().__init__()
        self.half = half
        self.pre = torch.nn.Conv1d(half, half, 3, padding=1)
        self.post = torch.nn.Conv1d(half, half, 1)

    def forward(self, x):
        first, second = x[:, : self.half], x[:, self.half :]
        mean = self.post(torch.tanh(self.pre(first)))
        log_scale = torch.zeros_like(mean)
        second = (second - mean) * torch.exp(-log_scale)
        offset = torch.full_like(second, 0.25) + torch.ones_like(first)
        return torch.cat([first, second + offset], 1)


class Fills(torch.nn.Module):
    def forward(self, x):
        y = x * 2.0
        return torch.cat([torch.zeros_like(y), y.new_ones(y.shape), y.new_full(y.shape, -3.0), y.new_zeros(y.shape)], 1)


def test_fp32_fills_of_an_activation_over_dynamic_length_are_one_delegate():
    torch.manual_seed(0)
    module = MeanOnlyCoupling().eval()
    stock, report = lower_stock_and_rewritten(
        module,
        (torch.randn(1, 8, 20),),
        "FullLikeAsClampPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 8, 4),), (torch.randn(1, 8, 64),)],
    )
    # zeros_like and ones_like are full_like after edge lowering; the channel slices are another pass's.
    assert stock.delegates > 1 and stock.ops_outside_delegates.get("aten.full_like") == 3, stock
    assert "ChannelSelectionsAsConvolutionsPass" in report.rewrites


def test_fp32_every_fill_form_is_a_clamp_of_its_input():
    cases = [(torch.randn(1, 3, n),) for n in (20, 4, 64)]
    counts = {
        "aten.zeros_like.default": 0,
        "aten.new_ones.default": 0,
        "aten.new_full.default": 0,
        "aten.new_zeros.default": 0,
        "aten.clamp.default": 4,
    }
    assert_rewrites(Fills(), cases, "FullLikeAsClampPass", counts, dynamic_shapes=({2: FRAMES},))


class FullOfEdges(torch.nn.Module):
    def forward(self, x):
        y = x * 1e30 * 1e30  # +-inf where x is not 0, NaN where x is NaN
        return torch.full_like(y, 0.5)


def test_the_clamp_gives_the_fill_value_for_infinities_and_nan_for_nan():
    # The documented difference: full_like gives the fill value everywhere, the clamp NaN where its input is NaN.
    ep = export_aten(FullOfEdges(), (torch.randn(1, 2, 8),), dynamic_shapes=({2: FRAMES},))
    assert FullLikeAsClampPass(ep)(ep.graph_module).modified
    x = torch.tensor([[[1.0, -1.0, 0.0, float("nan")], [3.0, -2.0, 5.0, 1.0]]])
    result = ep.module(check_guards=False)(x)
    expected = torch.full_like(x, 0.5)
    expected[0, 0, 3] = float("nan")
    torch.testing.assert_close(result, expected, equal_nan=True, rtol=0, atol=0)


class OtherFills(torch.nn.Module):
    def forward(self, x):
        integers = torch.full_like(x, 3, dtype=torch.long)
        infinite = torch.full_like(x, float("-inf"))
        wider = x.new_zeros((1, 4, x.shape[2]))
        return integers, infinite, wider


def test_leaves_integer_infinite_or_reshaped_fills_with_their_reasons():
    ep = export_aten(OtherFills(), (torch.randn(1, 2, 8),), dynamic_shapes=({2: FRAMES},))
    rewrite = FullLikeAsClampPass(ep)
    assert not rewrite(ep.graph_module).modified
    reasons = sorted(reason for _, reason in rewrite.skipped)
    assert reasons == [
        "fills with -inf, not a finite number",
        "its input or its result is not a float32 tensor",
        "the shape it asks for is not its input's",
    ], rewrite.skipped

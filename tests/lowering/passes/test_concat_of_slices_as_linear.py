"""A concatenation of (negated) slices of the last dimension (rotary embeddings' rotate-half) as a linear: exact,
and one delegate at any length."""

from __future__ import annotations

import torch
from torch.export import Dim

from tests.pipeline import assert_rewrites, lower_stock_and_rewritten, op_counts, rewritten

FRAMES = Dim("frames", min=4, max=48)
REWRITE = "ConcatOfSlicesAsLinearPass"


class RotateHalfHeads(torch.nn.Module):
    """Projected features split into heads, each rotated by halves (``cat(-x2, x1)``) and scaled, as rotary
    embeddings do, then projected back."""

    def __init__(self, features: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.head_size = heads, features // heads
        self.proj = torch.nn.Linear(features, features)
        self.scale = torch.nn.Parameter(torch.randn(self.head_size))
        self.out = torch.nn.Linear(features, features)

    def forward(self, x):
        n, t, _ = x.shape
        h = self.proj(x).view(n, t, self.heads, self.head_size).transpose(0, 1)
        half = self.head_size // 2
        rotated = torch.cat((-h[..., half:], h[..., :half]), dim=-1)
        y = h + rotated * self.scale
        return self.out(y.transpose(0, 1).reshape(n, t, -1))


def cases() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, n, 16),) for n in (20, 4, 48)]


def test_fp32_rotate_half_is_one_linear_with_no_slices_or_cat():
    torch.manual_seed(0)
    result = assert_rewrites(
        RotateHalfHeads().eval(),
        cases(),
        REWRITE,
        {"aten.slice.Tensor": 0, "aten.neg.default": 0, "aten.cat.default": 0},
        dynamic_shapes=({1: FRAMES},),
    )
    assert op_counts(result.program)["aten.linear.default"] >= 3


def test_fp32_concat_along_another_dimension_is_left_with_its_reason():
    class ConcatOfTimeSlices(torch.nn.Module):
        def forward(self, x):
            return torch.cat((x[:, :, 8:], -x[:, :, :8]), dim=1)

    result = rewritten(ConcatOfTimeSlices(), cases()[0], ({1: FRAMES},))
    assert REWRITE not in result.changed
    assert op_counts(result.program)["aten.cat.default"] == 1


def test_fp32_rotate_half_over_dynamic_length_is_one_delegate_and_matches_eager():
    torch.manual_seed(0)
    first, *others = cases()
    stock, _ = lower_stock_and_rewritten(
        RotateHalfHeads().eval(), first, REWRITE, dynamic_shapes=({1: FRAMES},), also_run=others[:1]
    )
    assert stock.delegates > 1 and stock.ops_outside_delegates["aten.slice_copy"] == 2, stock

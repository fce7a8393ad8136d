"""Slices of a head's features (partial and interleaved rotary embeddings) as linears with a selection weight:
exact, and one delegate at any length."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.feature_slices_as_linears import FeatureSlicesAsLinearsPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=48)
REWRITE = "FeatureSlicesAsLinearsPass"


class PartialInterleavedRotation(torch.nn.Module):
    """transformers' Moonshine: the first ``rotated`` features of each head rotated in interleaved pairs
    (``stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)``), the others passed, then concatenated back."""

    def __init__(self, features: int = 16, heads: int = 2, rotated: int = 4) -> None:
        super().__init__()
        self.heads, self.head_size, self.rotated = heads, features // heads, rotated
        self.proj = torch.nn.Linear(features, features)
        self.scale = torch.nn.Parameter(torch.randn(rotated))
        self.out = torch.nn.Linear(features, features)

    def forward(self, x):
        n, t, _ = x.shape
        h = self.proj(x).view(n, t, self.heads, self.head_size).transpose(1, 2)
        turned, passed = h[..., : self.rotated], h[..., self.rotated :]
        pairs = torch.stack((-turned[..., 1::2], turned[..., 0::2]), dim=-1).flatten(-2)
        y = torch.cat((turned + pairs * self.scale, passed), dim=-1)
        return self.out(y.transpose(1, 2).reshape(n, t, -1))


def cases() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, n, 16),) for n in (20, 4, 48)]


def test_fp32_feature_slices_become_linears_with_no_slice_left():
    torch.manual_seed(0)
    assert_rewrites(
        PartialInterleavedRotation().eval(),
        cases(),
        REWRITE,
        {"aten.slice.Tensor": 0, "aten.linear.default": 6},  # 4 slices, the projections in and out
        dynamic_shapes=({1: FRAMES},),
    )


def test_fp32_a_partial_interleaved_rotation_is_one_delegate_at_a_dynamic_length():
    torch.manual_seed(0)
    first, *others = cases()
    stock, _ = lower_stock_and_rewritten(
        PartialInterleavedRotation().eval(), first, REWRITE, dynamic_shapes=({1: FRAMES},), also_run=others
    )
    assert stock.delegates > 1 and stock.ops_outside_delegates["aten.slice_copy"] == 4, stock


def test_leaves_static_and_wide_slices_with_their_reasons():
    class SliceFeatures(torch.nn.Module):
        def forward(self, x):
            return x[..., 1:] * 2

    for shape, dynamic, reason in [
        ((1, 20, 16), None, "the tensor's shape is static: XNNPACK slices it"),
        ((1, 20, 300), ({1: FRAMES},), "its 300 features are more than 256: the product would cost a projection"),
    ]:
        ep = export_aten(SliceFeatures(), (torch.randn(*shape),), dynamic)
        rewrite = FeatureSlicesAsLinearsPass(ep)
        assert not rewrite(ep.graph_module).modified
        assert [r for _, r in rewrite.skipped] == [reason], rewrite.skipped

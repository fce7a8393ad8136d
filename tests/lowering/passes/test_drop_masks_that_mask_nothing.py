"""Attention masks computed from the length alone that mask nothing at any length of the range: dropped, not stored;
a mask that masks something at some length is kept."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from audiodeploy.lowering.passes.drop_masks_that_mask_nothing import DropMasksThatMaskNothingPass
from tests.lowering.passes.modules import (
    ATTENTION_FRAMES,
    MaskedAttention,
    attention_ends,
    lower_attention_stock_and_rewritten,
)
from tests.pipeline import assert_rewrites, export_aten

PASS = "DropMasksThatMaskNothingPass"
DYNAMIC = ({1: ATTENTION_FRAMES},)
MASK_OPS = (
    "aten.arange.default",
    "aten.expand.default",
    "aten.where.ScalarOther",
    "aten.where.self",
    "aten.masked_fill.Scalar",
    "aten.slice.Tensor",
)


def nothing_masked(frames: int) -> torch.Tensor:
    """What transformers builds under export for one unpadded utterance: ``arange(T) >= 0`` as [1, 1, T, T]."""
    return (torch.arange(frames) + 0 >= 0)[None, None, :, None].expand(1, 1, frames, frames)


def causal(frames: int) -> torch.Tensor:
    positions = torch.arange(frames)
    return (positions[None, :] <= positions[:, None])[None, None]


def all_true_at_both_ends(frames: int) -> torch.Tensor:
    """All-true at 8 and at 64 frames, the ends of ATTENTION_FRAMES, but not at 21 to 40 frames (position 20)."""
    keep = (torch.arange(frames) != 20) | (torch.full((frames,), frames) > 40)
    return keep[None, None, None, :].expand(1, 1, frames, frames)


def test_fp32_sdpa_with_a_mask_that_masks_nothing_is_one_delegate():
    torch.manual_seed(0)
    stock = lower_attention_stock_and_rewritten(MaskedAttention("sdpa", nothing_masked).eval(), PASS)
    assert {"aten.logical_not", "aten.any", "aten.where"} <= set(stock.ops_outside_delegates)


@pytest.mark.parametrize("how", ["add", "where", "masked_fill"])
def test_fp32_a_mask_that_masks_nothing_is_dropped_from_eager_attention(how):
    torch.manual_seed(0)
    module = MaskedAttention(how, nothing_masked).eval()
    cases = [(torch.randn(1, 20, 32),), *attention_ends()]
    result = assert_rewrites(module, cases, PASS, dict.fromkeys(MASK_OPS, 0), dynamic_shapes=DYNAMIC)
    # Nothing of the mask is stored either: no constant of the longest length squared.
    assert max(c.numel() for c in result.program.constants.values()) < ATTENTION_FRAMES.max**2


def test_fp32_a_selection_by_a_mask_that_masks_nothing_is_dropped_where_it_is_not_read_by_a_softmax():
    """The ``where`` makes sdpa's float mask, not the scores a softmax reads: its first operand is selected."""
    torch.manual_seed(0)
    module = MaskedAttention("sdpa-bias", nothing_masked).eval()
    cases = [(torch.randn(1, 20, 32),), *attention_ends()]
    assert_rewrites(module, cases, PASS, dict.fromkeys(MASK_OPS, 0), dynamic_shapes=DYNAMIC)


def test_fp32_at_one_length_the_mask_is_dropped_too():
    torch.manual_seed(0)
    counts = dict.fromkeys(MASK_OPS, 0)
    assert_rewrites(MaskedAttention("add", nothing_masked).eval(), [(torch.randn(1, 20, 32),)], PASS, counts)


@pytest.mark.parametrize("keep", [causal, all_true_at_both_ends], ids=["causal", "all-true-at-both-ends"])
def test_a_mask_that_masks_something_at_some_length_is_kept(keep):
    # Computed at the shortest and the longest length alone, the second would look as if it masked nothing.
    ends = (ATTENTION_FRAMES.min, ATTENTION_FRAMES.max)
    assert keep is causal or all(keep(frames).all() for frames in ends) and not keep(30).all()
    ep = export_aten(MaskedAttention("sdpa", keep).eval(), (torch.randn(1, 20, 32),), DYNAMIC)
    rewrite = DropMasksThatMaskNothingPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == [
        "its attn_mask is not provably all-true at every length of the export range"
    ]


class UserMaskAttention(torch.nn.Module):
    def forward(self, q, keep):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=keep)


def test_a_mask_read_from_the_input_is_kept():
    inputs = (torch.randn(1, 2, 6, 8), torch.ones(1, 1, 6, 6, dtype=torch.bool))
    ep = export_aten(UserMaskAttention(), inputs)
    rewrite = DropMasksThatMaskNothingPass(ep)
    assert not rewrite(ep.graph_module).modified
    ((_, reason),) = rewrite.skipped
    assert reason.startswith("its attn_mask is not known to be computed from the length alone: it reads keep"), reason


def test_does_nothing_on_a_program_without_a_mask():
    ep = export_aten(torch.nn.Linear(8, 8), (torch.randn(1, 12, 8),))
    rewrite = DropMasksThatMaskNothingPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert rewrite.skipped == []


class PaddedRowsFill(torch.nn.Module):
    """transformers' Parakeet and LASR convolution modules: the frames whose mask row allows no key (padding) are
    zeroed before a convolution, ``masked_fill(all(~mask, dim=2), 0)``."""

    def __init__(self, keep) -> None:
        super().__init__()
        self.keep = keep
        self.conv = torch.nn.Conv1d(32, 32, 3, padding=1)

    def forward(self, x):
        no_key = torch.all(~self.keep(x.shape[1]), dim=2)  # [1, 1, T]
        return self.conv(x.transpose(1, 2).masked_fill(no_key, 0.0))


def test_fp32_a_fill_of_the_rows_a_mask_that_masks_nothing_empties_is_dropped():
    torch.manual_seed(0)
    cases = [(torch.randn(1, 20, 32),), *attention_ends()]
    counts = {**dict.fromkeys(MASK_OPS, 0), "aten.all.dim": 0}
    assert_rewrites(PaddedRowsFill(nothing_masked).eval(), cases, PASS, counts, dynamic_shapes=DYNAMIC)


def test_a_fill_of_the_rows_of_a_mask_that_masks_something_is_kept():
    ep = export_aten(PaddedRowsFill(causal).eval(), (torch.randn(1, 20, 32),), DYNAMIC)
    rewrite = DropMasksThatMaskNothingPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == [
        "its mask is not provably all-false at every length of the export range"
    ]

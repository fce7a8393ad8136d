"""Causal and sliding-window masks computed from the length alone: proven a band of query-minus-key offsets and
written as float arithmetic on positions, so that the attention is one delegate; other masks are left as they are,
each with its reason."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.banded_masks_as_arithmetic import BandedMasksAsArithmeticPass
from tests.lowering.passes.modules import ATTENTION_FRAMES, MaskedAttention, attention_ends
from tests.pipeline import export_aten, lower_and_compare

PASS = "BandedMasksAsArithmeticPass"
DYNAMIC = ({1: ATTENTION_FRAMES},)


def sliding_window(frames: int, window: int = 5) -> torch.Tensor:
    """transformers' sliding-window causal mask as ``masking_utils`` builds it for one sequence under export:
    positions indexed into a [1, 1, T, T] grid, and the packed-sequence test (a ``diff`` of the positions, ``ne``,
    ``cumsum``, ``eq``) that holds everywhere."""
    positions = (torch.arange(frames) + 0)[None]  # [1, T]
    packed = torch.cumsum(torch.diff(positions, dim=-1, prepend=positions[:, :1] - 1) != 1, -1)
    batch = torch.arange(1)[:, None, None, None]
    query = torch.arange(frames)[None, None, :, None]
    key = torch.arange(frames)[None, None, None, :]
    q_position, k_position = positions[batch, query], positions[batch, key]
    keep = (k_position > q_position - window) & (k_position <= q_position)
    return (keep & (packed[batch, query] == packed[batch, key])).expand(1, 1, frames, frames)


def causal(frames: int) -> torch.Tensor:
    positions = torch.arange(frames)
    return (positions[None, :] <= positions[:, None])[None, None]


def strictly_causal(frames: int) -> torch.Tensor:
    """No query sees itself: the first row masks everything."""
    positions = torch.arange(frames)
    return (positions[None, :] < positions[:, None])[None, None]


def last_keys_masked(frames: int) -> torch.Tensor:
    """A padding mask: the last two keys masked, whatever the query."""
    return (torch.arange(frames) < frames - 2)[None, None, None, :].expand(1, 1, frames, frames)


@pytest.mark.parametrize(
    "how, keep", [("sdpa", sliding_window), ("add", sliding_window), ("sdpa", causal)], ids=["sdpa", "eager", "causal"]
)
def test_fp32_banded_attention_over_dynamic_length_is_one_delegate(how, keep):
    torch.manual_seed(0)
    module = MaskedAttention(how, keep).eval()
    if keep is sliding_window and how == "sdpa":
        stock = lower_and_compare(module, (torch.randn(1, 20, 32),), rewrite=False, dynamic_shapes=DYNAMIC)
        assert stock.delegates > 1  # the mask's integer and boolean ops cut stock's program
    report = lower_and_compare(module, (torch.randn(1, 20, 32),), dynamic_shapes=DYNAMIC, also_run=attention_ends())
    assert report.delegates == 1 and PASS in report.rewrites, report
    # Cutting the stored positions to the length is all that runs outside the delegate.
    assert set(report.ops_outside_delegates) <= {"aten.slice_copy", "sym_size.int"}, report.ops_outside_delegates


def _skips(module: torch.nn.Module) -> list[str]:
    ep = export_aten(module, (torch.randn(1, 20, 32),), DYNAMIC)
    rewrite = BandedMasksAsArithmeticPass(ep)
    assert not rewrite(ep.graph_module).modified
    return [reason for _, reason in rewrite.skipped]


def test_a_mask_that_is_not_a_band_of_offsets_is_left_as_it_is():
    (reason,) = _skips(MaskedAttention("sdpa", last_keys_masked).eval())
    assert reason.startswith("the mask depends on more than the offset of key from query"), reason


def test_a_band_without_the_diagonal_is_left_as_it_is():
    # Its first query sees no key: sdpa gives that row zeros, an additive mask would give a uniform average.
    (reason,) = _skips(MaskedAttention("sdpa", strictly_causal).eval())
    assert reason == "its band of offsets [1, None] does not hold the diagonal (a row could be all masked)"


class UserMaskAttention(torch.nn.Module):
    def forward(self, q, keep):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=keep)


def test_a_mask_the_user_gives_is_left_as_it_is():
    ep = export_aten(UserMaskAttention(), (torch.randn(1, 2, 6, 4), torch.ones(6, 6, dtype=torch.bool)))
    rewrite = BandedMasksAsArithmeticPass(ep)
    assert not rewrite(ep.graph_module).modified
    (reason,) = [reason for _, reason in rewrite.skipped]
    assert reason.startswith("the mask is not known to be computed from the length alone: it reads keep"), reason


def test_does_nothing_on_a_program_without_a_mask():
    ep = export_aten(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    rewrite = BandedMasksAsArithmeticPass(ep)
    assert not rewrite(ep.graph_module).modified and rewrite.skipped == []


def test_a_length_with_no_greatest_value_is_checked_past_its_least():
    # An open range (int_oo, which sympy calls finite) is checked at its least value plus 64, not read as a number.
    ep = export_aten(MaskedAttention("sdpa", causal).eval(), (torch.randn(1, 20, 32),), ({1: Dim("frames", min=8)},))
    rewrite = BandedMasksAsArithmeticPass(ep)
    assert rewrite(ep.graph_module).modified, rewrite.skipped

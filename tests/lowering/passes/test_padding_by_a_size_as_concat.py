"""A constant padding by an amount the length decides, as a concatenation with a filled block: one delegate."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.padding_by_a_size_as_concat import PaddingBySizeAsConcatPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

FRAMES = Dim("frames", min=8, max=64)


class SqueezedAndPaddedBack(torch.nn.Module):
    """SEW's squeeze, channels first: frames pooled in pairs, brought back to twice as many (a transposed convolution
    of stride 2), and padded back to the input's frame count (by one frame at an odd count, none at an even one),
    then a head."""

    def __init__(self, channels: int = 8, value: float = 0.0) -> None:
        super().__init__()
        self.pool = torch.nn.AvgPool1d(2, 2)
        self.upsample = torch.nn.ConvTranspose1d(channels, channels, 2, stride=2)
        self.head = torch.nn.Conv1d(channels, 5, 1)
        self.value = value

    def forward(self, x):  # [1, C, T]
        pooled = self.pool(x)
        upsampled = self.upsample(pooled)
        padded = F.pad(upsampled, (0, x.shape[-1] - upsampled.shape[-1]), value=self.value)
        return self.head(torch.relu(padded))


def frames(n: int) -> tuple[torch.Tensor]:
    return (torch.randn(1, 8, n),)


def test_fp32_padding_back_to_the_frame_count_is_one_delegate_at_odd_and_even_counts():
    torch.manual_seed(0)
    report = lower_and_compare(
        SqueezedAndPaddedBack().eval(),
        frames(21),
        dynamic_shapes=({2: FRAMES},),
        also_run=[frames(n) for n in (20, 8, 9, 63, 64)],
    )
    assert "PaddingBySizeAsConcatPass" in report.rewrites, report.rewrites
    assert report.delegates == 1, report
    assert set(report.ops_outside_delegates) == {"aten.full", "sym_size.int"}, report


def test_the_block_holds_the_fill_value_on_the_side_padded():
    torch.manual_seed(0)
    cases = [frames(n) for n in (21, 20, 9)]
    result = assert_rewrites(
        SqueezedAndPaddedBack(value=-3.0).eval(),
        cases,
        "PaddingBySizeAsConcatPass",
        {"aten.pad.default": 0, "aten.full.default": 1, "aten.cat.default": 1},
        dynamic_shapes=({2: FRAMES},),
    )
    (full,) = [n for n in result.program.graph.nodes if n.target == torch.ops.aten.full.default]
    assert full.args[1] == -3.0


class CroppedOrPadded(torch.nn.Module):
    def forward(self, x):
        return F.pad(x, (0, 24 - x.shape[-1])) * 2.0  # a crop where x is longer than 24 frames


class PaddedByIntegers(torch.nn.Module):
    def forward(self, x):
        return F.pad(x, (1, 2)) * 2.0


def test_does_nothing_on_a_crop_or_on_integer_amounts():
    for module, reason in ((CroppedOrPadded(), "may be negative"), (PaddedByIntegers(), "integers")):
        ep = export_aten(module, frames(20), dynamic_shapes=({2: FRAMES},))
        rewrite = PaddingBySizeAsConcatPass(ep)
        assert not rewrite(ep.graph_module).modified
        assert any(reason in why for _, why in rewrite.skipped), rewrite.skipped


def test_an_amount_that_is_zero_at_the_example_is_left_and_the_program_pads_at_odd_counts():
    """ExecuTorch drops a concatenation's operand that is empty at the example: the padding stays outside, and the
    program still pads an odd count."""
    torch.manual_seed(0)
    report = lower_and_compare(
        SqueezedAndPaddedBack().eval(), frames(20), dynamic_shapes=({2: FRAMES},), also_run=[frames(21), frames(9)]
    )
    assert "PaddingBySizeAsConcatPass" not in report.rewrites, report.rewrites
    assert ("PaddingBySizeAsConcatPass", "an amount is 0 at the example") in {
        (s.rewrite, s.reason.split(":")[0]) for s in report.skipped_rewrites
    }, report.skipped_rewrites

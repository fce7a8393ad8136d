"""A dynamic input runs at every length of its exported range, not just up to the example's size.

The pass plans memory inside ``to_executorch``: only a lowered program shows it, so both tests lower.
"""

import torch
from torch.export import Dim

from tests.pipeline import lower_and_compare


class StridedFrontEnd(torch.nn.Module):
    """A wav2vec2-like first layer: one strided convolution over a raw waveform."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 320, stride=320)

    def forward(self, waveform):
        return self.conv(waveform.unsqueeze(1)).relu()


def test_fp32_strided_conv_runs_at_the_top_of_its_exported_range():
    torch.manual_seed(0)
    samples = Dim("samples", min=16000, max=160000)
    report = lower_and_compare(
        StridedFrontEnd().eval(),
        (torch.randn(1, 16000),),
        dynamic_shapes=({1: samples},),
        also_run=[(torch.randn(1, 40000),), (torch.randn(1, 160000),)],
    )
    assert report.delegates == 1


def test_fp32_derived_length_runs_at_the_top_of_its_exported_range():
    # Lowered too: an input size derived from the symbol (320 * frames) is a distinct case of the planning.
    torch.manual_seed(0)
    frames = Dim("frames", min=50, max=500)
    lower_and_compare(
        StridedFrontEnd().eval(),
        (torch.randn(1, 16000),),
        dynamic_shapes=({1: 320 * frames},),
        also_run=[(torch.randn(1, 320 * 500),)],
    )


class RelativeShift(torch.nn.Module):
    """Transformer-XL's relative shift of ``[T, 2T - 1]`` scores, written as transformers' Parakeet writes it: the
    first view infers a size (``2T² // T``) that interval arithmetic bounds at ``2 Tmax² // Tmin``. Frames of two
    input rows, as a strided front end gives them (exported from the frames themselves, the views' sizes guard)."""

    def forward(self, x):
        x = torch.nn.functional.avg_pool1d(x.transpose(1, 2), 2).transpose(1, 2)  # [1, T, 8]
        heads = x.view(1, x.shape[1], 2, -1).transpose(1, 2)  # [1, 2, T, 4]
        positions = torch.cat([heads, heads[:, :, 1:]], dim=2)  # [1, 2, 2T - 1, D]
        scores = heads @ positions.transpose(2, 3)  # [1, 2, T, 2T - 1]
        batch, count, queries, distances = scores.shape
        scores = torch.nn.functional.pad(scores, (1, 0)).view(batch, count, -1, queries)  # [1, 2, 2T, T]
        return scores[:, :, 1:].view(batch, count, queries, distances)[..., :queries]


def test_fp32_relative_shift_views_are_planned_at_their_largest_size_not_an_interval_bound():
    # Planned by bound_sympy alone, the program asks for gigabytes and does not load.
    torch.manual_seed(0)
    frames = Dim("frames", min=10, max=100)
    lower_and_compare(
        RelativeShift().eval(),
        (torch.randn(1, 80, 8),),
        dynamic_shapes=({1: 2 * frames},),
        also_run=[(torch.randn(1, 20, 8),), (torch.randn(1, 200, 8),)],
    )

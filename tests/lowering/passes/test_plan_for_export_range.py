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

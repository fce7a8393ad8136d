"""A convolution's extra last frame dropped by padding less: the positional convolution in one delegate."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim
from torch.nn.utils.parametrizations import weight_norm

from audiodeploy.lowering.passes.conv_tail_slice_as_padding import ConvTailSliceAsPaddingPass
from tests.pipeline import export_aten, lower_and_compare

FRAMES = Dim("frames", min=8, max=64)


class PositionalConv(torch.nn.Module):
    """wav2vec2's positional embedding: even kernel, weight norm, last frame sliced off, gelu."""

    def __init__(self, stride: int = 1, start: int = 0, end: int = -1) -> None:
        super().__init__()
        self.conv = weight_norm(torch.nn.Conv1d(16, 16, 8, padding=4, groups=2, stride=stride), dim=2)
        self.start, self.end = start, end

    def forward(self, x):
        return torch.nn.functional.gelu(self.conv(x)[:, :, self.start : self.end])


@pytest.mark.parametrize("stride", [1, 2], ids=["wav2vec2", "sew-stride-2"])
def test_fp32_sliced_even_kernel_conv_over_dynamic_length_is_one_delegate(stride):
    torch.manual_seed(0)
    module = PositionalConv(stride=stride).eval()
    x = torch.randn(1, 16, 20)
    stock = lower_and_compare(module, (x,), fold=True, rewrite=False, dynamic_shapes=({2: FRAMES},))
    assert stock.ops_outside_delegates.get("aten.slice_copy") == 1
    report = lower_and_compare(
        module,
        (x,),
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 16, n),) for n in (8, 9, 63, 64)],  # both parities of the length
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert report.rewrites == ("ConvTailSliceAsPaddingPass",)
    assert len(report.folds) == 1  # the weight-norm fold still finds its convolution


def test_does_nothing_on_a_slice_of_the_start_or_beyond_the_padding():
    for module in (PositionalConv(start=1, end=None), PositionalConv(stride=3, end=-2)):
        ep = export_aten(module.eval(), (torch.randn(1, 16, 20),))
        assert not ConvTailSliceAsPaddingPass(ep)(ep.graph_module).modified

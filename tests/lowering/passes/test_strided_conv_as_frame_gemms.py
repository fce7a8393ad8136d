"""Strided 1-D convolutions whose kernels span whole strides, as GEMMs over frames: one delegate, eager's numbers.

A codec's encoder in small (kernels of twice the stride, and one of the stride, on more than one channel) is
lowered at a length in whole hops and run with ExecuTorch's runtime at both ends of the range; the rewritten
graph holds linears where the strided convolutions were. What the pass leaves goes to XNNPACK's convolution.
"""

from __future__ import annotations

import torch
from torch.export import Dim
from torch.nn.utils.parametrizations import weight_norm

from audiodeploy.lowering.passes.strided_conv_as_frame_gemms import StridedConvAsFrameGemmsPass
from tests.lowering.passes.test_strided_conv_as_gemm import strided_gemms
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

HOP = 16


class CodecEncoder(torch.nn.Module):
    """EnCodec's and DAC's downsampling in small: kernel 2s at strides 2 and 4 (one padded as DAC pads), then a
    kernel of the stride, each between frame-wise layers (a softmax over the channels of each frame, as Mimi puts
    its transformer before its last downsampling), which no image op computes."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv1d(1, 8, 7, padding=3)
        self.layers = torch.nn.ModuleList(
            [
                torch.nn.Conv1d(8, 16, 4, stride=2, padding=1),
                torch.nn.Conv1d(16, 24, 8, stride=4, padding=2),
                torch.nn.Conv1d(24, 32, 2, stride=2, bias=False),
            ]
        )

    def forward(self, waveform):
        x = _frame_wise(self.first(waveform.unsqueeze(1)))
        for layer in self.layers:
            x = _frame_wise(layer(x))
        return x


def _frame_wise(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).softmax(-1).transpose(1, 2)


class ResidualDownsampling(torch.nn.Module):
    """Mimi's encoder in small: a causal residual unit (ELU, left padding, convolution) then a strided convolution
    of kernel 2s, the ELU and the padding between each convolution and the next."""

    def __init__(self) -> None:
        super().__init__()
        self.unit = torch.nn.Conv1d(8, 8, 3)
        self.down = torch.nn.Conv1d(8, 16, 8, stride=4)
        self.last = torch.nn.Conv1d(16, 16, 3)

    def forward(self, x):
        x = x + self.unit(torch.nn.functional.pad(torch.nn.functional.elu(x), (2, 0)))
        x = self.down(torch.nn.functional.pad(torch.nn.functional.elu(x), (4, 0)))
        return self.last(torch.nn.functional.pad(torch.nn.functional.elu(x), (2, 0)))


def test_a_convolution_that_elementwise_ops_and_paddings_join_to_others_stays_xnnpacks_on_their_image():
    """Frames would transpose the image the chain keeps (Mimi's encoder at 10 s: 372 -> 297 ms without them)."""
    torch.manual_seed(0)
    module = ResidualDownsampling().eval()
    ep = export_aten(module, (torch.randn(1, 8, 64),), dynamic_shapes=({2: Dim("t", min=4, max=128) * 4},))
    rewrite = StridedConvAsFrameGemmsPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason.split(":")[0] for _, reason in rewrite.skipped] == [
        "stride 1",
        "elementwise ops or paddings join it to another convolution",
        "stride 1",
    ], rewrite.skipped
    report = lower_and_compare(
        module, (torch.randn(1, 8, 64),), dynamic_shapes=({2: Dim("t", min=4, max=128) * 4},),
        also_run=[(torch.randn(1, 8, 16),), (torch.randn(1, 8, 512),)],
    )  # fmt: skip
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), report
    assert "ConvChainsAsImagesPass" in report.rewrites and "StridedConvAsFrameGemmsPass" not in report.rewrites


FRAMES = Dim("frames", min=4, max=256)


def hops(*counts: int) -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, count * HOP),) for count in counts]


def test_a_codec_encoder_is_frame_gemms_in_one_delegate_matching_eager():
    torch.manual_seed(0)
    first, *others = hops(37, 4, 256)
    report = lower_and_compare(CodecEncoder().eval(), first, dynamic_shapes=({1: FRAMES * HOP},), also_run=others)
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), report
    assert "StridedConvAsFrameGemmsPass" in report.rewrites
    assert "StridedConvAsGemmPass" not in report.rewrites  # nothing left to gather


def test_every_strided_convolution_becomes_linears_and_one_hot_shifts():
    torch.manual_seed(0)
    counts = {"aten.linear.default": 2 + 2 + 1, "aten.convolution.default": 0}
    result = assert_rewrites(
        CodecEncoder().eval(),
        hops(37, 4, 256),
        "StridedConvAsFrameGemmsPass",
        counts,
        dynamic_shapes=({1: FRAMES * HOP},),
    )
    assert strided_gemms(result.program) == 0


def test_a_weight_normed_convolution_is_left_to_xnnpacks_convolution_and_folded_there():
    torch.manual_seed(0)
    module = CodecEncoder().eval()
    module.layers[1] = weight_norm(module.layers[1])
    counts = {"aten._weight_norm_interface.default": 0, "aten._weight_norm.default": 0, "aten.linear.default": 2 + 1}
    result = assert_rewrites(
        module, hops(37, 4, 256), "StridedConvAsFrameGemmsPass", counts, dynamic_shapes=({1: FRAMES * HOP},)
    )
    assert "StridedConvAsGemmPass" not in result.changed  # many channels: XNNPACK's indirect GEMM convolves it
    # nothing joins it to another convolution, so it stays a conv1d, which XNNPACK writes on an image itself
    assert [fold.candidate.gemm_label for fold in result.folds] == ["conv1d @ layers.1"]


class Left(torch.nn.Module):
    """Strided convolutions the pass leaves: a kernel of one and a half strides, one input channel, a kernel of
    the stride at lengths that are not whole frames, and a weight computed by weight_norm."""

    def __init__(self) -> None:
        super().__init__()
        self.odd_kernel = torch.nn.Conv1d(8, 8, 3, stride=2)
        self.one_channel = torch.nn.Conv1d(1, 8, 4, stride=2)
        self.kernel_of_stride = torch.nn.Conv1d(8, 8, 2, stride=2)
        self.computed = weight_norm(torch.nn.Conv1d(8, 8, 2, stride=2))

    def forward(self, x):
        return self.kernel_of_stride(self.odd_kernel(x)), self.one_channel(x[:, :1]), self.computed(x)


def test_leaves_part_strides_one_channel_lengths_past_the_last_window_and_computed_weights():
    ep = export_aten(Left().eval(), (torch.randn(1, 8, 64),), dynamic_shapes=({2: Dim("t", min=16, max=512) * 2},))
    rewrite = StridedConvAsFrameGemmsPass(ep)
    assert not rewrite(ep.graph_module).modified
    reasons = sorted(reason.split(":")[0] for _, reason in rewrite.skipped)
    assert reasons == [
        "a computed weight",
        "kernel 3 is not a whole number of strides of 2",
        "one input channel",
        "the padded length is not a whole number of frames at every length",
    ], rewrite.skipped

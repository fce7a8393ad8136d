"""Location-variable convolutions as tap gathers, per-gate predictor convolutions and bmm: one delegate, eager's numbers.

The modules are transformers' own UnivNet pieces (``UnivNetLvcBlock``, the
``location_variable_convolution`` of ``UnivNetLvcResidualBlock``) at a tiny size,
and maum-ai/univnet's form of the LVC with a dilation, exported over a range of
mel lengths. The block's .pte runs with ExecuTorch's runtime, the dilated LVC's
rewritten program with PyTorch; each is compared with eager PyTorch at both ends
of the range.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim
from transformers import UnivNetConfig
from transformers.models.univnet.modeling_univnet import UnivNetLvcBlock, UnivNetLvcResidualBlock

import audiodeploy
from audiodeploy.lowering.passes.location_variable_conv_as_bmm import LocationVariableConvAsBmmPass
from tests.pipeline import assert_matches_eager, assert_rewrites, export_aten

FRAMES = Dim("frames", min=4, max=32)
MEL_BINS = 8
CHANNELS = 4
HOP = 4


def tiny_config() -> UnivNetConfig:
    return UnivNetConfig(
        model_in_channels=8,  # transformers sizes the predictor's residual convolutions with it
        model_hidden_channels=CHANNELS,
        num_mel_bins=MEL_BINS,
        resblock_kernel_sizes=[3],
        resblock_stride_sizes=[HOP],
        resblock_dilation_sizes=[[1, 3]],
        kernel_predictor_num_blocks=1,
        kernel_predictor_hidden_channels=8,
    )


def lvc_block() -> UnivNetLvcBlock:
    """One UnivNet LVC block: upsampling, a kernel predictor, two gated LVC layers, weight norm everywhere."""
    torch.manual_seed(0)
    block = UnivNetLvcBlock(tiny_config(), layer_id=0, lvc_hop_size=HOP).eval()
    block.apply_weight_norm()
    return block


def block_inputs(frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(frames)
    return torch.randn(1, CHANNELS, frames, generator=generator), torch.randn(1, MEL_BINS, frames, generator=generator)


def maum_ai_lvc(x, kernel, bias, dilation: int, hop: int):
    """The LVC as maum-ai/univnet (and NeMo) write it: channels-last einsum output, made contiguous for the view.

    transformers' copy drops the memory-format steps, and its view then fails for a dilation above one.
    """
    batch, _, out_channels, taps, _ = kernel.shape
    padding = dilation * (taps - 1) // 2
    x = torch.nn.functional.pad(x, (padding, padding), "constant", 0)
    x = x.unfold(2, hop + 2 * padding, hop).unfold(3, dilation, dilation)[:, :, :, :, :hop]
    x = x.transpose(3, 4).unfold(4, taps, 1)
    y = torch.einsum("bildsk,biokl->bolsd", x, kernel).to(memory_format=torch.channels_last_3d)
    y = y + bias.unsqueeze(-1).unsqueeze(-1).to(memory_format=torch.channels_last_3d)
    return y.contiguous().view(batch, out_channels, -1)


class DilatedLvc(torch.nn.Module):
    """An LVC with dilation 2 read whole (no gates), its kernels and biases from plain convolutions."""

    hop = 8

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.kernels = torch.nn.Conv1d(MEL_BINS, CHANNELS * 6 * 3, 3, padding=1)
        self.biases = torch.nn.Conv1d(MEL_BINS, 6, 3, padding=1)

    def forward(self, x, mel):
        kernel = self.kernels(mel).view(1, CHANNELS, 6, 3, mel.shape[-1])
        return maum_ai_lvc(x, kernel, self.biases(mel), dilation=2, hop=self.hop)


def dilated_inputs(frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(frames)
    x = torch.randn(1, CHANNELS, frames * DilatedLvc.hop, generator=generator)
    return x, torch.randn(1, MEL_BINS, frames, generator=generator)


@pytest.fixture(scope="module")
def lowered_block():
    block = lvc_block()
    return block, audiodeploy.lower(block, block_inputs(6), dynamic_shapes=({2: FRAMES}, {2: FRAMES}))


def test_fp32_weight_norm_lvc_block_is_one_delegate_over_dynamic_length(lowered_block):
    block, lowered = lowered_block
    report = lowered.report.methods["forward"]
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "LocationVariableConvAsBmmPass" in report.rewrites
    # Each layer's two gates get a kernel and a bias convolution with their rows of the weight-normalized predictor.
    predictor_parts = [fold.gemm for fold in report.folds if "kernel_conv" in fold.gemm or "bias_conv" in fold.gemm]
    assert len(predictor_parts) == 2 * 2 * 2, predictor_parts
    assert report.gemms_not_delegated == () and report.not_folded == ()


@pytest.mark.parametrize("frames", [FRAMES.min, FRAMES.max])
def test_fp32_weight_norm_lvc_block_matches_eager(lowered_block, frames):
    block, lowered = lowered_block
    assert_matches_eager(lowered, block, block_inputs(frames))


def test_fp32_dilated_lvc_read_whole_is_written_as_a_bmm_and_matches_eager():
    cases = [dilated_inputs(frames) for frames in (5, FRAMES.min, FRAMES.max)]
    counts = {"aten.einsum.default": 0, "aten.unfold.default": 0, "aten.pad.default": 0, "aten.bmm.default": 1}
    dynamic = ({2: FRAMES * DilatedLvc.hop}, {2: FRAMES})
    assert_rewrites(DilatedLvc().eval(), cases, "LocationVariableConvAsBmmPass", counts, dynamic_shapes=dynamic)


def test_rewritten_block_keeps_no_lvc_op_and_stores_each_predictor_weight_once():
    block = lvc_block()
    ep = export_aten(block, block_inputs(6), dynamic_shapes=({2: FRAMES}, {2: FRAMES}))
    parameters = sum(t.numel() for t in ep.state_dict.values()) + sum(t.numel() for t in ep.constants.values())
    rewrite = LocationVariableConvAsBmmPass(ep)
    assert rewrite(ep.graph_module).modified
    assert len(rewrite.rewritten) == 2 * 2  # two layers, two gates each
    ops = {str(node.target).rsplit(".", 1)[0] for node in ep.graph.nodes if node.op == "call_function"}
    assert not {"aten.einsum", "aten.unfold", "aten.select"} & ops, ops
    # Three one-hot [C, 1, 1, 3] gathers of each layer's input and of the predictors' (8-channel) input.
    one_hot_taps = 2 * 3 * CHANNELS * 3 + 3 * 8 * 3
    stored = sum(t.numel() for t in ep.state_dict.values()) + sum(t.numel() for t in ep.constants.values())
    assert stored == parameters + one_hot_taps


class PlainKernelLvc(torch.nn.Module):
    """An LVC whose kernel is an input of the program, not a predictor's output."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = UnivNetLvcResidualBlock(tiny_config(), kernel_size=3, dilation=1)

    def forward(self, x, kernel, bias):
        return self.layer.location_variable_convolution(x, kernel, bias, hop_size=HOP)


def test_does_nothing_on_an_lvc_whose_kernel_no_predictor_computes_or_another_einsum():
    frames = 6
    inputs = (torch.randn(1, CHANNELS, frames * HOP), torch.randn(1, CHANNELS, 6, 3, frames), torch.randn(1, 6, frames))
    ep = export_aten(PlainKernelLvc().eval(), inputs)
    rewrite = LocationVariableConvAsBmmPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert any("kernel: not the channels of a float32 conv1d" in reason for _, reason in rewrite.skipped), (
        rewrite.skipped
    )

    class BatchedMatmul(torch.nn.Module):
        def forward(self, a, b):
            return torch.einsum("bij,bjk->bik", a, b).reshape(2, -1)

    ep = export_aten(BatchedMatmul(), (torch.randn(2, 3, 4), torch.randn(2, 4, 5)))
    assert not LocationVariableConvAsBmmPass(ep)(ep.graph_module).modified

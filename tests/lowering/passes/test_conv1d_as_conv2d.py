"""A 1-D convolution as the 2-D one of one row XNNPACK runs, so that its dynamic int8 takes it.

Bar (this machine, AVX-512 VNNI): the grouped weight_norm convolution of wav2vec2's positional embedding,
int8-dynamic, one delegate with its weight int8, output SNR >= 30 dB against fp32 eager at two lengths.
"""

from __future__ import annotations

import torch
from torch.export import Dim
from torch.nn.utils.parametrizations import weight_norm

import audiodeploy
from audiodeploy.lowering.passes.conv1d_as_conv2d import Conv1dAsConv2dPass
from audiodeploy.lowering.passes.fold_computed_gemm_weights import apply_folds, plan_folds
from audiodeploy.program import fidelity
from tests.pipeline import export_aten, run_lowered

FRAMES = Dim("frames", min=16, max=400)
SNR_DB = 30.0


class GroupedThenDepthwise(torch.nn.Module):
    """A grouped, strided, dilated convolution, then a depthwise one (which the pass leaves)."""

    def __init__(self) -> None:
        super().__init__()
        self.grouped = torch.nn.Conv1d(8, 12, 5, stride=2, padding=3, dilation=2, groups=4)
        self.depthwise = torch.nn.Conv1d(12, 12, 3, padding=1, groups=12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.depthwise(self.grouped(x))


class PositionalConv(torch.nn.Module):
    """wav2vec2's positional embedding at a small width: weight_norm over the kernel, 4 groups, gelu, residual."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(torch.nn.Conv1d(32, 32, 16, padding=8, groups=4), dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.conv(x)[:, :, :-1])


def test_grouped_conv1d_becomes_one_row_conv2d_with_the_same_result_and_only_its_new_weight():
    torch.manual_seed(0)
    module = GroupedThenDepthwise().eval()
    x = torch.randn(1, 8, 40)
    ep = export_aten(module, (x,), dynamic_shapes=({2: FRAMES},))
    rewrite = Conv1dAsConv2dPass(ep)
    assert rewrite(ep.graph_module).modified
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.aten.conv2d.default) == 1 and targets.count(torch.ops.aten.conv1d.default) == 1
    assert [reason for _, reason in rewrite.skipped] == [
        "depthwise: XNNPACK's dynamic int8 declines it as a 2-D convolution too"
    ]
    assert "grouped.weight" not in ep.state_dict  # stored once, as the 2-D weight
    for length in (16, 40, 333):
        case = torch.randn(1, 8, length)
        with torch.no_grad():
            torch.testing.assert_close(ep.module()(case), module(case), rtol=1e-5, atol=1e-6)


def test_does_nothing_on_a_computed_weight():
    ep = export_aten(PositionalConv().eval(), (torch.randn(1, 32, 40),))
    rewrite = Conv1dAsConv2dPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == [
        "its weight is not a constant (a computed weight is folded first)"
    ]
    folded, _ = apply_folds(ep, plan_folds(ep).candidates)
    assert Conv1dAsConv2dPass(folded)(folded.graph_module).modified


def test_int8_dynamic_grouped_weight_norm_conv_is_a_delegated_int8_gemm_at_two_lengths():
    torch.manual_seed(0)
    module = PositionalConv().eval()
    int8 = audiodeploy.Quantization(audiodeploy.QuantizationScheme.INT8_DYNAMIC)
    lowered = audiodeploy.lower(
        module,
        (torch.randn(1, 32, 50),),
        dynamic_shapes=({2: FRAMES},),
        options=audiodeploy.LoweringOptions(quantization=int8),
    )
    method = lowered.report.methods["forward"]
    assert (method.delegates, method.ops_outside_delegates) == (1, {}), str(lowered.report)
    assert lowered.report.quantization.methods["forward"].quantized_gemms == ("conv2d @ conv",)
    cases = [(torch.randn(1, 32, n),) for n in (16, 400)]
    with torch.no_grad():
        references = [module(*case) for case in cases]
    measured = fidelity.measure(references, [run_lowered(lowered, case) for case in cases])
    assert measured["snr_db"] >= SNR_DB, measured

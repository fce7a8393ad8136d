"""A reduced square, written as the negated reduction of ``x * -x``: an fp16 program keeps its GEMMs in fp16."""

from __future__ import annotations

import torch
from torch.export import Dim

import audiodeploy
from audiodeploy.lowering.passes.reduced_squares_as_negated_products import ReducedSquaresAsNegatedProductsPass
from audiodeploy.runtime.profile import profile_program
from tests.pipeline import assert_op_counts, export_aten

FRAMES = Dim("frames", min=16, max=400)
aten = torch.ops.aten


class SquaresReduced(torch.nn.Module):
    def forward(self, x):
        centered = x - x.mean(-1, keepdim=True)
        # mean of mul(x, x), sum of pow(x, 2), and a square read twice (left as it is)
        shared = centered * 3.0
        shared_square = shared * shared
        return (
            (centered * centered).mean(-1, keepdim=True)
            + (x**2).sum(-1, keepdim=True)
            + shared_square.mean(-1, keepdim=True)
            + shared_square[..., :1]
        )


def test_each_reduced_square_reads_x_times_its_negation_and_the_numbers_stay_exact():
    x = torch.randn(1, 4, 20)
    ep = export_aten(SquaresReduced().eval(), (x,), dynamic_shapes=({2: FRAMES},))
    rewrite = ReducedSquaresAsNegatedProductsPass(ep)
    assert rewrite(ep.graph_module).modified
    assert len(rewrite.rewritten) == 2
    assert [reason for _, reason in rewrite.skipped] == [
        "its input is not a square",
        "the square is read elsewhere too",
    ]
    assert_op_counts(ep, {"aten.neg.default": 4, "aten.pow.Tensor_Scalar": 0})
    for reduction in [n for n in ep.graph.nodes if n.target in (aten.mean.dim, aten.sum.dim_IntList)]:
        product = reduction.args[0]
        if product.target is aten.mul.Tensor and product.args[0] is not product.args[1]:
            assert product.args[1].target is aten.neg.default and product.args[1].args[0] is product.args[0]
    for length in (16, 20, 400):
        y = torch.randn(1, 4, length)
        torch.testing.assert_close(ep.module()(y), SquaresReduced()(y), rtol=0, atol=1e-5)


class GemmAfterChannelNorm(torch.nn.Module):
    """wav2vec2's first feature layer: a convolution, a group norm with a group per channel over time, a GEMM."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 64, 3, padding=1, bias=False)
        self.norm = torch.nn.GroupNorm(64, 64)
        self.dense = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.dense(self.norm(self.conv(x)).transpose(1, 2))


def test_an_fp16_program_with_a_group_norm_over_time_runs_its_gemm_in_fp16():
    # The group norm's variance reads a square: fused, it would be XNNPACK's mean_squared, which has no fp16 kernel,
    # and the GEMM after it would run in fp32.
    torch.manual_seed(0)
    module = GemmAfterChannelNorm().eval()
    lowered = audiodeploy.lower(
        module,
        (torch.randn(1, 8, 100),),
        dynamic_shapes=({2: FRAMES},),
        options=audiodeploy.LoweringOptions(dtype=torch.float16),
    )
    assert lowered.report.methods["forward"].delegates == 1
    kinds = {o.name for o in profile_program(lowered.buffer, [torch.randn(1, 8, 300)], runs=1).operators}
    assert "Fully Connected (NC, F16) GEMM" in kinds, kinds
    assert not any("F32" in kind or "X32" in kind for kind in kinds), kinds

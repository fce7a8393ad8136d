"""Euclidean norms over fixed channels (F.normalize) as a square, a sum XNNPACK delegates and a square root."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.vector_norm_as_sum_of_squares import VectorNormAsSumOfSquaresPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=8, max=64)


class NormalizedProjection(torch.nn.Module):
    """DAC's codebook projection: a 1x1 convolution, then unit vectors over the channels of [1, C, T]."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Conv1d(4, 8, 1)

    def forward(self, x):
        return F.normalize(self.proj(x), dim=1)


class NormalizedRows(torch.nn.Module):
    """[N, D] rows (a codec's flattened frames) as unit vectors, and a norm not kept."""

    def forward(self, x):
        rows = x.transpose(1, 2).reshape(-1, 4)
        return F.normalize(rows, dim=1) * torch.linalg.vector_norm(rows, dim=-1, keepdim=True).sqrt()


def test_fp32_normalize_over_channels_with_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    stock, report = lower_stock_and_rewritten(
        NormalizedProjection().eval(),
        (torch.randn(1, 4, 20),),
        "VectorNormAsSumOfSquaresPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 4, 8),), (torch.randn(1, 4, 64),)],
    )
    assert stock.delegates == 3 and "aten.pow" in stock.ops_outside_delegates, stock
    assert "aten.expand_copy" in stock.ops_outside_delegates, stock


def test_fp32_normalize_over_channels_is_a_convolution_of_squares_without_expand():
    torch.manual_seed(0)
    cases = [(torch.randn(1, 4, n),) for n in (20, 8, 64)]
    counts = {
        "aten.linalg_vector_norm.default": 0,
        "aten.expand.default": 0,
        "aten.sqrt.default": 1,
        "aten.clamp_min.default": 1,
    }
    result = assert_rewrites(
        NormalizedProjection().eval(), cases, "VectorNormAsSumOfSquaresPass", counts, dynamic_shapes=({2: FRAMES},)
    )
    assert "VectorNormAsSumOfSquaresPass" in result.changed


def test_fp32_norm_over_the_last_dimension_of_rows_is_a_linear_sum():
    cases = [(torch.randn(1, 4, n),) for n in (20, 8, 64)]
    counts = {"aten.linalg_vector_norm.default": 0, "aten.sum.dim_IntList": 0, "aten.sqrt.default": 3}
    result = assert_rewrites(
        NormalizedRows(), cases, "VectorNormAsSumOfSquaresPass", counts, dynamic_shapes=({2: FRAMES},)
    )
    # The sums it emits are the reduction pass's linears.
    assert "SumAndMeanAsXnnpackReductionsPass" in result.changed


class OtherNorms(torch.nn.Module):
    def forward(self, x):
        return (
            torch.linalg.vector_norm(x, ord=1, dim=1),
            torch.linalg.vector_norm(x),
            torch.linalg.vector_norm(x, dim=-1),
        )


def test_leaves_other_orders_whole_tensor_and_dynamic_length_norms_with_their_reasons():
    ep = export_aten(OtherNorms(), (torch.randn(1, 4, 20),), dynamic_shapes=({2: FRAMES},))
    rewrite = VectorNormAsSumOfSquaresPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "a dimension it sums over depends on the input length",
        "a norm of order 1, not 2",
        "a norm over every dimension",
    ], rewrite.skipped

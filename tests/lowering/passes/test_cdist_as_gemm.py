"""Euclidean distances to a constant codebook (cdist) as a GEMM: one delegate; the argmin stays after it."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.cdist_as_gemm import CdistAsGemmPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare, lower_stock_and_rewritten

FRAMES = Dim("frames", min=8, max=64)


class CodebookDistances(torch.nn.Module):
    """A vector quantizer's search: frames of [1, D, T] as rows, their distances to a [K, D] codebook, and (``search``)
    the nearest code. ``cdist``'s matrix-product mode: its default picks a mode by the number of rows, which
    ``torch.export`` cannot trace over a range that crosses 25."""

    def __init__(self, search: bool = False, codes: int = 16, dim: int = 8, batch_of_one: bool = False) -> None:
        super().__init__()
        self.search, self.batch_of_one = search, batch_of_one
        self.codebook = torch.nn.Parameter(torch.randn(codes, dim))

    def forward(self, x):
        rows = x.transpose(1, 2).reshape(-1, self.codebook.shape[1])
        if self.batch_of_one:  # Mimi's: cdist(rows[None], codebook[None])[0]
            distances = torch.cdist(rows[None], self.codebook[None], compute_mode="use_mm_for_euclid_dist")[0]
        else:
            distances = torch.cdist(rows, self.codebook, compute_mode="use_mm_for_euclid_dist")
        return distances.argmin(-1) if self.search else distances


def test_fp32_codebook_distances_with_dynamic_length_are_one_delegate():
    torch.manual_seed(0)
    stock, report = lower_stock_and_rewritten(
        CodebookDistances().eval(),
        (torch.randn(1, 8, 20),),
        "CdistAsGemmPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 8, 8),), (torch.randn(1, 8, 64),)],
        atol=1e-4,
    )
    # cdist's decomposition: its GEMM's weight is computed, its sums and fills are not delegated.
    assert stock.delegates > 1 and "aten.mm" in stock.ops_outside_delegates, stock
    assert "aten.sum" in stock.ops_outside_delegates, stock


def test_fp32_codebook_search_is_two_linears_and_max_poolings():
    torch.manual_seed(0)
    cases = [(torch.randn(1, 8, n),) for n in (20, 8, 64)]
    # The argmin is ArgmaxAsMaxPoolingPass's: two max poolings of the negated distances.
    counts = {"aten.cdist.default": 0, "aten.linear.default": 2, "aten.sqrt.default": 1, "aten.argmin.default": 0}
    counts["aten.max.dim"] = 2
    assert_rewrites(
        CodebookDistances(search=True).eval(), cases, "CdistAsGemmPass", counts, dynamic_shapes=({2: FRAMES},)
    )


def test_fp32_codebook_distances_in_a_batch_of_one_are_one_delegate():
    torch.manual_seed(0)
    report = lower_and_compare(
        CodebookDistances(batch_of_one=True).eval(),
        (torch.randn(1, 8, 20),),
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 8, 8),), (torch.randn(1, 8, 64),)],
        atol=1e-4,
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), report
    assert {"CdistAsGemmPass", "UnitSelectAsSqueezePass"} <= set(report.rewrites)  # the [0] after it: a squeeze


class OtherDistances(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.codebook = torch.nn.Parameter(torch.randn(4, 3))

    def forward(self, x, y):
        return torch.cdist(x, self.codebook, p=1.0), torch.cdist(x, y)


def test_leaves_other_norms_and_computed_codebooks_with_their_reasons():
    ep = export_aten(OtherDistances(), (torch.randn(5, 3), torch.randn(4, 3)))
    rewrite = CdistAsGemmPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "a 1.0-norm distance, not Euclidean",
        "its second operand is not a constant float32 [K, D] codebook",
    ], rewrite.skipped

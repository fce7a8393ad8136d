"""Casts of input codes to float32 moved before their selections: a codec's lookup of the codes it takes is one
delegate after one cast of its input."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from audiodeploy.lowering.passes.casts_before_data_movement import CastsBeforeDataMovementPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

FRAMES = Dim("frames", min=4, max=64)


class CodesToLatents(torch.nn.Module):
    """DAC's ``from_codes`` in a few lines: each codebook's codes (an int64 input) looked up and projected, summed."""

    def __init__(self, codebooks: int = 2, codes: int = 16, dim: int = 3, channels: int = 5) -> None:
        super().__init__()
        self.codebooks = torch.nn.ParameterList(torch.randn(codes, dim) for _ in range(codebooks))
        self.outs = torch.nn.ModuleList(torch.nn.Conv1d(dim, channels, 1) for _ in range(codebooks))

    def forward(self, codes):
        latents = 0.0
        for i, (codebook, project_out) in enumerate(zip(self.codebooks, self.outs)):
            latents = latents + project_out(F.embedding(codes[:, i, :], codebook).transpose(1, 2))
        return latents


def _codes(frames: int) -> tuple[torch.Tensor]:
    return (torch.randint(0, 16, (1, 2, frames)),)


def test_fp32_lookup_of_input_codes_is_one_delegate_after_one_cast():
    torch.manual_seed(0)
    module = CodesToLatents().eval()
    cases = [_codes(n) for n in (20, 4, 64)]
    stock = lower_and_compare(module, cases[0], rewrite=False, dynamic_shapes=({2: FRAMES},))
    report = lower_and_compare(module, cases[0], dynamic_shapes=({2: FRAMES},), also_run=cases[1:], atol=0.0)
    assert {"aten.embedding", "aten.select_copy"} <= set(stock.ops_outside_delegates), stock
    assert report.delegates == 1 and report.ops_outside_delegates == {"dim_order_ops._to_dim_order_copy": 1}, report
    assert {"EmbeddingAsOneHotGemmPass", "CastsBeforeDataMovementPass"} <= set(report.rewrites)


def test_fp32_casts_of_one_input_become_one_cast_before_the_selections():
    torch.manual_seed(0)
    cases = [_codes(n) for n in (20, 4, 64)]
    counts = {"aten._to_copy.default": 1, "aten.select.int": 0, "aten.embedding.default": 0, "aten.linear.default": 2}
    result = assert_rewrites(
        CodesToLatents().eval(), cases, "CastsBeforeDataMovementPass", counts, dynamic_shapes=({2: FRAMES},), atol=0.0
    )
    (cast,) = result.program.graph.find_nodes(op="call_function", target=torch.ops.aten._to_copy.default)
    assert cast.args[0].op == "placeholder"


class OtherCasts(torch.nn.Module):
    def forward(self, x, n):
        return (
            x.transpose(0, 1).to(torch.float32),
            n.to(torch.float32),
            n.transpose(0, 1).to(torch.float16),
            n.transpose(0, 1).float() + 1,
        )


def test_leaves_other_casts_with_their_reasons():
    ep = export_aten(OtherCasts(), (torch.randn(2, 3, dtype=torch.float64), torch.randint(0, 9, (2, 3))))
    rewrite = CastsBeforeDataMovementPass(ep)
    assert rewrite(ep.graph_module).modified  # the last
    assert sorted(reason for _, reason in rewrite.skipped) == [
        "it does not cast integers",
        "it reads no view or selection",
        "not a cast to float32 that changes nothing else",
    ], rewrite.skipped

"""Values computed from parameters alone as constants: Snake's exp and reciprocal in the delegate, GEMM weights left
to the weight fold, nothing that would grow the program, values of a shared table weighed together, a view of a value
left a view of its constant."""

from __future__ import annotations

import torch
from torch.export import Dim
from torch.nn.utils import weight_norm

from audiodeploy.lowering.passes.parameter_only_values_as_constants import ParameterOnlyValuesAsConstantsPass
from tests.pipeline import export_aten, lower_and_compare

FRAMES = Dim("frames", min=4, max=64)


class SnakeBetaConv(torch.nn.Module):
    """BigVGAN's SnakeBeta in log scale after a weight-normed convolution."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv = weight_norm(torch.nn.Conv1d(channels, channels, 3, padding=1))
        self.alpha = torch.nn.Parameter(torch.randn(channels) * 0.2)
        self.beta = torch.nn.Parameter(torch.randn(channels) * 0.2)

    def forward(self, x):
        x = self.conv(x)
        alpha = torch.exp(self.alpha.unsqueeze(0).unsqueeze(-1))
        beta = torch.exp(self.beta.unsqueeze(0).unsqueeze(-1))
        return x + (1.0 / (beta + 1e-9)) * torch.pow(torch.sin(x * alpha), 2)


class ExpandedBias(torch.nn.Module):
    """A [C] parameter expanded over a fixed length: storing it would write 16 times its bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(8, 1))

    def forward(self, x):
        return x + torch.exp(self.bias).expand(8, 16)


class SharedTableProjections(torch.nn.Module):
    """SEW-D's disentangled attention in small: one relative-position table projected to keys and to queries, each
    projection as large as the table (``reduce``: each summed to a row per position, a quarter of it)."""

    def __init__(self, reduce: bool = False) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(64, 16))
        self.key = torch.nn.Linear(16, 16)
        self.query = torch.nn.Linear(16, 16)
        self.reduce = reduce

    def forward(self, x):
        keys, queries = self.key(self.table), self.query(self.table)
        if self.reduce:
            return x + keys.sum(-1) * queries.sum(-1)
        # [2 heads, 8, 64 positions], read by a bmm with the [2, T, 8] heads of x: no GEMM weight to fold
        keys, queries = (projection.view(64, 2, 8).permute(1, 2, 0) for projection in (keys, queries))
        return torch.bmm(x, keys) + torch.bmm(x, queries)


class ComputedCodebookQuantizer(torch.nn.Module):
    """Mimi's residual quantizer step in small: the codebook computed from buffers on every call, viewed as
    [1, K, D] for the search and read as it is by the lookup."""

    def __init__(self, codes: int = 32, dim: int = 8) -> None:
        super().__init__()
        self.register_buffer("embed_sum", torch.randn(codes, dim) * 4)
        self.register_buffer("cluster_usage", torch.rand(codes) * 3 + 0.5)

    def forward(self, x):
        codebook = self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]
        rows = x.transpose(1, 2).reshape(-1, codebook.shape[1])
        indices = torch.cdist(rows[None], codebook[None], compute_mode="use_mm_for_euclid_dist")[0].argmin(-1)
        residual = rows - torch.nn.functional.embedding(indices, codebook)
        return residual.reshape(x.shape[0], -1, codebook.shape[1]).transpose(1, 2)


def test_fp32_snake_parameters_become_constants_in_one_delegate():
    torch.manual_seed(0)
    module = SnakeBetaConv().eval()
    x = torch.randn(1, 8, 20)
    stock = lower_and_compare(module, (x,), rewrite=False, dynamic_shapes=({2: FRAMES},))
    assert stock.ops_outside_delegates.get("aten.reciprocal") == 1
    report = lower_and_compare(module, (x,), dynamic_shapes=({2: FRAMES},), also_run=[(torch.randn(1, 8, 64),)])
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert report.rewrites == ("ParameterOnlyValuesAsConstantsPass",)
    assert len(report.folds) == 1 and report.not_folded == ()  # the weight norm is still the fold's


def test_leaves_gemm_weights_and_growing_values_as_computed():
    torch.manual_seed(0)
    snake = export_aten(SnakeBetaConv().eval(), (torch.randn(1, 8, 20),))
    assert ParameterOnlyValuesAsConstantsPass(snake)(snake.graph_module).modified
    targets = [node.target for node in snake.graph.nodes]
    assert torch.ops.aten._weight_norm_interface.default in targets or torch.ops.aten._weight_norm.default in targets
    assert torch.ops.aten.exp.default not in targets and torch.ops.aten.reciprocal.default not in targets
    assert {"alpha", "beta"}.isdisjoint(snake.state_dict)  # the sources are dropped with their computation

    expanded = export_aten(ExpandedBias(), (torch.randn(8, 16),))
    assert not ParameterOnlyValuesAsConstantsPass(expanded)(expanded.graph_module).modified


def test_values_of_a_shared_table_are_stored_together_and_only_when_smaller_than_it():
    torch.manual_seed(0)
    x = torch.randn(2, 20, 8)
    growing = export_aten(SharedTableProjections().eval(), (x,))
    constants = ParameterOnlyValuesAsConstantsPass(growing)
    assert not constants(growing.graph_module).modified
    # Each projection alone is as large as the table; both are twice it.
    assert [reason for _, reason in constants.skipped] == [
        "its value and 1 other value(s) computed from the same constants would store 8192 bytes, more than the 6272 "
        "bytes of constants read"
    ] * 2
    report = lower_and_compare(SharedTableProjections().eval(), (x,), dynamic_shapes=({1: FRAMES},))
    assert (report.delegates, report.ops_outside_delegates) == (1, {})

    summed = export_aten(SharedTableProjections(reduce=True).eval(), (torch.randn(1, 20, 64),))
    assert ParameterOnlyValuesAsConstantsPass(summed)(summed.graph_module).modified
    assert "table" not in summed.state_dict


def test_a_view_of_a_computed_codebook_stays_a_view_of_its_one_constant():
    torch.manual_seed(0)
    x = torch.randn(1, 8, 20)
    program = export_aten(ComputedCodebookQuantizer().eval(), (x,))
    constants = ParameterOnlyValuesAsConstantsPass(program)
    assert constants(program.graph_module).modified
    # The codebook [32, 8] is stored once (the [1, 32, 8] view stays a view of it), not twice: twice would be more
    # than the buffers it is computed from, and the search and lookup would stay outside the delegate.
    assert len(constants.rewritten) == 1 and constants.skipped == []
    assert {"embed_sum", "cluster_usage"}.isdisjoint(program.state_dict) and len(program.constants) == 1
    report = lower_and_compare(
        ComputedCodebookQuantizer().eval(),
        (x,),
        dynamic_shapes=({2: FRAMES},),
        also_run=[(torch.randn(1, 8, 64),)],
        atol=1e-4,
    )
    assert report.delegates == 1 and "aten.embedding" not in report.ops_outside_delegates, report
    assert {"CdistAsGemmPass", "EmbeddingAsOneHotGemmPass"} <= set(report.rewrites), report

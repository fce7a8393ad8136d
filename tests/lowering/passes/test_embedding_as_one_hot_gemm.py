"""A constant table's lookup at an index computed as a float, as a one-hot GEMM: one delegate, the table's own
numbers."""

from __future__ import annotations

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.embedding_as_one_hot_gemm import EmbeddingAsOneHotGemmPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten

FRAMES = Dim("frames", min=4, max=64)


class LookupAtComputedIndex(torch.nn.Module):
    """An index computed from the input (clamped into the table), looked up, and projected: float in, float out."""

    def __init__(self, rows: int = 12, dim: int = 5) -> None:
        super().__init__()
        self.rows = rows
        self.index = torch.nn.Conv1d(3, 1, 1)
        self.table = torch.nn.Embedding(rows, dim)
        self.out = torch.nn.Conv1d(dim, 3, 1)

    def forward(self, x):
        index = self.index(x).abs().clamp(max=self.rows - 0.5).squeeze(1).to(torch.int64)
        return self.out(self.table(index).transpose(1, 2))


def test_fp32_lookup_at_a_computed_index_with_dynamic_length_is_one_delegate():
    torch.manual_seed(0)
    module = LookupAtComputedIndex().eval()
    cases = [(4 * torch.randn(1, 3, n),) for n in (20, 4, 64)]
    stock, _ = lower_stock_and_rewritten(
        module,
        cases[0],
        "EmbeddingAsOneHotGemmPass",
        dynamic_shapes=({2: FRAMES},),
        also_run=cases[1:],
        atol=0.0,
    )
    assert "aten.embedding" in stock.ops_outside_delegates, stock


def test_fp32_lookup_is_the_table_bit_for_bit():
    torch.manual_seed(0)
    module = LookupAtComputedIndex().eval()
    cases = [(4 * torch.randn(1, 3, n),) for n in (20, 4, 64)]
    counts = {"aten.embedding.default": 0, "aten.linear.default": 1, "aten.floor.default": 1}
    result = assert_rewrites(
        module, cases, "EmbeddingAsOneHotGemmPass", counts, dynamic_shapes=({2: FRAMES},), atol=0.0
    )
    assert "p_table_weight" not in {n.name for n in result.program.graph.nodes}


class OtherLookups(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(4, 3))
        self.vocabulary = torch.nn.Parameter(torch.randn(5000, 2))

    def forward(self, i, f, t):
        return (
            torch.nn.functional.embedding(i + 1, self.table),
            torch.nn.functional.embedding(f.to(torch.int64), t),
            torch.nn.functional.embedding(f.double().to(torch.int64), self.table),
            torch.nn.functional.embedding(i, self.vocabulary),
        )


def test_leaves_other_lookups_with_their_reasons():
    ep = export_aten(OtherLookups(), (torch.randint(0, 3, (2, 3)), torch.rand(2, 3) * 3, torch.randn(4, 3)))
    rewrite = EmbeddingAsOneHotGemmPass(ep)
    assert not rewrite(ep.graph_module).modified
    neither = "its index is neither cast from float32 nor read from the program's input"
    assert sorted(reason for _, reason in rewrite.skipped) == [
        neither,
        neither,
        "its table has more than 4096 rows: a one-hot GEMM would cost that many multiply-adds per entry looked up",
        "its table is not a constant float32 [K, D]",
    ], rewrite.skipped


class CodebookSum(torch.nn.Module):
    """Codes ``[1, 2, T]`` (two codebooks, as a codec's decoder reads them), each codebook's codes unbound and
    looked up in its own table, the embeddings summed: Mimi's decode."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = torch.nn.ModuleList([torch.nn.Embedding(16, 4), torch.nn.Embedding(16, 4)])

    def forward(self, codes):
        return sum(table(book) for table, book in zip(self.tables, codes.transpose(0, 1)))


def test_fp32_codes_unbound_from_the_input_are_looked_up_in_one_delegate():
    torch.manual_seed(0)
    cases = [(torch.randint(0, 16, (1, 2, n)),) for n in (20, 4, 64)]
    result = assert_rewrites(
        CodebookSum().eval(),
        cases,
        "EmbeddingAsOneHotGemmPass",
        {"aten.embedding.default": 0, "aten.linear.default": 2},
        dynamic_shapes=({2: FRAMES},),
        atol=0.0,
    )
    assert result.changed

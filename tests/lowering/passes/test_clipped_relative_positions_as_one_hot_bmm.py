import torch
from torch.export import Dim

from audiodeploy.lowering.passes.clipped_relative_positions_as_one_hot_bmm import (
    ClippedRelativePositionsAsOneHotBmmPass,
)
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

FRAMES = Dim("frames", min=4, max=40)
HEADS, HEAD_DIM, LEFT, RIGHT = 2, 4, 6, 2


class RelativeKeyScores(torch.nn.Module):
    """Wav2Vec2-BERT's ``relative_key`` scores: clipped distances index a learned table, contracted with the queries
    and added to the attention's scores."""

    def __init__(self, left: int = LEFT, right: int = RIGHT) -> None:
        super().__init__()
        self.left, self.right = left, right
        self.distance_embedding = torch.nn.Embedding(left + right + 1, HEAD_DIM)

    def forward(self, q):
        n = q.shape[2]
        distance = torch.arange(n).view(1, -1) - torch.arange(n).view(-1, 1)
        rows = self.distance_embedding(torch.clamp(distance, -self.left, self.right) + self.left)
        relative = torch.einsum("bhld,lrd->bhlr", q, rows)
        # Self-attention of the queries with the relative scores added, as the conformer's attention reads them.
        weights = torch.softmax(torch.matmul(q, q.transpose(-1, -2)) * 0.5 + relative, -1)
        return torch.matmul(weights, q)


def _queries(n: int) -> tuple[torch.Tensor]:
    return (torch.randn(1, HEADS, n, HEAD_DIM),)


def test_fp32_clipped_relative_key_scores_are_delegated_at_a_dynamic_length():
    torch.manual_seed(0)
    module = RelativeKeyScores().eval()
    stock = lower_and_compare(module, _queries(20), rewrite=False, dynamic_shapes=({2: FRAMES},))
    report = lower_and_compare(
        module, _queries(20), dynamic_shapes=({2: FRAMES},), also_run=[_queries(4), _queries(40)]
    )
    assert "aten.embedding" in stock.ops_outside_delegates, stock
    assert "ClippedRelativePositionsAsOneHotBmmPass" in report.rewrites, report.rewrites
    # The positions are cut to the length (read from the input) before the delegate, as a cut constant is: a row
    # and a column, from which the delegate computes the [T, T] offsets.
    outside = {"aten.slice_copy": 2, "sym_size.int": 1}
    assert (report.delegates, report.ops_outside_delegates) == (1, outside), report


def test_fp32_the_rows_become_a_one_hot_bmm_and_no_length_squared_constant():
    cases = [_queries(n) for n in (20, 4, 40, 7)]
    result = assert_rewrites(
        RelativeKeyScores(),
        cases,
        "ClippedRelativePositionsAsOneHotBmmPass",
        # the one-hot bmm and the attention's two, which AttentionHeadsAsBatchPass writes as bmm
        {"aten.embedding.default": 0, "aten.einsum.default": 0, "aten.bmm.default": 3, "aten.linear.default": 1},
        dynamic_shapes=({2: FRAMES},),
    )
    constants = {**result.program.constants, **result.program.state_dict}
    assert max(t.numel() for t in constants.values()) <= 40 * 4, {k: t.shape for k, t in constants.items()}


class BucketedScores(RelativeKeyScores):
    """Distances halved before clipping: not a clipped distance, so not one row per diagonal offset."""

    def forward(self, q):
        n = q.shape[2]
        distance = torch.arange(n).view(1, -1) - torch.arange(n).view(-1, 1)
        rows = self.distance_embedding(torch.clamp(distance // 2, -self.left, self.right) + self.left)
        return torch.einsum("bhld,lrd->bhlr", q, rows)


class DataIndexedScores(RelativeKeyScores):
    def forward(self, q):
        index = (q[0, 0, :, :1] > 0).long().expand(-1, q.shape[2])
        return torch.einsum("bhld,lrd->bhlr", q, self.distance_embedding(index))


def test_leaves_other_indices_with_their_reasons():
    for module, reason in [
        (BucketedScores(), "its index at length 4 is not clamp(j - i + 6, 0, 8)"),
        (DataIndexedScores(), "its index is computed from more than the length"),
    ]:
        ep = export_aten(module, _queries(20), dynamic_shapes=({2: FRAMES},))
        rewrite = ClippedRelativePositionsAsOneHotBmmPass(ep)
        assert not rewrite(ep.graph_module).modified
        assert [r for _, r in rewrite.skipped] == [reason], rewrite.skipped

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.reshape_round_trips_around_row_ops import ReshapeRoundTripsAroundRowOpsPass
from tests.pipeline import export_aten, lower_and_compare

HEADS, WIDTH = 2, 16
SIGNAL = WIDTH * Dim("frames", min=4, max=48)


class FourDimensionalSoftmax(torch.nn.Module):
    """DeBERTa's (SEW-D's) attention: 3-D scores viewed as [B, H, T, T] for the softmax and back for the bmm."""

    def __init__(self, softmax_dim: int = -1) -> None:
        super().__init__()
        self.softmax_dim = softmax_dim
        self.query = torch.nn.Linear(WIDTH, WIDTH)
        self.key = torch.nn.Linear(WIDTH, WIDTH)

    @staticmethod
    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, HEADS, WIDTH // HEADS).transpose(0, 1)

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        x = signal.view(-1, WIDTH)
        q, k = self.heads(self.query(x)), self.heads(self.key(x))
        scores = torch.bmm(q, k.transpose(-1, -2))
        scores = scores.view(-1, HEADS, scores.size(-2), scores.size(-1))
        probabilities = torch.nn.functional.dropout(torch.softmax(scores, self.softmax_dim), 0.1, training=False)
        return torch.bmm(probabilities.view(-1, scores.size(-2), scores.size(-1)), k)


def _frames(n: int) -> tuple[torch.Tensor]:
    return (torch.randn(1, n * WIDTH),)


def test_fp32_the_softmax_runs_on_the_3d_scores_in_one_delegate_at_a_dynamic_length():
    torch.manual_seed(0)
    report = lower_and_compare(
        FourDimensionalSoftmax().eval(),
        _frames(20),
        dynamic_shapes=({1: SIGNAL},),
        also_run=[_frames(4), _frames(48), _frames(31)],
    )
    assert "ReshapeRoundTripsAroundRowOpsPass" in report.rewrites, report.rewrites
    assert report.delegates == 1 and not set(report.ops_outside_delegates) - {"sym_size.int"}, report


def test_leaves_a_round_trip_around_a_softmax_over_another_dimension_with_its_reason():
    torch.manual_seed(0)
    ep = export_aten(FourDimensionalSoftmax(softmax_dim=-2).eval(), _frames(20), dynamic_shapes=({1: SIGNAL},))
    rewrite = ReshapeRoundTripsAroundRowOpsPass(ep)
    assert not rewrite(ep.graph_module).modified
    reason = "what it reshapes is not a reshape through row-wise ops read only by each other"
    assert reason in dict(rewrite.skipped).values(), rewrite.skipped

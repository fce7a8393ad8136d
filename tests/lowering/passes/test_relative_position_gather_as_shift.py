import math

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.relative_position_gather_as_shift import RelativePositionGatherAsShiftPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

HEADS, WIDTH, SPAN, LONGEST = 2, 16, 16, 48
# A signal of frames, as a feature extractor's output (and SEW-D's squeezed frames): the scores are [T, T].
SIGNAL = WIDTH * Dim("frames", min=4, max=LONGEST)


def log_buckets(distances: torch.Tensor, bucket_size: int = SPAN, max_position: int = 64) -> torch.Tensor:
    """DeBERTa's position buckets: a distance itself up to half the buckets, then logarithmically spaced."""
    sign, mid = torch.sign(distances), bucket_size // 2
    far = torch.where((distances < mid) & (distances > -mid), torch.tensor(mid - 1), distances.abs())
    logarithmic = torch.ceil(torch.log(far / mid) / math.log((max_position - 1) / mid) * (mid - 1)) + mid
    return torch.where(far <= mid, distances, (logarithmic * sign).long())


class DisentangledScores(torch.nn.Module):
    """DeBERTa's (SEW-D's) disentangled attention: content-to-position scores gathered from the queries' products
    with every position key, position-to-content ones from the keys' products with every position query."""

    def __init__(self, buckets=lambda rows, columns: log_buckets(rows - columns)) -> None:
        super().__init__()
        self.buckets = buckets
        self.positions = torch.nn.Parameter(torch.randn(2 * SPAN, WIDTH))
        self.query = torch.nn.Linear(WIDTH, WIDTH)
        self.key = torch.nn.Linear(WIDTH, WIDTH)

    @staticmethod
    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], HEADS, -1).transpose(0, 1)

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        x = signal.view(-1, WIDTH)
        n = x.shape[0]
        q, k = self.heads(self.query(x)), self.heads(self.key(x))
        position_keys, position_queries = self.heads(self.key(self.positions)), self.heads(self.query(self.positions))
        steps = torch.arange(n)
        buckets = self.buckets(steps[:, None], steps[None, :])
        to_position = (buckets + SPAN).clamp(0, 2 * SPAN - 1).unsqueeze(0).expand(HEADS, n, n)
        from_position = (-buckets + SPAN).clamp(0, 2 * SPAN - 1).unsqueeze(0).expand(HEADS, n, n)
        c2p = torch.gather(torch.bmm(q, position_keys.transpose(-1, -2)), -1, to_position)
        p2c = torch.gather(torch.bmm(k, position_queries.transpose(-1, -2)), -1, from_position).transpose(-1, -2)
        weights = torch.softmax(torch.bmm(q, k.transpose(-1, -2)) + c2p + p2c, -1)
        return torch.bmm(weights, k).transpose(0, 1).reshape(1, n, WIDTH)


def _frames(n: int) -> tuple[torch.Tensor]:
    return (torch.randn(1, n * WIDTH),)


def test_fp32_log_bucketed_positions_are_gemms_and_copies_at_a_dynamic_length():
    torch.manual_seed(0)
    report = lower_and_compare(
        DisentangledScores().eval(),
        _frames(20),
        dynamic_shapes=({1: SIGNAL},),
        also_run=[_frames(4), _frames(LONGEST), _frames(33), _frames(9)],
    )
    assert "RelativePositionGatherAsShiftPass" in report.rewrites, report.rewrites
    # Left outside: the buckets' columns cut to the length, the rows they select, and the shift's views and slices
    # (two symbolic sizes); no gather and nothing computing its index.
    assert set(report.ops_outside_delegates) <= {
        "aten.slice_copy",
        "aten.view_copy",
        "aten.index_select",
        "sym_size.int",
    }, report


def test_fp32_the_gathers_become_a_shift_and_no_constant_grows_with_the_square_of_the_length():
    torch.manual_seed(0)
    result = assert_rewrites(
        DisentangledScores(),
        [_frames(n) for n in (20, 4, LONGEST, 7)],
        "RelativePositionGatherAsShiftPass",
        # Four bmm as before: the two products with every bucket, which nothing reads after the rewrite, are gone.
        {"aten.gather.default": 0, "aten.index_select.default": 2, "aten.bmm.default": 4},
        dynamic_shapes=({1: SIGNAL},),
    )
    constants = {**result.program.constants, **result.program.state_dict}
    assert max(t.numel() for t in constants.values()) <= 2 * LONGEST * WIDTH, {k: t.shape for k, t in constants.items()}


def test_fp32_a_program_of_one_length_is_rewritten_too():
    torch.manual_seed(0)
    assert_rewrites(
        DisentangledScores(), [_frames(30)], "RelativePositionGatherAsShiftPass", {"aten.gather.default": 0}
    )


def test_leaves_a_gather_that_is_not_by_relative_position_with_its_reason():
    torch.manual_seed(0)
    for module, reason in [
        (
            DisentangledScores(buckets=lambda rows, columns: (rows + columns).clamp(max=SPAN - 1)),
            "its index is not a function of i - j",
        ),
        (
            # Distances in parts of the length: a function of i - j at each length, not the same one.
            DisentangledScores(buckets=lambda rows, columns: (rows - columns) * SPAN // rows.shape[0]),
            "its index at length 4 is not the same function of i - j as at length 48",
        ),
    ]:
        ep = export_aten(module, _frames(20), dynamic_shapes=({1: SIGNAL},))
        rewrite = RelativePositionGatherAsShiftPass(ep)
        assert not rewrite(ep.graph_module).modified
        assert reason in dict(rewrite.skipped).values(), rewrite.skipped

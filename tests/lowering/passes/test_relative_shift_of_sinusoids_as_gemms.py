import math

import torch
from torch.export import Dim

from audiodeploy.lowering.passes.relative_shift_of_sinusoids_as_gemms import RelativeShiftOfSinusoidsAsGemmsPass
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare

HEADS, WIDTH, TABLE_POSITIONS = 2, 16, 100
# A signal of frames, as a feature extractor's output: at a length of frames itself, export cannot prove the skew's
# view valid ((2T - 1) % T != 0 for every T > 1) and fixes the length.
SIGNAL = WIDTH * Dim("frames", min=4, max=48)


def sinusoids(positions: int, width: int, *, interleaved: bool) -> torch.Tensor:
    """A Transformer-XL table of distances ``positions - 1 .. -(positions - 1)``: sines and cosines, in pairs of
    columns (``interleaved``, Wav2Vec2-Conformer's) or in two halves (ESPnet's and NeMo's older layout)."""
    distances = torch.arange(positions - 1, -positions, -1, dtype=torch.float32).unsqueeze(1)
    frequencies = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * -(math.log(10000.0) / width))
    sines, cosines = torch.sin(distances * frequencies), torch.cos(distances * frequencies)
    table = torch.stack([sines, cosines], dim=2).flatten(1) if interleaved else torch.cat([sines, cosines], dim=1)
    return table.unsqueeze(0)


class RelativeShiftScores(torch.nn.Module):
    """Wav2Vec2-Conformer's relative attention: the table cut to the length, projected, scored against the queries
    and skewed, added to the content scores."""

    def __init__(self, table: torch.Tensor, heads: int = HEADS) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, WIDTH // heads
        self.register_buffer("pe", table, persistent=False)
        self.linear_pos = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.linear_q = torch.nn.Linear(WIDTH, WIDTH)
        self.pos_bias_v = torch.nn.Parameter(torch.randn(heads, WIDTH // heads))

    def table(self, n: int) -> torch.Tensor:
        """The sinusoids of distances ``n - 1 .. -(n - 1)``: ``[1, 2n - 1, WIDTH]``."""
        center = self.pe.shape[1] // 2
        return self.pe[:, center - n + 1 : center + n]

    def forward(self, signal):
        x = signal.view(1, -1, WIDTH)
        n = x.shape[1]
        positions = self.linear_pos(self.table(n))
        positions = positions.view(1, -1, self.heads, self.head_dim).permute(0, 2, 3, 1)
        q = self.linear_q(x).view(1, n, self.heads, self.head_dim).transpose(1, 2)
        scores = self.shift(torch.matmul(q + self.pos_bias_v[None, :, None, :], positions))
        weights = torch.softmax(torch.matmul(q, q.transpose(-1, -2)) * 0.25 + scores, -1)
        return torch.matmul(weights, q).transpose(1, 2).reshape(1, n, WIDTH)

    @staticmethod
    def shift(scores: torch.Tensor) -> torch.Tensor:
        """transformers' and NeMo's: a zero column padded."""
        shape = scores.shape
        padded = torch.nn.functional.pad(scores, (1, 0)).view(*shape[:2], shape[3] + 1, shape[2])
        return padded[..., 1:, :].view(shape)[..., : shape[2]]


class EspnetRelativeShiftScores(RelativeShiftScores):
    @staticmethod
    def shift(scores: torch.Tensor) -> torch.Tensor:
        """ESPnet's: a zero column concatenated, and the columns kept counted from the distances."""
        zero_pad = torch.zeros((*scores.size()[:3], 1), dtype=scores.dtype)
        padded = torch.cat([zero_pad, scores], dim=-1).view(*scores.size()[:2], scores.size(3) + 1, scores.size(2))
        return padded[:, :, 1:].view_as(scores)[:, :, :, : scores.size(-1) // 2 + 1]


class ComputedRelativeShiftScores(RelativeShiftScores):
    """transformers' Parakeet: the sinusoids computed from the length on every call, not cut from a table."""

    def __init__(self, heads: int = HEADS) -> None:
        super().__init__(torch.zeros(1, 1, WIDTH), heads)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, WIDTH, 2).float() / WIDTH), persistent=False)

    def table(self, n: int) -> torch.Tensor:
        phases = torch.arange(n - 1, -n, -1)[:, None].float() * self.inv_freq
        return torch.stack([phases.sin(), phases.cos()], dim=-1).reshape(1, 2 * n - 1, WIDTH)


def _frames(n: int) -> tuple[torch.Tensor]:
    return (torch.randn(1, n * WIDTH),)


def test_fp32_the_relative_shift_is_one_delegate_at_a_dynamic_length():
    for module_class in (RelativeShiftScores, ComputedRelativeShiftScores):
        torch.manual_seed(0)
        module = (
            RelativeShiftScores(sinusoids(TABLE_POSITIONS, WIDTH, interleaved=True))
            if module_class is RelativeShiftScores
            else ComputedRelativeShiftScores()
        ).eval()
        lengths = [_frames(4), _frames(48), _frames(33)]
        stock = lower_and_compare(module, _frames(20), rewrite=False, dynamic_shapes=({1: SIGNAL},), also_run=lengths)
        report = lower_and_compare(module, _frames(20), dynamic_shapes=({1: SIGNAL},), also_run=lengths)
        assert stock.delegates > 1, stock
        assert "RelativeShiftOfSinusoidsAsGemmsPass" in report.rewrites, report.rewrites
        # The cosines and sines cut to the length (read from the input) before the delegate, as a cut constant is.
        assert report.delegates == 1, report
        assert set(report.ops_outside_delegates) <= {"aten.slice_copy", "sym_size.int"}, report


def test_fp32_both_table_layouts_and_both_zero_columns_become_gemms_and_no_constant_grows_with_the_table():
    torch.manual_seed(0)
    for module_class, interleaved in (
        (RelativeShiftScores, True),
        (RelativeShiftScores, False),
        (EspnetRelativeShiftScores, True),
    ):
        result = assert_rewrites(
            module_class(sinusoids(TABLE_POSITIONS, WIDTH, interleaved=interleaved)),
            [_frames(n) for n in (20, 4, 48, 7)],
            "RelativeShiftOfSinusoidsAsGemmsPass",
            {"aten.pad.default": 0, "aten.constant_pad_nd.default": 0, "aten.cat.default": 0},
            dynamic_shapes=({1: SIGNAL},),
        )
        constants = {**result.program.constants, **result.program.state_dict}
        # cosines and sines of the 8 frequencies at up to 48 positions; the 199-row table is gone
        assert max(t.numel() for t in constants.values()) <= 48 * WIDTH // 2, {k: t.shape for k, t in constants.items()}


def test_leaves_a_shift_of_other_positions_with_its_reason():
    torch.manual_seed(0)
    learned = torch.randn(1, 2 * TABLE_POSITIONS - 1, WIDTH)
    chirp = sinusoids(TABLE_POSITIONS, WIDTH, interleaved=True)
    distances = torch.arange(TABLE_POSITIONS - 1, -TABLE_POSITIONS, -1, dtype=torch.float32)
    chirp[0, :, 0], chirp[0, :, 1] = torch.sin(distances**2 / 500), torch.cos(distances**2 / 500)
    many_heads = "its 16 products per score (8 frequencies) would cost 4 times the 4 of the product it replaces"
    for table, heads, reason in [
        (learned, HEADS, "its table's columns do not pair up"),
        (chirp, HEADS, "its table's columns are not sinusoids: a pair's phase does not grow linearly"),
        (sinusoids(TABLE_POSITIONS, WIDTH, interleaved=True), 8, many_heads),
    ]:
        ep = export_aten(RelativeShiftScores(table, heads), _frames(20), dynamic_shapes=({1: SIGNAL},))
        rewrite = RelativeShiftOfSinusoidsAsGemmsPass(ep)
        assert not rewrite(ep.graph_module).modified
        assert [r.split(", more than")[0] for _, r in rewrite.skipped] == [reason], rewrite.skipped

import torch

from audiodeploy.lowering.passes.relative_shift_of_sinusoids_as_gemms import RelativeShiftOfSinusoidsAsGemmsPass
from tests.lowering.passes.modules import (
    HEADS,
    SIGNAL,
    TABLE_POSITIONS,
    WIDTH,
    RelativeShiftScores,
    relative_shift_frames,
    sinusoids,
)
from tests.pipeline import assert_rewrites, export_aten, lower_and_compare


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


def test_fp32_the_relative_shift_is_one_delegate_at_a_dynamic_length():
    for module_class in (RelativeShiftScores, ComputedRelativeShiftScores):
        torch.manual_seed(0)
        module = (
            RelativeShiftScores(sinusoids(TABLE_POSITIONS, WIDTH, interleaved=True))
            if module_class is RelativeShiftScores
            else ComputedRelativeShiftScores()
        ).eval()
        lengths = [relative_shift_frames(4), relative_shift_frames(48), relative_shift_frames(33)]
        stock = lower_and_compare(
            module, relative_shift_frames(20), rewrite=False, dynamic_shapes=({1: SIGNAL},), also_run=lengths
        )
        report = lower_and_compare(module, relative_shift_frames(20), dynamic_shapes=({1: SIGNAL},), also_run=lengths)
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
            [relative_shift_frames(n) for n in (20, 4, 48, 7)],
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
        ep = export_aten(RelativeShiftScores(table, heads), relative_shift_frames(20), dynamic_shapes=({1: SIGNAL},))
        rewrite = RelativeShiftOfSinusoidsAsGemmsPass(ep)
        assert not rewrite(ep.graph_module).modified
        assert [r.split(", more than")[0] for _, r in rewrite.skipped] == [reason], rewrite.skipped

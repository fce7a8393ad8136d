"""Values computed from the input length alone: a constant cut to the length, checked for every length, unless it
reads no parameter and would grow with the square of the length (a mask) stays computed, from its positions stored;
at one length, the value itself."""

from __future__ import annotations

import sympy
import torch
from torch.export import Dim
from torch.nn.utils.parametrizations import weight_norm

import audiodeploy
from audiodeploy.lowering.passes import length_only_values_as_constants
from audiodeploy.lowering.passes.length_only_values_as_constants import LengthOnlyValuesAsConstantsPass
from audiodeploy.program import fidelity
from tests.lowering.passes.modules import relative_position_buckets
from tests.pipeline import (
    assert_op_counts,
    assert_program_matches_eager,
    assert_rewrites,
    export_aten,
    lower_and_compare,
    rewritten,
    run_lowered,
)

FRAMES = Dim("frames", min=4, max=40)


class RelativePositionBias(torch.nn.Module):
    """Scores [H, T, T] plus a learned bias of the relative position, as WavLM adds to attention."""

    def __init__(self, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(16, heads)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):  # x [1, T, 8]
        length = x.shape[1]
        bias = self.embed(relative_position_buckets(length)).permute(2, 0, 1)  # [H, T, T]
        q = self.proj(x).view(length, self.heads, 4).transpose(0, 1)  # [H, T, 4]
        scores = torch.bmm(q, q.transpose(1, 2)) + bias
        return torch.bmm(scores.softmax(-1), q)


class CausalAttention(torch.nn.Module):
    """Scores [1, T, T] plus a causal mask computed from the length alone: it masks something, and reads no
    parameter."""

    def forward(self, x):  # x [1, T, 8]
        positions = torch.arange(x.shape[1])
        mask = torch.where(positions[None, :] <= positions[:, None], 0.0, float("-inf"))
        scores = torch.bmm(x, x.transpose(1, 2)) + mask
        return torch.bmm(scores.softmax(-1), x)


class NormalizedPositions(torch.nn.Module):
    """positions / length: the value at a shorter length is not the corner of the longest one's."""

    def forward(self, x):  # x [1, T, 8]
        length = x.shape[1]
        positions = torch.arange(length, dtype=torch.float32) / length
        return x + positions[None, :, None]


def _is_rewritten(module: torch.nn.Module, x: torch.Tensor, frames: Dim | None = FRAMES) -> bool:
    ep = export_aten(module, (x,), dynamic_shapes=None if frames is None else ({1: frames},))
    return LengthOnlyValuesAsConstantsPass(ep)(ep.graph_module).modified


def test_fp32_relative_position_bias_is_a_sliced_constant_and_the_rest_one_delegate():
    torch.manual_seed(0)
    module = RelativePositionBias().eval()
    x = torch.randn(1, 12, 8)
    stock = lower_and_compare(module, (x,), rewrite=False, dynamic_shapes=({1: FRAMES},))
    assert {"aten.arange", "aten.embedding", "aten.where"} <= set(stock.ops_outside_delegates)
    others = [(torch.randn(1, frames, 8),) for frames in (4, 5, 23, 39, 40)]
    report = lower_and_compare(module, (x,), dynamic_shapes=({1: FRAMES},), also_run=others)
    assert report.delegates == 1
    # Cutting the constant to the length is all that runs outside the delegate.
    assert set(report.ops_outside_delegates) <= {"aten.slice_copy", "sym_size.int"}, report.ops_outside_delegates
    assert "LengthOnlyValuesAsConstantsPass" in report.rewrites


def test_a_mask_computed_from_the_length_alone_that_would_grow_with_its_square_is_left_computed_from_stored_positions():
    # As a constant: [40, 40] float32 at the longest length, for a range four times as long sixteen times that. The
    # positions it is computed from are stored instead, a row and a column: [40] each at the longest length.
    module = CausalAttention()
    ep = export_aten(module, (torch.randn(1, 12, 8),), dynamic_shapes=({1: FRAMES},))
    rewrite = LengthOnlyValuesAsConstantsPass(ep)
    assert rewrite(ep.graph_module).modified
    stored = [node for node in ep.graph.nodes if node.op == "placeholder" and node.name.endswith("_at_longest")]
    assert sorted(tuple(node.meta["val"].shape) for node in stored) == [(1, 40), (40, 1)]
    assert_op_counts(ep, {"aten.arange.default": 0, "aten.where.Scalar": 1})
    # the mask (-inf outside: not the banded-mask pass's) stays computed, from the positions cut to the length
    result = rewritten(module, (torch.randn(1, 12, 8),), ({1: FRAMES},))
    assert_op_counts(result.program, {"aten.arange.default": 0, "aten.where.Scalar": 1})
    assert_program_matches_eager(result.program, module, [(torch.randn(1, frames, 8),) for frames in (4, 40)])


def test_a_value_that_is_not_the_corner_of_the_longest_is_left_computed():
    module = NormalizedPositions()
    assert not _is_rewritten(module, torch.randn(1, 12, 8))
    result = rewritten(module, (torch.randn(1, 12, 8),), ({1: FRAMES},))
    assert "LengthOnlyValuesAsConstantsPass" not in result.changed
    assert_op_counts(result.program, {"aten.arange.default": 1})
    assert_program_matches_eager(result.program, module, [(torch.randn(1, frames, 8),) for frames in (4, 40)])


def test_a_length_without_upper_bound_is_left_computed():
    assert not _is_rewritten(RelativePositionBias().eval(), torch.randn(1, 12, 8), Dim("frames", min=4))


def test_a_constant_over_the_size_limit_is_left_computed(monkeypatch):
    # [2, 40, 40] float32 is 12.5 KiB at the longest length.
    monkeypatch.setattr(length_only_values_as_constants, "MAX_CONSTANT_BYTES", 12 * 2**10)
    assert not _is_rewritten(RelativePositionBias().eval(), torch.randn(1, 12, 8))


class PerLayerBiases(torch.nn.Module):
    """Two layers, each with its own learned relative-position table (Wav2Vec2-BERT keeps one per layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([RelativePositionBias(), RelativePositionBias()])

    def forward(self, x):
        return self.layers[1](self.layers[0](x).reshape(1, x.shape[1], 8))


def test_the_pass_stores_at_most_its_budget_in_all(monkeypatch):
    # Each layer's [2, 40, 40] float32 is 12.5 KiB at the longest length: the budget holds one, not two.
    monkeypatch.setattr(length_only_values_as_constants, "MAX_CONSTANT_BYTES", 20 * 2**10)
    ep = export_aten(PerLayerBiases().eval(), (torch.randn(1, 12, 8),), dynamic_shapes=({1: FRAMES},))
    rewrite = LengthOnlyValuesAsConstantsPass(ep)
    assert rewrite(ep.graph_module).modified
    assert len(rewrite.rewritten) == 1
    assert any("over what is left of the pass's" in reason for _, reason in rewrite.skipped), rewrite.skipped


def test_does_nothing_on_a_program_without_length_only_values():
    assert not _is_rewritten(torch.nn.Linear(8, 8), torch.randn(1, 12, 8))


def test_at_one_length_the_bias_is_stored_whole():
    torch.manual_seed(0)
    module = RelativePositionBias().eval()
    gone = ("aten.arange.default", "aten.embedding.default", "aten.where.self", "aten.slice.Tensor")
    assert_rewrites(module, [(torch.randn(1, 12, 8),)], "LengthOnlyValuesAsConstantsPass", dict.fromkeys(gone, 0))


def test_int8_dynamic_at_one_length_is_one_delegate():
    # Lowered: int8 is a distinct case of the partitioner, after the quantizer (which the computed bias broke).
    torch.manual_seed(0)
    module = RelativePositionBias().eval()
    x = torch.randn(1, 12, 8)
    # Left computed, the quantizer turned the bucket arithmetic's numbers into float tensors and calibration failed.
    int8 = audiodeploy.Quantization(audiodeploy.QuantizationScheme.INT8_DYNAMIC)
    lowered = audiodeploy.lower(module, (x,), options=audiodeploy.LoweringOptions(quantization=int8))
    method = lowered.report.methods["forward"]
    assert (method.delegates, method.ops_outside_delegates) == (1, {}), str(lowered.report)
    assert "LengthOnlyValuesAsConstantsPass" in method.rewrites
    with torch.no_grad():
        measured = fidelity.measure([module(x)], [run_lowered(lowered, (x,))])
    assert measured["snr_db"] >= 30.0, measured


def test_at_one_length_a_computation_on_parameters_alone_is_left_to_the_fold():
    conv = weight_norm(torch.nn.Conv1d(8, 8, 3, padding=1))
    assert not _is_rewritten(conv, torch.randn(1, 8, 12), frames=None)


def test_a_size_that_is_not_linear_in_the_length_is_not_read_as_one():
    # SEW-D's relative positions are sized by a floor division of the length: sympy has no polynomial of it.
    from torch.utils._sympy.functions import FloorDiv

    from audiodeploy.lowering.passes.length_only_values_as_constants import _LinearSize

    length = sympy.Symbol("s0", integer=True, positive=True)
    assert _LinearSize.of(FloorDiv(length - 3, 2), length) is None
    assert _LinearSize.of(2 * length - 1, length) == _LinearSize(2, -1)


class HeadsBroadcastTable(torch.nn.Module):
    """A table cut to the length and broadcast over the heads, as a relative shift's keys are."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(40, 8))
        self.register_buffer("heads", torch.ones(2, 1, 1))

    def forward(self, x):  # x [1, T, 8]
        return x + self.heads * self.table[: x.shape[1]]


def test_a_broadcast_of_a_cut_table_is_left_computed_and_the_table_stored_cut():
    # Stored, the broadcast would be [2, 40, 8] at the longest length: the table twice over.
    module = HeadsBroadcastTable()
    ep = export_aten(module, (torch.randn(1, 12, 8),), dynamic_shapes=({1: FRAMES},))
    rewrite = LengthOnlyValuesAsConstantsPass(ep)
    rewrite(ep.graph_module)
    stored = [node for node in ep.graph.nodes if node.op == "placeholder" and node.name.endswith("_at_longest")]
    assert [tuple(node.meta["val"].shape) for node in stored] == [(40, 8)]
    assert_op_counts(ep, {"aten.mul.Tensor": 1})
    result = rewritten(module, (torch.randn(1, 12, 8),), ({1: FRAMES},))
    assert_program_matches_eager(result.program, module, [(torch.randn(1, frames, 8),) for frames in (4, 40)])

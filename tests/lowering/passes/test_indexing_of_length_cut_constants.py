"""A select or fixed slice of a constant cut to the length (rotary cos/sin tables) applied to the constant, no-op
slices dropped: the picks run before the first delegate, which is then the only one."""

from __future__ import annotations

import torch
from torch.export import Dim

from tests.pipeline import assert_rewrites, lower_and_compare, op_counts, rewritten

FRAMES = Dim("frames", min=4, max=48)
REWRITE = "IndexingOfLengthCutConstantsPass"


class StackedRotaryTables(torch.nn.Module):
    """Features scaled by cos and sin tables stacked in one buffer ``[2, Tmax, D]``, each picked as
    ``table[k, :T]`` from the table cut to the input's length, as rotary embeddings do."""

    def __init__(self, features: int = 8, longest: int = 64) -> None:
        super().__init__()
        angles = torch.arange(longest)[:, None] / 10000 ** (torch.arange(features) / features)
        self.register_buffer("table", torch.stack([angles.cos(), angles.sin()]))
        self.proj = torch.nn.Linear(features, features)
        self.out = torch.nn.Linear(features, features)

    def forward(self, x):
        t = x.shape[1]
        h = self.proj(x)
        table = self.table[:, :t].type_as(h)
        cos, sin = table[0, :t], table[1, :t]
        return self.out(torch.relu(h * cos) + h * sin)


def cases() -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, n, 8),) for n in (20, 4, 48)]


def test_fp32_picks_of_a_cut_table_are_cuts_of_picked_constants():
    torch.manual_seed(0)
    result = assert_rewrites(
        StackedRotaryTables().eval(),
        cases(),
        REWRITE,
        {"aten.select.int": 0, "aten.slice.Tensor": 2},
        dynamic_shapes=({1: FRAMES},),
    )
    cuts = [node for node in result.program.graph.nodes if node.target == torch.ops.aten.slice.Tensor]
    # Each table is a constant of its own, cut to the length along its first dimension.
    assert all(cut.args[0].op == "placeholder" and cut.args[1] == 0 for cut in cuts), [c.format_node() for c in cuts]


def test_fp32_slice_with_a_step_is_left_with_its_reason():
    class EveryOtherFeature(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("table", torch.randn(64, 16))

        def forward(self, x):
            return x * self.table[: x.shape[1]].type_as(x)[:, ::2]

    result = rewritten(EveryOtherFeature(), cases()[0], ({1: FRAMES},))
    assert REWRITE not in result.changed
    # The cut to the length stays; the features are picked by a product (feature_slices_as_linears).
    assert op_counts(result.program)["aten.slice.Tensor"] == 1
    assert "FeatureSlicesAsLinearsPass" in result.changed


def test_fp32_rotary_tables_over_dynamic_length_are_one_delegate_and_match_eager():
    torch.manual_seed(0)
    module = StackedRotaryTables().eval()
    first, *others = cases()
    stock = lower_and_compare(module, first, rewrite=False, dynamic_shapes=({1: FRAMES},))
    assert stock.ops_outside_delegates["aten.select_copy"] == 2, stock
    report = lower_and_compare(module, first, dynamic_shapes=({1: FRAMES},), also_run=others[:1])
    assert report.delegates == 1, report
    # Cutting the picked tables to the length is all that runs outside, before the delegate.
    assert report.ops_outside_delegates == {"aten.slice_copy": 2, "sym_size.int": 1}, report.ops_outside_delegates
    assert REWRITE in report.rewrites


class SumToTheShorter(torch.nn.Module):
    """SEW's encoder in small: pooled frames plus a strided positional convolution with its last frame dropped, both
    cut to the shorter; ``(F - 2) // 2 + 1`` and ``F // 2`` frames, equal at every length, which sympy does not see."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Conv1d(3, 4, 2)
        self.positions = torch.nn.Conv1d(4, 4, 4, stride=2, padding=2)

    def forward(self, x):
        frames = self.features(x)
        pooled, positions = torch.nn.functional.avg_pool1d(frames, 2, 2), self.positions(frames)[..., :-1]
        shorter = min(pooled.shape[-1], positions.shape[-1])
        return pooled[..., :shorter] + positions[..., :shorter]


def test_fp32_a_slice_to_the_dimension_size_at_every_length_is_dropped():
    torch.manual_seed(0)
    report = lower_and_compare(
        SumToTheShorter().eval(),
        (torch.randn(1, 3, 20),),
        dynamic_shapes=({2: Dim("samples", min=8, max=64)},),  # from 8: more than one frame, never broadcast
        also_run=[(torch.randn(1, 3, n),) for n in (8, 9, 63, 64)],
    )
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), report
    assert "IndexingOfLengthCutConstantsPass" in report.rewrites

"""A size read from a tensor a delegate computes is read from the program's input instead."""

import torch

from audiodeploy.lowering.passes.sizes_read_from_inputs import SizesReadFromInputsPass
from tests.lowering.passes.modules import (
    SIGNAL,
    WIDTH,
    RelativeShiftScores,
    learnt_relative_shift_table,
    lowered_learnt_relative_shift,
)
from tests.pipeline import assert_program_matches_eager, export_aten

HEADER = 8
"""Samples :class:`HeaderedShiftScores` drops before its frames: the input is ``16 T + 8`` samples long."""


class HeaderedShiftScores(RelativeShiftScores):
    """The relative shift after a header of :data:`HEADER` samples is cut off the signal."""

    def forward(self, signal):
        return super().forward(signal[:, HEADER:])


def _sizes_read(program) -> list[torch.fx.Node]:
    """What each size op of ``program`` reads its size from."""
    return [n.args[0] for n in program.graph.nodes if n.target is torch.ops.aten.sym_size.int]


def test_fp32_a_relative_shift_left_outside_splits_the_delegate_once():
    report = lowered_learnt_relative_shift()
    assert "SizesReadFromInputsPass" in report.rewrites, report.rewrites
    # The table is cut before the first delegate; the skew's views and slices run between the two.
    assert report.delegates == 2, report
    assert report.ops_outside_delegates == {"aten.slice_copy": 3, "aten.view_copy": 2, "sym_size.int": 1}, report


def test_every_size_is_read_from_the_input_as_its_formula():
    torch.manual_seed(0)
    for module, dynamic_shapes, samples in [
        (RelativeShiftScores(learnt_relative_shift_table()), {1: SIGNAL}, lambda n: n * WIDTH),  # T = S // 16
        (
            HeaderedShiftScores(learnt_relative_shift_table()),
            {1: SIGNAL + HEADER},
            lambda n: n * WIDTH + HEADER,
        ),  # (S - 8) // 16
    ]:
        cases = [(torch.randn(1, samples(n)),) for n in (20, 4, 48, 33)]
        program = export_aten(module.eval(), cases[0], dynamic_shapes=(dynamic_shapes,))
        assert any(source.op != "placeholder" for source in _sizes_read(program)), program.graph
        rewrite = SizesReadFromInputsPass(program)
        assert rewrite(program.graph_module).modified
        assert [source.op for source in _sizes_read(program)] == ["placeholder"], program.graph
        assert_program_matches_eager(program, module, cases)


def test_leaves_a_size_read_from_the_input_with_its_reason():
    class CutTable(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(1, 100, WIDTH))

        def forward(self, frames):
            return frames + self.table[:, : frames.shape[1]]

    program = export_aten(CutTable(), (torch.randn(1, 20, WIDTH),), dynamic_shapes=({1: SIGNAL.root},))
    rewrite = SizesReadFromInputsPass(program)
    assert not rewrite(program.graph_module).modified
    assert {reason for _, reason in rewrite.skipped} == {"it reads a program input already"}, rewrite.skipped

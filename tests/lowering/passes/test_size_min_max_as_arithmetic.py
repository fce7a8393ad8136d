"""min and max of two dynamic sizes as exact integer arithmetic: lower() then runs.

The other form, the operand a min always is, is what transformers' SEW needs (``min`` of two floor divisions of its
frame count, equal for every length); a minimal module's export simplifies that itself, so it is measured on SEW in
benchmarks/bring_your_own_model.py."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import audiodeploy
from audiodeploy.lowering.passes.size_min_max_as_arithmetic import SizeMinMaxAsArithmeticPass
from tests.pipeline import assert_matches_eager, export_aten


class OverlapOfTwo(torch.nn.Module):
    """Two independent lengths: which is shorter depends on the inputs, so only arithmetic gives ``min``/``max``."""

    def forward(self, a, b):
        shortest, longest = min(a.size(-1), b.size(-1)), max(a.size(-1), b.size(-1))
        overlap = a[..., :shortest] * 2.0 + b[..., :shortest]
        return torch.nn.functional.pad(overlap, (0, longest - shortest))


def test_stock_lowering_stops_on_a_min_of_sizes():
    """Why the pass exists: ExecuTorch 1.5.1's edge verifier refuses ``torch.sym_min`` (a Python function)."""
    inputs = (torch.randn(1, 4, 10), torch.randn(1, 4, 12))
    shapes = ({2: Dim("a", min=2, max=64)}, {2: Dim("b", min=2, max=64)})
    with pytest.raises(AssertionError):
        audiodeploy.lower(
            OverlapOfTwo(), inputs, dynamic_shapes=shapes, options=audiodeploy.LoweringOptions(fold=False)
        )


def test_a_min_and_max_of_independent_lengths_are_exact_for_every_pair():
    torch.manual_seed(0)
    module = OverlapOfTwo()
    shapes = ({2: Dim("a", min=2, max=64)}, {2: Dim("b", min=2, max=64)})
    lowered = audiodeploy.lower(module, (torch.randn(1, 4, 10), torch.randn(1, 4, 12)), dynamic_shapes=shapes)
    assert "SizeMinMaxAsArithmeticPass" in lowered.report.methods["forward"].rewrites
    for a, b in ((2, 64), (64, 2), (33, 33), (7, 8), (9, 3)):
        assert_matches_eager(lowered, module, (torch.randn(1, 4, a), torch.randn(1, 4, b)))


def test_a_size_with_no_upper_bound_is_left_with_its_reason():
    program = export_aten(
        OverlapOfTwo(), (torch.randn(1, 4, 10), torch.randn(1, 4, 12)), ({2: Dim("a")}, {2: Dim("b")})
    )
    rewrite = SizeMinMaxAsArithmeticPass(program)
    rewrite(program.graph_module)
    assert [reason for _, reason in rewrite.skipped] == [
        "a size with no finite upper bound: no integer form is exact for all of them"
    ] * 2

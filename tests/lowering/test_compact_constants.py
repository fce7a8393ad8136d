"""Weights that are views into a larger storage: ExecuTorch 1.5.1's XNNPACK delegate reads them from the storage's
start; `compact_constants` gives each its own storage, so the program computes what the module does."""

from __future__ import annotations

import torch
from torch.nn import functional

import audiodeploy
from audiodeploy._api import run_on_runtime
from audiodeploy.lowering.compact_constants import compact_constants


class ShiftedSelection(torch.nn.Module):
    """A selection matrix and a weight that are row slices (contiguous views at an offset) of larger tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("next_column", torch.eye(11)[1:].contiguous())
        self.weight = torch.nn.Parameter(torch.randn(20, 11)[5:15])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return functional.linear(x, self.next_column) + functional.linear(x, self.weight)


def test_views_at_an_offset_lower_to_what_the_module_computes():
    module = ShiftedSelection().eval()
    assert module.next_column.storage_offset() == 11
    x = torch.randn(1, 37, 11)
    lowered = audiodeploy.lower(module, (x,))
    assert lowered.report.methods["forward"].delegates == 1
    actual = run_on_runtime(lowered.buffer, None, "forward", [(x,)])[0][0]
    torch.testing.assert_close(actual, module(x), rtol=0, atol=1e-5)


def test_only_views_are_copied_and_values_are_kept():
    module = ShiftedSelection().eval()
    module.register_buffer("whole", torch.ones(3))
    exported = torch.export.export(module, (torch.randn(1, 2, 11),))
    copied = compact_constants(exported)
    assert sorted(copied) == ["next_column", "weight"]
    assert all(exported.state_dict[name].storage_offset() == 0 for name in copied)
    torch.testing.assert_close(exported.state_dict["next_column"], torch.eye(11)[1:])
    assert isinstance(exported.state_dict["weight"], torch.nn.Parameter)
    assert compact_constants(exported) == []

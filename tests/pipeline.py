"""The pipeline every lowering test reads as: lower, run the .pte with ExecuTorch, compare with eager."""

from __future__ import annotations

from typing import Any, Sequence

import torch

import audiodeploy
from audiodeploy.lowering import LoweredProgram, MethodReport
from audiodeploy.runtime import Program

FP32_ATOL = 1e-5
FP32_RTOL = 1e-4


def run_lowered(lowered: LoweredProgram, inputs: Sequence[torch.Tensor], method: str = "forward") -> torch.Tensor:
    data = next(iter(lowered.external_data.values()), None)
    return Program(lowered.buffer, data=data).run(inputs, method)[0]


def assert_matches_eager(
    lowered: LoweredProgram,
    module: torch.nn.Module,
    inputs: Sequence[torch.Tensor],
    method: str = "forward",
    atol: float = FP32_ATOL,
) -> None:
    with torch.no_grad():
        expected = getattr(module, method)(*inputs)
    actual = run_lowered(lowered, inputs, method)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=FP32_RTOL)


def export_aten(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dynamic_shapes: Any = None):
    """The ATen program ``lower()`` starts from (before any rewrite)."""
    return torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes).run_decompositions({})


def lower_and_compare(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    *,
    fold: bool = True,
    rewrite: bool | None = None,
    dynamic_shapes: Any = None,
    also_run: Sequence[tuple[torch.Tensor, ...]] = (),
    atol: float = FP32_ATOL,
) -> MethodReport:
    """Lower ``module``, run the .pte on ``inputs`` (and ``also_run``), compare with eager; the method's report."""
    lowered = audiodeploy.lower(module, inputs, dynamic_shapes=dynamic_shapes, fold=fold, rewrite=rewrite)
    for case in (inputs, *also_run):
        assert_matches_eager(lowered, module, case, atol=atol)
    return lowered.report.methods["forward"]

"""The pipeline every lowering test reads as: lower, run the .pte with ExecuTorch, compare with eager."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

import audiodeploy
from audiodeploy.lowering import LoweredProgram, MethodReport
from audiodeploy.runtime import Program
from tests.shared import shared_value

if TYPE_CHECKING:
    from audiodeploy.recipes import BuiltModel

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
    options = audiodeploy.LoweringOptions(fold=fold, rewrite=rewrite)
    lowered = audiodeploy.lower(module, inputs, dynamic_shapes=dynamic_shapes, options=options)
    for case in (inputs, *also_run):
        assert_matches_eager(lowered, module, case, atol=atol)
    return lowered.report.methods["forward"]


def lowered_tiny_recipe(
    name: str, variant: str = "tiny", source: str | None = None
) -> tuple[BuiltModel, LoweredProgram]:
    """A recipe's tiny variant built with seed 0 and lowered in fp32 with audiodeploy's defaults, once per session.

    Several test files assert different things about this same program (every GEMM delegated, the recipe's own
    structure, the native runner's numbers): lowering a tiny recipe takes 10-45 s here, the program is shared.
    Speech encoders take their recipe's 1-10 s; vocoders 0.1-0.5 s of audio. Treat both as read-only.
    """
    from audiodeploy import recipes

    recipe = recipes.get(name)
    return _lowered_tiny_recipe(name, recipe.variant(variant).name, recipe.source(source))


@functools.cache
def _lowered_tiny_recipe(name: str, variant: str, source: str) -> tuple[BuiltModel, LoweredProgram]:
    from audiodeploy import recipes

    recipe = recipes.get(name)
    length_range = recipes.LengthRange(0.1, 0.5) if recipe.task == "vocoder" else None
    built = recipe.build(variant=variant, source=source, length_range=length_range)
    # Seeded synthetic weights: every worker builds the same module, and the first to ask lowers it.
    lowered = shared_value(
        f"lowered-{name}-{variant}-{source}",
        lambda: audiodeploy.lower(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes),
    )
    return built, lowered

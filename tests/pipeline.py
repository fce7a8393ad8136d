"""The pipeline every lowering test reads as: lower, run the .pte with ExecuTorch, compare with eager.

A pass test lowers end to end once per pass (:func:`lower_and_compare`, :func:`lower_stock_and_rewritten`): that
is what shows XNNPACK delegating the rewritten form and declining the original. Its other tests assert on the
rewritten ATen program, as ExecuTorch's ``Tester`` does with ``check_count`` and ``check_not``:
:func:`rewritten` applies what ``lower()`` applies before edge lowering, :func:`assert_op_counts` counts its ops
and :func:`assert_program_matches_eager` runs it in PyTorch; no lowering, no .pte.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch._export.verifier import SpecViolationError
from torch.export import ExportedProgram

import audiodeploy
from audiodeploy.lowering import LoweredProgram, MethodReport
from audiodeploy.lowering.integer_constants import export_with_exact_integer_constants
from audiodeploy.lowering.passes import rewrite_for_xnnpack
from audiodeploy.lowering.passes.fold_computed_gemm_weights import (
    AppliedFold,
    FoldRejection,
    apply_folds,
    plan_folds,
)
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
    return export_with_exact_integer_constants(module, inputs, dynamic_shapes).run_decompositions({})


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


def lower_what_stock_cannot_build(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    missing_op: str,
    *,
    dynamic_shapes: Any = None,
    also_run: Sequence[tuple[torch.Tensor, ...]] = (),
) -> MethodReport:
    """A rewrite's end-to-end test where stock lowering cannot build the program at all (``missing_op``, an op
    ``torch.export`` keeps, is not in the core ATen opset): the rewritten one lowers, runs and matches eager on
    ``inputs`` and ``also_run``. Its report."""
    with pytest.raises(SpecViolationError, match=missing_op):
        lower_and_compare(module, inputs, rewrite=False, dynamic_shapes=dynamic_shapes)
    return lower_and_compare(module, inputs, dynamic_shapes=dynamic_shapes, also_run=also_run)


def lower_stock_and_rewritten(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    rewrite: str,
    *,
    dynamic_shapes: Any = None,
    also_run: Sequence[tuple[torch.Tensor, ...]] = (),
    atol: float = FP32_ATOL,
) -> tuple[MethodReport, MethodReport]:
    """A rewrite's end-to-end test: ``module`` lowered stock (``rewrite=False``) and with the rewrites, both run and
    compared with eager (the rewritten one on ``also_run`` too, within ``atol``); the rewritten one is one delegate
    with nothing outside, and ``rewrite`` (a pass's class name) changed it. The stock report, to say what XNNPACK
    declines, and the rewritten one."""
    stock = lower_and_compare(module, inputs, rewrite=False, dynamic_shapes=dynamic_shapes)
    report = lower_and_compare(module, inputs, dynamic_shapes=dynamic_shapes, also_run=also_run, atol=atol)
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), report
    assert rewrite in report.rewrites, report.rewrites
    return stock, report


@dataclass(frozen=True)
class RewrittenProgram:
    """The ATen program ``lower()`` hands to edge lowering, and what was done to it on the way."""

    program: ExportedProgram
    changed: tuple[str, ...]
    """The rewrites that changed it, in order: a lowering's ``report.rewrites``."""
    folds: tuple[AppliedFold, ...]
    """The folds applied (all planned ones): a lowering's ``report.folds`` where XNNPACK takes each GEMM."""
    not_folded: tuple[FoldRejection, ...]
    """The GEMMs the fold's plan rejected, with the reason: a lowering's ``report.not_folded``."""


def rewritten(
    module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], dynamic_shapes: Any = None, *, fold: bool = True
) -> RewrittenProgram:
    """``module`` exported and rewritten as ``lower()`` does it before edge lowering: ``rewrite_for_xnnpack``, then
    (``fold``, the default as in ``lower()``) every fold ``plan_folds`` finds, applied."""
    program = export_aten(module, inputs, dynamic_shapes)
    changed = rewrite_for_xnnpack(program).changed
    if not fold:
        return RewrittenProgram(program, changed, (), ())
    plan = plan_folds(program)
    folded, applied = apply_folds(program, plan.candidates)
    return RewrittenProgram(folded, changed, tuple(applied), plan.rejections)


def op_counts(program: ExportedProgram) -> Counter[str]:
    """How many times each op the outputs of ``program`` depend on is called, by name: ``"aten.conv2d.default"``.

    Ops the outputs do not depend on are left out: edge lowering drops them. The rewrites' dead-code elimination
    keeps those an ``_assert_tensor_metadata`` reads (``.to(memory_format=...)`` writes one; it has side effects),
    so an op a rewrite replaced can still be in the graph, read by that alone.
    """
    (output,) = program.graph.find_nodes(op="output")
    live, stack = set(), [output]
    while stack:
        node = stack.pop()
        for arg in node.all_input_nodes:
            if arg not in live:
                live.add(arg)
                stack.append(arg)
    return Counter(
        str(node.target) if isinstance(node.target, torch._ops.OpOverload) else getattr(node.target, "__name__", "?")
        for node in program.graph.nodes
        if node.op == "call_function" and node in live
    )


def assert_op_counts(program: ExportedProgram, expected: Mapping[str, int]) -> None:
    """Each op of ``expected`` is called that many times in ``program`` (0: not at all); ``check_count`` and
    ``check_not`` of ExecuTorch's ``Tester``. The other ops are not looked at."""
    counts = op_counts(program)
    assert {op: counts[op] for op in expected} == dict(expected), dict(counts)


def assert_program_matches_eager(
    program: ExportedProgram,
    module: torch.nn.Module,
    cases: Sequence[tuple[torch.Tensor, ...]],
    atol: float = FP32_ATOL,
    rtol: float = FP32_RTOL,
) -> None:
    """``program`` (an ATen program, run by PyTorch) gives what eager ``module`` gives on each of ``cases``.

    Run without its input guards, as ``quantize._unguarded_module`` does: the fold's fake-tensor runs narrow the
    shape environment (a folded transposed convolution exported for 8-400 frames guards ``1024 * frames <= 20480``)
    and the guards would refuse lengths of the exported range; the cases are taken from that range.
    """
    run = program.module(check_guards=False)
    for case in cases:
        with torch.no_grad():
            expected, actual = module(*case), run(*case)
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


def assert_rewrites(
    module: torch.nn.Module,
    cases: Sequence[tuple[torch.Tensor, ...]],
    rewrite: str,
    counts: Mapping[str, int],
    *,
    dynamic_shapes: Any = None,
    atol: float = FP32_ATOL,
) -> RewrittenProgram:
    """A rewrite's test on the graph: ``module`` exported on the first of ``cases`` and rewritten as ``lower()``
    does (:func:`rewritten`); ``rewrite`` (a pass's class name) changed it, the ops of ``counts`` are called that
    many times (:func:`assert_op_counts`) and it gives eager's numbers on every case. The rewritten program."""
    result = rewritten(module, cases[0], dynamic_shapes)
    assert rewrite in result.changed, result.changed
    assert_op_counts(result.program, counts)
    assert_program_matches_eager(result.program, module, cases, atol=atol)
    return result


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


def tiny_length_range(name: str):
    """The lengths a recipe's tiny variant is lowered for in the tests: a vocoder's 0.1-0.5 s of audio, else the
    recipe's own range (None)."""
    from audiodeploy import recipes

    return recipes.LengthRange(0.1, 0.5) if recipes.get(name).task == "vocoder" else None


@functools.cache
def _lowered_tiny_recipe(name: str, variant: str, source: str) -> tuple[BuiltModel, LoweredProgram]:
    from audiodeploy import recipes

    built = recipes.get(name).build(variant=variant, source=source, length_range=tiny_length_range(name))
    # Seeded synthetic weights: every worker builds the same module, and the first to ask lowers it.
    lowered = shared_value(
        f"lowered-{name}-{variant}-{source}",
        lambda: audiodeploy.lower(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes),
    )
    return built, lowered


def int8_dynamic_tiny_wav2vec2() -> tuple[BuiltModel, LoweredProgram, list[tuple[torch.Tensor, ...]]]:
    """wav2vec2's tiny variant lowered int8-dynamic as `audiodeploy export --quantize int8-dynamic` does (the
    recipe's keep_fp32), with its fidelity measured on two held-out inputs at both ends of the range; once per
    session, shared by the quantizer's tests and the native runner's (an int8 lowering is 30-40 s of CPU here)."""
    from audiodeploy import recipes
    from audiodeploy.program import fidelity

    built = recipes.get("wav2vec2").build(variant="tiny")
    spec = built.input
    held_out = [built.random_inputs(n, seed=7 + n) for n in (spec.min_length, 3 * spec.example_length)]

    def lower() -> LoweredProgram:
        quantization = audiodeploy.Quantization(
            audiodeploy.QuantizationScheme.INT8_DYNAMIC,
            keep_fp32=built.keep_fp32,
            fidelity_inputs=held_out,
            fidelity={"snr_db": fidelity.output_snr_db, "argmax": fidelity.frame_argmax_agreement},
        )
        options = audiodeploy.LoweringOptions(quantization=quantization)
        return audiodeploy.lower(
            built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes, options=options
        )

    return built, shared_value("int8-dynamic-wav2vec2-tiny", lower), held_out

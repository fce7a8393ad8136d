"""``audiodeploy.lower``: PyTorch module(s) -> ExecuTorch program with XNNPACK delegates.

How computed GEMM weights reach the delegate, on ExecuTorch 1.5.1's public API
------------------------------------------------------------------------------
1.5.1 leaves no hook inside lowering where a fold could go: the partitioner runs
on a fake-tensor copy and lowering asserts that ``partition()`` left the graph
unchanged; ``XnnpackBackend.preprocess`` runs a fixed pass list; a backend is
found, and dispatched at run time, by its class name, so a renamed or wrapped
backend would not run on a stock runtime. And the fold must come before edge
decomposition, since whether ``linear`` is kept whole for XNNPACK depends on its
weight being a parameter.

So the fold is applied to the exported ATen program, and the real partitioner
then decides:

1. ``torch.export`` each method, and (``rewrite``) apply the ATen-level rewrites
   of :data:`~audiodeploy.lowering.passes.XNNPACK_REWRITES`, which write the
   ops XNNPACK 1.5.1 declines (layer and group norm, means, unmasked SDPA and
   4-D attention matmuls, reshapes with symbolic sizes, a slice of a dynamic
   length) in ops it delegates; they run before edge decomposition for the same reason as
   the fold, and the export's symbol ranges are read before them;
2. plan the folds (:mod:`~audiodeploy.lowering.passes.fold_computed_gemm_weights`):
   every GEMM whose weight or bias is a pure computation on constant data, unless
   folding could not replace that computation outright (each rejection keeps its
   reason);
3. apply every planned fold and lower with the stock XNNPACK partitioner (one
   config swapped, see :mod:`~audiodeploy.lowering.partitioner`);
4. a folded constant that did not end up inside a delegate means XNNPACK declined
   its GEMM for another reason; such folds are dropped and step 3 runs again from
   the unfolded program, so that outside the delegates the program is exactly
   what stock lowering produces (rewrites aside). In the usual case every fold
   lands and lowering runs once.

With ``quantize`` (see :mod:`~audiodeploy.lowering.quantize`), step 3 applies every planned
fold, quantizes the folded program (PT2E with ``XNNPACKQuantizer``, exported again with the
same dynamic shapes) and lowers it once, with a partitioner that merges its proposed partitions
where no cycle forbids it; step 4 does not run (a fold outside the delegates would show in the
report as an op outside delegates). The program is then run on inputs not used for calibration
and compared with eager; the measures go to ``report.quantization``.

Identical folds in several methods are stored once: XNNPACK's named data store
keys constants by a hash of their bytes, and the folds are computed the same way
in every method.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from executorch.exir import (
    EdgeProgramManager,
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from torch.export import ExportedProgram

from audiodeploy._files import atomic_write_bytes
from audiodeploy.lowering.partitioner import ExplainingXnnpackPartitioner
from audiodeploy.lowering.passes import Rewritten, rewrite_for_xnnpack
from audiodeploy.lowering.passes.fold_computed_gemm_weights import (
    AppliedFold,
    FoldCandidate,
    FoldPlan,
    apply_folds,
    plan_folds,
)
from audiodeploy.lowering.passes.plan_for_export_range import PlanForExportRangePass, export_symbol_ranges
from audiodeploy.lowering.quantize import (
    Progress,
    QuantizedProgram,
    check_keep_fp32,
    check_options,
    gemm_sensitivity,
    generated_signals,
    quantize_program,
)
from audiodeploy.lowering.report import (
    Fold,
    Fp32Gemm,
    GemmSensitivity,
    LoweringReport,
    MethodReport,
    NotFolded,
    QuantizationReport,
    QuantizedMethod,
    SkippedRewrite,
    describe_lowered_method,
)
from audiodeploy.program import fidelity as fidelity_measures

logger = logging.getLogger(__name__)

_DELEGATE_CALL = torch.ops.higher_order.executorch_call_delegate


@dataclass(frozen=True)
class Method:
    """One method of a program: a module, its example inputs and optional dynamic shapes."""

    module: torch.nn.Module
    example_inputs: tuple[Any, ...]
    dynamic_shapes: Any = None
    """As ``torch.export.export`` takes them, e.g. ``({2: Dim("length", max=4000)},)``."""


class LoweredProgram:
    """An ExecuTorch program (.pte bytes) and the report of how it was lowered.

    ``external_data`` maps a tag to the bytes of its .ptd file: the delegate
    constants whose parameters the user tagged for external data (empty unless
    the module was tagged, e.g. with ExecuTorch's
    ``delegate_external_constants_pass_unlifted``).
    """

    def __init__(self, buffer: bytes, report: LoweringReport, external_data: Mapping[str, bytes] | None = None) -> None:
        self.buffer = buffer
        self.report = report
        self.external_data = dict(external_data or {})

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the .pte atomically (and each ``<tag>.ptd`` beside it): complete or not there."""
        path = Path(path)
        for tag, data in self.external_data.items():
            atomic_write_bytes(path.parent / f"{tag}.ptd", data)
        return atomic_write_bytes(path, self.buffer)


def lower(
    program: torch.nn.Module | Mapping[str, Method],
    example_inputs: tuple[Any, ...] | None = None,
    *,
    dynamic_shapes: Any = None,
    fold: bool = True,
    rewrite: bool | None = None,
    quantize: str | None = None,
    calibration: Sequence[tuple[Any, ...]] | Mapping[str, Sequence[tuple[Any, ...]]] | None = None,
    keep_fp32: Sequence[str] = (),
    fidelity_inputs: Sequence[tuple[Any, ...]] | Mapping[str, Sequence[tuple[Any, ...]]] | None = None,
    fidelity: Mapping[str, fidelity_measures.Measure] | None = None,
    sensitivity: bool = False,
    progress: Progress | None = None,
) -> LoweredProgram:
    """Export, rewrite for XNNPACK, fold computed GEMM weights, lower to XNNPACK and serialize.

    ``program`` is a module (one method, ``forward``, with ``example_inputs`` and
    optional ``dynamic_shapes``) or a mapping of method name -> :class:`Method`
    for a multi-method program.

    ``rewrite`` applies the graph rewrites of
    :data:`~audiodeploy.lowering.passes.XNNPACK_REWRITES` (norms, means, attention
    and reshapes in forms XNNPACK delegates); ``None`` means "as ``fold``", so
    ``fold=False`` alone still gives stock ExecuTorch lowering, for comparison.

    ``quantize`` is ``None`` (fp32), ``"int8-dynamic"`` or ``"int8-static"`` (ExecuTorch's
    ``PT2E_INT8_DYNAMIC_PER_CHANNEL`` and ``PT2E_INT8_STATIC_PER_CHANNEL``; named as the command
    line spells them), applied after the rewrites and the fold. ``calibration`` (static only) is a
    sequence of input tuples run through the prepared model (a mapping method name -> sequence for
    several methods); without it, generated signals and a warning. ``keep_fp32`` holds module-name
    patterns (``fnmatch`` on ``nn_module_stack`` paths) whose GEMMs stay fp32. The quantized program
    is run on ``fidelity_inputs`` (default: two generated signals unlike the calibration ones) and
    compared with eager by the ``fidelity`` measures (name -> ``(reference, actual) -> float``;
    default: ``snr_db`` and ``max_abs_diff`` of :mod:`~audiodeploy.program.fidelity`).
    ``sensitivity`` also quantizes each GEMM alone (every one, kept ones included) and records the
    output SNR on the fidelity inputs, most sensitive first, so that a user can choose ``keep_fp32``;
    it simulates int8 in PyTorch and costs seconds per GEMM. A ``keep_fp32`` pattern that matches no GEMM
    of any method raises :class:`~audiodeploy.lowering.quantize.KeepFp32PatternError` before either.
    ``progress`` is told of each calibration input and each GEMM whose sensitivity is measured (one line each,
    e.g. ``"measuring sensitivity: GEMM 3 of 40 (linear @ model.lm_head)"``), for a caller to show.
    """
    if quantize is not None:
        check_options(quantize, calibration)
    elif calibration is not None or keep_fp32 or sensitivity:
        raise TypeError("calibration, keep_fp32 and sensitivity apply to a quantized program: give quantize= too")
    methods = _as_methods(program, example_inputs, dynamic_shapes)
    # run_decompositions({}) only functionalizes (in-place buffer updates become
    # BUFFER_MUTATION outputs); it is the same first step to_edge takes.
    exported = {
        name: torch.export.export(
            m.module, tuple(m.example_inputs), dynamic_shapes=m.dynamic_shapes
        ).run_decompositions({})
        for name, m in methods.items()
    }
    export_ranges = {name: export_symbol_ranges(ep) for name, ep in exported.items()}
    if rewrite is None:
        rewrite = fold
    rewrites = {name: rewrite_for_xnnpack(ep) if rewrite else None for name, ep in exported.items()}
    plans = {name: plan_folds(ep) if fold else None for name, ep in exported.items()}
    to_fold: dict[str, list[FoldCandidate]] = {name: list(p.candidates) if p else [] for name, p in plans.items()}
    declined_folds: dict[str, list[NotFolded]] = {name: [] for name in exported}

    quantized: dict[str, QuantizedProgram] = {}
    while quantize is None:
        folded = {name: apply_folds(ep, to_fold[name]) for name, ep in exported.items()}
        partitioners = {name: ExplainingXnnpackPartitioner() for name in exported}
        edge = to_edge_transform_and_lower(
            {name: ep for name, (ep, _) in folded.items()},
            partitioner={name: [p] for name, p in partitioners.items()},
        )
        outside = {
            name: _folds_outside_delegates(edge.exported_program(name), applied, partitioners[name].decline_reasons)
            for name, (_, applied) in folded.items()
        }
        if not any(outside.values()):
            break
        for name, rejected in outside.items():
            for candidate, reason in rejected:
                to_fold[name].remove(candidate)
                declined_folds[name].append(NotFolded(candidate.gemm_label, reason))
    sensitivities: dict[str, tuple[GemmSensitivity, ...]] = {}
    if quantize is not None:
        folded = {name: apply_folds(ep, to_fold[name]) for name, ep in exported.items()}
        check_keep_fp32({name: ep for name, (ep, _) in folded.items()}, keep_fp32)
        if sensitivity:
            sensitivities = {
                name: tuple(
                    gemm_sensitivity(
                        ep,
                        quantize,
                        _fidelity_inputs(fidelity_inputs, name, program, methods[name]),
                        calibration=_for_method(calibration, name, program),
                        progress=progress,
                    )
                )  # fmt: skip
                for name, (ep, _) in folded.items()
            }
        quantized = {
            name: quantize_program(
                ep,
                quantize,
                dynamic_shapes=methods[name].dynamic_shapes,
                calibration=_for_method(calibration, name, program),
                keep_fp32=keep_fp32,
                progress=progress,
            )
            for name, (ep, _) in folded.items()
        }
        # The symbols of the second export are new: plan memory from its ranges.
        export_ranges = {name: export_symbol_ranges(q.program) for name, q in quantized.items()}
        partitioners = {name: ExplainingXnnpackPartitioner(merge_partitions=True) for name in exported}
        edge = to_edge_transform_and_lower(
            {name: q.program for name, q in quantized.items()},
            partitioner={name: [p] for name, p in partitioners.items()},
        )

    # Described before to_executorch(), which rewrites the edge programs in place.
    methods_report = {
        name: _method_report(
            name, edge, folded[name][1], plans[name], declined_folds[name], partitioners[name], rewrites[name]
        )
        for name in exported
    }
    # Mutable buffers keep their initial values, as in eager PyTorch (1.5.1 otherwise
    # serializes only their shape and the program starts from zeros).
    executorch_program = edge.to_executorch(
        ExecutorchBackendConfig(
            passes=[InitializedMutableBufferPass(patterns=[""])],
            sym_shape_eval_pass={name: PlanForExportRangePass(export_ranges[name]) for name in exported},
        )
    )
    buffer = executorch_program.buffer
    external_data = _external_data(executorch_program)
    quantization = None
    if quantize is not None:
        quantization = _quantization_report(
            quantize, quantized, methods, buffer, external_data, keep_fp32, fidelity_inputs, fidelity, program,
            sensitivities,
        )  # fmt: skip
    report = LoweringReport(
        fold=fold, pte_bytes=len(buffer), methods=methods_report, rewrite=rewrite, quantization=quantization
    )
    for method in report.methods.values():
        if method.gemms_not_delegated:
            logger.warning(
                "%s: %d GEMM(s) stay outside XNNPACK delegates and run on portable kernels: %s",
                method.name,
                len(method.gemms_not_delegated),
                "; ".join(f"{g.gemm}: {g.reason}" for g in method.gemms_not_delegated),
            )
    return LoweredProgram(buffer, report, external_data)


FIDELITY_INPUT_COUNT = 2


def _for_method(given: Any, name: str, program: Any) -> Any:
    """``given`` for method ``name``: itself for a single module, its entry for a mapping of methods."""
    if given is None or isinstance(program, torch.nn.Module):
        return given
    if not isinstance(given, Mapping):
        raise TypeError("with several methods, give calibration and fidelity inputs as a mapping method name -> inputs")
    return given.get(name)


def _fidelity_inputs(given: Any, name: str, program: Any, method: Method) -> Sequence[tuple[Any, ...]]:
    """The inputs method ``name`` is measured on: the given ones, else generated signals unlike calibration's."""
    inputs = _for_method(given, name, program)
    if inputs is None:  # seed 2: calibration's generated signals use seed 1
        inputs = generated_signals(method.example_inputs, FIDELITY_INPUT_COUNT, seed=2)
    return [tuple(case) for case in inputs]


def _quantization_report(
    scheme: str,
    quantized: Mapping[str, QuantizedProgram],
    methods: Mapping[str, Method],
    buffer: bytes,
    external_data: Mapping[str, bytes],
    keep_fp32: Sequence[str],
    fidelity_inputs: Any,
    measures: Mapping[str, fidelity_measures.Measure] | None,
    program: Any,
    sensitivities: Mapping[str, tuple[GemmSensitivity, ...]],
) -> QuantizationReport:
    """Run the program on inputs not used for calibration and compare with eager, per method."""
    # The one loader (quiet: the runtime's log goes to DEBUG); these bytes were made here, so no probe.
    from audiodeploy.runtime.program import Program

    data = next(iter(external_data.values()), None)
    loaded = Program(buffer, origin="the quantized program", data=data, trusted=True)
    described = "given inputs" if fidelity_inputs is not None else f"{FIDELITY_INPUT_COUNT} generated signals"
    report_methods = {}
    for name, method in methods.items():
        inputs = _fidelity_inputs(fidelity_inputs, name, program, method)
        references, actuals = [], []
        with torch.no_grad():
            for case in inputs:
                case = tuple(case)
                expected = method.module(*case)
                references.append(expected[0] if isinstance(expected, (tuple, list)) else expected)
                actuals.append(loaded.run(case, name)[0])
        q = quantized[name]
        report_methods[name] = QuantizedMethod(
            name=name,
            quantized_gemms=q.quantized_gemms,
            fp32_gemms=tuple(Fp32Gemm(gemm, reason) for gemm, reason in q.fp32_gemms),
            fidelity=fidelity_measures.measure(references, actuals, measures),
            sensitivity=sensitivities.get(name, ()),
        )
    calibration = "; ".join(dict.fromkeys(q.calibration for q in quantized.values()))
    return QuantizationReport(
        scheme=scheme,
        calibration=calibration,
        keep_fp32=tuple(keep_fp32),
        fidelity_inputs=described,
        methods=report_methods,
    )


def _external_data(executorch_program: ExecutorchProgramManager) -> dict[str, bytes]:
    # The public API writes .ptd files to a directory, it does not hand out bytes.
    with tempfile.TemporaryDirectory() as directory:
        executorch_program.write_tensor_data_to_file(directory)
        return {path.stem: path.read_bytes() for path in Path(directory).glob("*.ptd")}


def _as_methods(
    program: torch.nn.Module | Mapping[str, Method],
    example_inputs: tuple[Any, ...] | None,
    dynamic_shapes: Any,
) -> dict[str, Method]:
    if isinstance(program, torch.nn.Module):
        if example_inputs is None:
            raise TypeError("lower(module, example_inputs): example_inputs is required for a module")
        return {"forward": Method(program, tuple(example_inputs), dynamic_shapes)}
    if example_inputs is not None or dynamic_shapes is not None:
        raise TypeError("with several methods, give example inputs and dynamic shapes in each Method")
    methods = dict(program)
    if not methods or not all(isinstance(m, Method) for m in methods.values()):
        raise TypeError("lower() takes a module, or a non-empty mapping of method name -> audiodeploy.Method")
    return methods


def _folds_outside_delegates(
    lowered: ExportedProgram, applied: list[AppliedFold], decline_reasons: dict[str, list[str]]
) -> list[tuple[FoldCandidate, str]]:
    """Folds whose constant is still read by an op outside the delegates, with XNNPACK's reason."""
    placeholders = {n.name: n for n in lowered.graph.nodes if n.op == "placeholder"}
    outside = []
    for fold in applied:
        users = [
            user
            for constant, _ in fold.constants
            if constant in placeholders
            for user in placeholders[constant].users
            if user.target is not _DELEGATE_CALL
        ]
        if users:
            reasons = [r for user in users for r in decline_reasons.get(user.name, [])]
            reason = "XNNPACK declines this GEMM even with a static weight: " + (
                "; ".join(dict.fromkeys(reasons)) or "no reason given"
            )
            outside.append((fold.candidate, reason))
    return outside


def _method_report(
    name: str,
    edge: EdgeProgramManager,
    applied: list[AppliedFold],
    plan: FoldPlan | None,
    declined_folds: list[NotFolded],
    partitioner: ExplainingXnnpackPartitioner,
    rewritten: Rewritten | None,
) -> MethodReport:
    folds = tuple(
        Fold(
            gemm=a.candidate.gemm_label,
            sources=a.candidate.source_targets,
            constants=tuple(target for _, target in a.constants),
            bytes_freed=a.candidate.bytes_freed,
            bytes_written=a.candidate.bytes_written,
        )
        for a in applied
    )
    not_folded = tuple(NotFolded(r.gemm_label, r.reason) for r in (plan.rejections if plan else ())) + tuple(
        declined_folds
    )
    skipped = tuple(
        SkippedRewrite(rewrite, reason, nodes)
        for (rewrite, reason), nodes in (rewritten.skipped.items() if rewritten else ())
    )
    return describe_lowered_method(
        name,
        edge.exported_program(name),
        partitioner.decline_reasons,
        folds,
        not_folded,
        rewritten.changed if rewritten else (),
        skipped,
    )

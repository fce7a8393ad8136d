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

1. ``torch.export`` each method (one whose sizes depend on its input's values is refused here,
   :class:`DataDependentShapeError`, and one that fixes a size left dynamic, :class:`FixedSizeError`); with
   ``LoweringOptions.rewrite``, its 0-d integer tensors are taken as exact numbers, so that padding computed from
   them follows the length (:mod:`~audiodeploy.lowering.integer_constants`), and the ATen-level rewrites
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

With a :class:`~audiodeploy.lowering.quantize.Quantization` in the options, step 3 applies
every planned fold, quantizes the folded program (PT2E with ``XNNPACKQuantizer``, exported
again with the same dynamic shapes) and lowers it once, with a partitioner that merges its
proposed partitions where no cycle forbids it; step 4 does not run (a fold outside the
delegates would show in the report as an op outside delegates). The program is then run on
inputs not used for calibration and compared with eager; the measures go to
``report.quantization``. The core runs no program itself: the caller's :class:`ProgramRunner`
does (``audiodeploy.lower`` gives one on :mod:`audiodeploy.runtime`, which the core does not
import).

Identical folds in several methods are stored once: XNNPACK's named data store
keys constants by a hash of their bytes, and the folds are computed the same way
in every method.
"""

from __future__ import annotations

import logging
import math
import os
import re
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from executorch.exir import (
    EdgeProgramManager,
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, free_unbacked_symbols
from torch.utils import _pytree as pytree

from audiodeploy._files import atomic_write_bytes
from audiodeploy.errors import AudiodeployError
from audiodeploy.lowering.compact_constants import compact_constants
from audiodeploy.lowering.half_precision import as_float16, default_dtype
from audiodeploy.lowering.integer_constants import export_with_exact_integer_constants
from audiodeploy.lowering.partitioner import ExplainingXnnpackPartitioner
from audiodeploy.lowering.passes import Rewritten, rewrite_for_xnnpack
from audiodeploy.lowering.passes._graph import MOST_LENGTHS_TRIED, is_finite_bound
from audiodeploy.lowering.passes.fold_computed_gemm_weights import (
    AppliedFold,
    FoldCandidate,
    FoldPlan,
    apply_folds,
    plan_folds,
)
from audiodeploy.lowering.passes.plan_for_export_range import PlanForExportRangePass, export_symbol_ranges
from audiodeploy.lowering.quantize import (
    Inputs,
    InputsPerMethod,
    Progress,
    Quantization,
    QuantizedProgram,
    check_keep_fp32,
    gemm_sensitivity,
    generated_signals,
    quantize_program,
)
from audiodeploy.lowering.report import describe_lowered_method
from audiodeploy.program import fidelity as fidelity_measures
from audiodeploy.program.report import (
    Fold,
    Fp32Gemm,
    GemmSensitivity,
    LoweringReport,
    MethodReport,
    NotFolded,
    PrecisionReport,
    QuantizationReport,
    QuantizedMethod,
    SkippedRewrite,
)

logger = logging.getLogger(__name__)

_DELEGATE_CALL = torch.ops.higher_order.executorch_call_delegate

FIDELITY_INPUT_COUNT = 2

SymbolRanges = dict[Any, Any]
"""What :func:`~audiodeploy.lowering.passes.plan_for_export_range.export_symbol_ranges` returns: symbol -> range."""


class DataDependentShapeError(AudiodeployError, ValueError):
    """A method with a tensor whose size depends on the input's values, not only on the input's shape."""


class FixedSizeError(AudiodeployError, ValueError):
    """A method whose code fixes a size that its dynamic shapes leave free (a loop over the frames, a branch)."""


class ExampleShapeError(AudiodeployError, ValueError):
    """A method whose example input's size is not of the form its dynamic shapes give (``320 * frames``)."""


class RecurrentLengthError(FixedSizeError):
    """A method that runs a recurrent layer (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) over a dynamic length: ``torch.export``
    unrolls it at the example's length, so it lowers at a fixed window length only."""


@dataclass(frozen=True)
class Method:
    """One method of a program: a module, its example inputs and optional dynamic shapes."""

    module: torch.nn.Module
    example_inputs: tuple[Any, ...]
    dynamic_shapes: Any = None
    """As ``torch.export.export`` takes them, e.g. ``({2: Dim("length", max=4000)},)``."""


@dataclass(frozen=True)
class LoweringOptions:
    """What :func:`lower` does beyond stock ExecuTorch lowering; the defaults are audiodeploy's fp32 lowering.

    ``LoweringOptions(fold=False)`` is stock lowering, for comparison;
    ``LoweringOptions(quantization=Quantization(QuantizationScheme.INT8_DYNAMIC))`` is int8 after the rewrites
    and the fold.
    """

    fold: bool = True
    """Fold computed GEMM weights (``weight_norm`` and the like) into constants inside the delegates."""
    rewrite: bool | None = None
    """Apply the rewrites of :data:`~audiodeploy.lowering.passes.XNNPACK_REWRITES` (norms, means, attention and
    reshapes in forms XNNPACK delegates); None (the default) is set to ``fold``, so that ``fold=False`` alone
    still gives stock lowering."""
    quantization: Quantization | None = None
    """int8 (:class:`~audiodeploy.lowering.quantize.Quantization`, its options checked there); None: fp32."""
    dtype: torch.dtype = torch.float32
    """``torch.float16``: an fp16 program, folded in fp32 and stored and computed in fp16, with float32 inputs and
    outputs (:mod:`~audiodeploy.lowering.half_precision`); its fidelity against eager is measured and reported."""

    def __post_init__(self) -> None:
        if self.rewrite is None:
            object.__setattr__(self, "rewrite", self.fold)  # frozen: as dataclasses' own __init__ sets fields
        if self.dtype not in (torch.float32, torch.float16):
            raise ValueError(f"dtype {self.dtype}: lower() writes torch.float32 or torch.float16 programs")
        if self.dtype == torch.float16 and self.quantization is not None:
            raise ValueError("dtype=torch.float16 and quantization: choose one (int8 keeps its fp32 parts in fp32)")
        if self.quantization is not None and not isinstance(self.quantization, Quantization):
            raise TypeError(
                f"quantization takes a Quantization, e.g. Quantization({str(self.quantization)!r}), "
                f"not {type(self.quantization).__name__}"
            )


class ProgramRunner(Protocol):
    """Runs one method of a lowered program on each of some input tuples, and returns the outputs of each.

    Called with the .pte bytes, the bytes of its external data (.ptd) or None, the method's name and the input
    tuples. :func:`lower` runs a quantized program through it to measure its fidelity; ``audiodeploy.lower``
    gives one on audiodeploy's runtime, so that the core imports no runtime.
    """

    def __call__(
        self, program: bytes, data: bytes | None, method: str, inputs: Inputs, /
    ) -> Sequence[Sequence[torch.Tensor]]: ...


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
    options: LoweringOptions = LoweringOptions(),
    run_program: ProgramRunner | None = None,
    progress: Progress | None = None,
) -> LoweredProgram:
    """Export, rewrite for XNNPACK, fold computed GEMM weights, (quantize,) lower to XNNPACK and serialize.

    ``program`` is a module (one method, ``forward``, with ``example_inputs`` and
    optional ``dynamic_shapes``) or a mapping of method name -> :class:`Method`
    for a multi-method program. ``options`` say what is done beyond stock lowering
    (:class:`LoweringOptions`, checked when made). A quantized program is run by
    ``run_program`` on the fidelity inputs and compared with eager: quantizing
    without one is a :class:`TypeError`. A ``keep_fp32`` pattern that matches no
    GEMM of any method raises :class:`~audiodeploy.lowering.quantize.KeepFp32PatternError`
    before anything is quantized or measured. A method whose output length depends on its
    input's values (``nonzero``, ``repeat_interleave`` by a tensor) raises
    :class:`DataDependentShapeError` before any rewrite. ``progress`` is told of each calibration
    input and each GEMM whose sensitivity is measured (one line each, e.g.
    ``"measuring sensitivity: GEMM 3 of 40 (linear @ model.lm_head)"``), for a caller to show.
    """
    quantization = options.quantization
    half = options.dtype == torch.float16
    if (quantization is not None or half) and run_program is None:
        raise TypeError(
            "lower() runs a quantized or fp16 program to measure its fidelity: give run_program= (audiodeploy.lower "
            "gives one on audiodeploy.runtime)"
        )
    methods = _as_methods(program, example_inputs, dynamic_shapes)
    failing_guards = {
        name: _export_with_failing_guards(name, method, exact_integer_constants=bool(options.rewrite))
        for name, method in methods.items()
    }
    exported = {name: _export_decomposed(guarded) for name, (guarded, _) in failing_guards.items()}
    for name, ep in exported.items():
        _check_sizes_follow_from_shapes(name, ep)
    export_ranges = {name: export_symbol_ranges(ep) for name, ep in exported.items()}
    rewrites = {name: rewrite_for_xnnpack(ep) if options.rewrite else None for name, ep in exported.items()}
    plans = {name: plan_folds(ep) if options.fold else None for name, ep in exported.items()}
    if quantization is None:
        lowered, int8 = _lower_fp32(exported, plans, export_ranges, methods if half else None), None
    else:
        single = isinstance(program, torch.nn.Module)
        lowered, int8 = _lower_int8(methods, exported, plans, quantization, single, progress)
    # Described before to_executorch(), which rewrites the edge programs in place.
    methods_report = {name: _method_report(name, lowered, plans[name], rewrites[name]) for name in exported}
    executorch_program = _to_executorch(lowered)
    buffer, external_data = executorch_program.buffer, _external_data(executorch_program)
    _check_failing_guards(
        methods,
        {name: failing for name, (_, failing) in failing_guards.items()},
        buffer,
        next(iter(external_data.values()), None),
        None if quantization is not None or half else run_program,
    )
    quantization_report = precision_report = None
    if int8 is not None:
        assert run_program is not None  # refused above
        quantization_report = _quantization_report(int8, methods, buffer, external_data, run_program)
    if half:
        assert run_program is not None  # refused above
        precision_report = _precision_report(methods, buffer, external_data, run_program)
    report = LoweringReport(
        fold=options.fold,
        pte_bytes=len(buffer),
        methods=methods_report,
        rewrite=bool(options.rewrite),  # None was resolved to fold by LoweringOptions
        quantization=quantization_report,
        precision=precision_report,
    )
    _warn_gemms_not_delegated(report)
    return LoweredProgram(buffer, report, external_data)


def _export(name: str, method: Method, *, exact_integer_constants: bool) -> ExportedProgram:
    """``torch.export`` one method; with ``exact_integer_constants``, sizes computed from 0-d integer tensors follow
    the length (:mod:`~audiodeploy.lowering.integer_constants`), as stock export's do not.

    Export stops at the first branch on a size only the input's values give (``GuardOnDataDependentSymNode``): that is
    :class:`DataDependentShapeError` here too, at the model's line. A dynamic size the model's code fixes (a loop over
    the frames, a branch the example takes) is :class:`FixedSizeError`.
    """
    export = export_with_exact_integer_constants if exact_integer_constants else torch.export.export
    try:
        exported = export(method.module, tuple(method.example_inputs), dynamic_shapes=method.dynamic_shapes)
    except GuardOnDataDependentSymNode as error:
        raise DataDependentShapeError(
            f"{name}: the model branches at {_raising_line(error)} on a size that depends on the input's values, not "
            "only on its shape, and export cannot follow it; compute that size from the input's shape, or split the "
            "model there (audiodeploy.Method)"
        ) from error
    except torch._dynamo.exc.UserError as error:  # the public class of torch.export's constraint errors
        if error.error_type is not torch._dynamo.exc.UserErrorType.CONSTRAINT_VIOLATION:
            raise
        lines = [line.strip(" -") for line in str(error).splitlines() if line.strip()]
        if lines and "to be of the form" in lines[0]:
            raise ExampleShapeError(
                f"{name}: {lines[0].replace('input Tensor', 'the example input')}; give an example input of that "
                "form, or dynamic_shapes that its size fits"
            ) from error
        _check_no_recurrence_over_dynamic_length(name, method, error)
        # torch's first reason (after its "Constraints violated" heading), without its advice on mark_dynamic, which
        # is about torch.compile
        violated = next(iter(lines[1:] if lines and lines[0].startswith("Constraints violated") else lines), str(error))
        violated = violated.split(". ")[0].rstrip(".")
        raise FixedSizeError(
            f"{name}: the model fixes a size that dynamic_shapes leaves free ({violated}); lower it at a fixed "
            "length and run it in windows, or change the model where it loops or branches on that size"
        ) from error
    return exported


def _export_with_failing_guards(
    name: str, method: Method, *, exact_integer_constants: bool
) -> tuple[ExportedProgram, list[_FailingGuard]]:
    """The method exported (:func:`_export`), and the guards of export that fail in its range, where they fail
    (:func:`_guards_failing_over_range`)."""
    exported = _export(name, method, exact_integer_constants=exact_integer_constants)
    return exported, _guards_failing_over_range(exported)


def _export_decomposed(exported: ExportedProgram) -> ExportedProgram:
    # run_decompositions({}) only functionalizes (in-place buffer updates become
    # BUFFER_MUTATION outputs); it is the same first step to_edge takes.
    decomposed = exported.run_decompositions({})
    compact_constants(decomposed)
    return decomposed


class _InputSizes:
    """What a guard of ``torch.export`` reads of an input: ``size()``."""

    def __init__(self, sizes: list[int]) -> None:
        self._sizes = sizes

    def size(self) -> list[int]:
        return self._sizes


@dataclass(frozen=True)
class _FailingGuard:
    """A guard of ``torch.export`` that is false at a length of the range, and the input sizes there."""

    guard: str
    sizes: dict[str, list[int]]

    def shown_sizes(self) -> str:
        return ", ".join(f"{n} of size {tuple(s)}" for n, s in self.sizes.items())


def _guards_failing_over_range(program: ExportedProgram) -> list[_FailingGuard]:
    """Where a guard ``torch.export`` took on the input's sizes is false in the exported range: at the first, a
    middle and the last such length (none where every guard holds).

    Export does not always refuse a branch that holds only at some lengths: a size that is 0 or 1 by parity (a
    pooled sequence padded back with ``zeros[:, : n - 2 * (n // 2)]``) can become a guard (``n`` even) that only
    ``program.module()`` checks on each call, and that lowering then relies on. An ExecuTorch program runs none of
    them, so an odd length gave a wrong result, silently (20 frames out for 21 in). Each guard is evaluated at every
    length of the range (or at its ends and 64 lengths between, past
    :data:`~audiodeploy.lowering.passes._graph.MOST_LENGTHS_TRIED`); a guard that reads what this cannot evaluate is
    left, and so is a program with more than one dynamic size symbol. :func:`_check_failing_guards` judges the
    lowered program at those lengths.
    """
    # torch 2.14 keeps the guards only as code for the unlifted module's check; there is no public accessor.
    guards = getattr(program, "_guards_code", None) or []
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    inputs = {name: placeholders[name].meta["val"] for name in program.graph_signature.user_inputs}
    shapes = {n: v.shape for n, v in inputs.items() if isinstance(v, torch.Tensor)}
    symbols = {
        s
        for shape in shapes.values()
        for size in shape
        if isinstance(size, torch.SymInt)
        for s in size.node.expr.free_symbols
    }
    if not guards or len(symbols) != 1:
        return []
    (symbol,) = symbols
    bounds = program.range_constraints.get(symbol)
    if bounds is None or not (is_finite_bound(bounds.lower) and is_finite_bound(bounds.upper)):
        return []
    low, high = int(bounds.lower), int(bounds.upper)
    step = 1 if high - low < MOST_LENGTHS_TRIED else max(1, (high - low) // 64)
    compiled = [(guard, compile(guard, "<torch.export guard>", "eval")) for guard in guards]
    failing: list[_FailingGuard] = []
    for value in sorted({low, high, *range(low, high + 1, step)}):
        sizes = {
            n: [
                int(size.node.expr.subs(symbol, value)) if isinstance(size, torch.SymInt) else int(size)
                for size in shape
            ]
            for n, shape in shapes.items()
        }
        local = {"L": {n: _InputSizes(s) for n, s in sizes.items()}}
        for guard, code in compiled:
            try:
                holds = bool(eval(code, {"math": math}, local))  # torch's own code, of sizes
            except Exception:  # a guard that reads more than input sizes: not judged
                continue
            if not holds:
                failing.append(_FailingGuard(guard, sizes))
                break
    return [failing[i] for i in sorted({0, len(failing) // 2, len(failing) - 1})] if failing else []


def _check_failing_guards(
    methods: Mapping[str, Method],
    failing: Mapping[str, list[_FailingGuard]],
    program: bytes,
    data: bytes | None,
    run_program: ProgramRunner | None,
) -> None:
    """Raise :class:`FixedSizeError` for a method whose export guard fails at a length of its range where the lowered
    program does not give the model's result.

    Many such guards are harmless: SEW pads its upsampled frames back ``if`` they are fewer than the input's, which
    export takes at an odd example; at an even length the program pads by 0 frames where the model skips the pad.
    So the program (run by ``run_program``) and the model run on the same random input at each length
    :func:`_guards_failing_over_range` gives, and the program is kept, with a warning, where every output matches
    (float32 programs of float inputs; anything else is refused: there is nothing exact to compare with).
    """
    for name, guards in failing.items():
        if not guards:
            continue
        method = methods[name]
        differing = next(
            (
                f
                for f in guards
                if run_program is None or not _program_matches_model(program, data, name, method, f, run_program)
            ),
            None,
        )
        if differing is not None:
            raise FixedSizeError(
                f"{name}: torch.export assumed `{differing.guard}` of the input's size, which is false for "
                f"{differing.shown_sizes()} in the range dynamic_shapes gives, and the program cannot check it (there "
                "it does not give the model's result); lower it over lengths where it holds, or change the model "
                "where it computes a size from the length"
            )
        logger.warning(
            "%s: torch.export assumed `%s` of the input's size, which is false in the range dynamic_shapes gives; "
            "the program gives the model's result there (checked at %s), so it is kept",
            name,
            guards[0].guard,
            "; ".join(f.shown_sizes() for f in guards),
        )


def _program_matches_model(
    program: bytes, data: bytes | None, name: str, method: Method, failing: _FailingGuard, run_program: ProgramRunner
) -> bool:
    """Whether the lowered program gives the model's outputs on random float inputs of the sizes of ``failing``."""
    examples = method.example_inputs
    if len(examples) != len(failing.sizes) or not all(
        isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in examples
    ):
        return False
    generator = torch.Generator().manual_seed(0)
    inputs = tuple(torch.randn(s, generator=generator) for s in failing.sizes.values())
    try:
        with torch.no_grad():
            expected = pytree.tree_leaves(method.module(*inputs))
        (got,) = run_program(program, data, name, [inputs])
    except Exception:  # the model or the program refuses this length: nothing shows that the program holds there
        return False
    return len(got) == len(expected) and all(_same_output(a, b) for a, b in zip(got, expected))


def _same_output(got: object, expected: object) -> bool:
    if not isinstance(expected, torch.Tensor):
        return got == expected
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    return torch.allclose(got.double(), expected.double(), rtol=1e-4, atol=1e-5 * max(1.0, scale))


def _raising_line(error: BaseException) -> str:
    """``file:line (`code`)`` of the innermost frame of ``error``'s traceback in the model's code, not torch's or the
    lowering's own."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = os.path.dirname(__file__) + os.sep
    outside = [f for f in frames if not f.filename.startswith((_TORCH_SOURCES, ours))]
    frame = outside[-1] if outside else frames[-1]
    return f"{frame.filename}:{frame.lineno} (`{(frame.line or '').strip()}`)"


def _check_sizes_follow_from_shapes(name: str, program: ExportedProgram) -> None:
    """Raise :class:`DataDependentShapeError` at the first op of ``program`` whose output size depends on data.

    ``torch.export`` takes ``nonzero``, ``repeat_interleave`` by a tensor of counts or a size read with
    ``.item()``, and gives the size an unbacked symbol (``u0``) that no input shape determines. Nothing after it can
    plan for that size: a rewrite that asks anything of it fails deep inside (``GuardOnDataDependentSymNode`` in a
    reshape), and stock lowering fails the same way or on an op the edge dialect refuses, far from the model's
    line that made the size. So this runs before any rewrite, and names that op and line.
    """
    for node in program.graph.nodes:
        shapes = [v.shape for v in pytree.tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)]
        unbacked = next((shape for shape in shapes if free_unbacked_symbols(shape)), None)
        if unbacked is not None:
            shape = ", ".join(str(size) for size in unbacked)
            symbols = ", ".join(str(symbol) for symbol in free_unbacked_symbols(unbacked))
            raise DataDependentShapeError(
                f"{name}: {node.target} at {_source_line(node)} makes a tensor of shape ({shape}) where {symbols} "
                "depends on the input's values, not only on its shape, and lowering cannot plan for that; split the "
                "model there: compute the data-dependent part on the host and lower the parts before and after it "
                "as separate methods (audiodeploy.Method)"
            )


_RECURRENT_OPS = frozenset(getattr(torch.ops.aten, op).input for op in ("lstm", "gru", "rnn_tanh", "rnn_relu"))


def _check_no_recurrence_over_dynamic_length(name: str, method: Method, error: BaseException) -> None:
    """Raise :class:`RecurrentLengthError` (from ``error``, export's constraint violation) if ``method`` runs a
    recurrent layer; else return.

    Export computes a recurrent op's value by unrolling it over the frames (torch's decomposition iterates over the
    sequence), which fixes the length; the violation it reports names a size, not the layer. The method is exported
    again at the example's shapes to find the op and the model's line, which only this failure pays for.
    """
    try:
        program = torch.export.export(method.module, tuple(method.example_inputs))
    except Exception:  # the violation's own error says more than this one would
        return
    node = next((n for n in program.graph.nodes if n.target in _RECURRENT_OPS), None)
    if node is None:
        return
    steps = node.args[0].meta["val"].shape[1 if node.args[-1] else 0]  # the last argument is batch_first
    raise RecurrentLengthError(
        f"{name}: {node.target} at {_source_line(node)} runs a recurrent layer over the frames, which torch.export "
        f"unrolls at the example's length ({steps} steps), so no program of it takes another length; lower it at a "
        "fixed window length (no Dim on that axis, an example as long as the window) and run the input in windows "
        "of that length"
    ) from error


# One frame of a node's stack_trace, as torch.export records it: the file, the line and, below, the code.
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*(?:\n[ \t]+(?P<code>[^\n]*))?')
_TORCH_SOURCES = os.path.dirname(torch.__file__) + os.sep


def _source_line(node: torch.fx.Node) -> str:
    """``file:line (`code`)`` of the innermost frame that made ``node`` outside torch's own sources: the model's line.

    Outside torch: for ``F.interpolate(x, size=n)`` the innermost frame is in ``torch/nn/functional.py``, and the
    line to change is the caller's.
    """
    frames = list(_FRAME.finditer(node.meta.get("stack_trace") or ""))
    if not frames:  # e.g. an op a decomposition added; the module still says where
        stack = node.meta.get("nn_module_stack") or {}
        path = next(reversed(stack.values()), ("",))[0]
        return f"module {path or '(top-level module)'} (no source line recorded)"
    frame = next((f for f in reversed(frames) if not f["file"].startswith(_TORCH_SOURCES)), frames[-1])
    code = f" (`{frame['code'].strip()}`)" if frame["code"] else ""
    return f"{frame['file']}:{frame['line']}{code}"


@dataclass(frozen=True)
class _Lowered:
    """Every method lowered to XNNPACK, and what the report and serialization need of each."""

    edge: EdgeProgramManager
    partitioners: dict[str, ExplainingXnnpackPartitioner]
    applied: dict[str, list[AppliedFold]]
    export_ranges: Mapping[str, SymbolRanges]
    """Each method's shape symbol ranges as export left them, for :class:`PlanForExportRangePass`."""
    declined: dict[str, list[NotFolded]]
    """Folds dropped because XNNPACK declined their GEMM all the same (step 4 of the module docstring)."""

    def folds_outside_delegates(self) -> list[tuple[str, FoldCandidate, str]]:
        """(method, fold, XNNPACK's reason) for each fold whose constant is still read outside the delegates."""
        return [
            (name, candidate, reason)
            for name, applied in self.applied.items()
            for candidate, reason in _folds_outside_delegates(
                self.edge.exported_program(name), applied, self.partitioners[name].decline_reasons
            )
        ]


def _lower_fp32(
    exported: dict[str, ExportedProgram],
    plans: Mapping[str, FoldPlan | None],
    export_ranges: Mapping[str, SymbolRanges],
    half: Mapping[str, Method] | None = None,
) -> _Lowered:
    """Steps 3 and 4: lower with every planned fold; drop each fold XNNPACK declines and lower again. With
    ``half`` (the methods), each program is made fp16 after its folds."""
    to_fold = _planned(plans)
    declined: dict[str, list[NotFolded]] = {name: [] for name in exported}
    lowered = _lower_folded(exported, to_fold, export_ranges, declined, half)
    # Each round drops at least one fold (remove() would raise otherwise), so this ends; usually it does not run.
    while outside := lowered.folds_outside_delegates():
        for name, candidate, reason in outside:
            to_fold[name].remove(candidate)
            declined[name].append(NotFolded(candidate.gemm_label, reason))
        lowered = _lower_folded(exported, to_fold, export_ranges, declined, half)
    return lowered


def _planned(plans: Mapping[str, FoldPlan | None]) -> dict[str, list[FoldCandidate]]:
    return {name: list(plan.candidates) if plan else [] for name, plan in plans.items()}


def _lower_folded(
    exported: Mapping[str, ExportedProgram],
    to_fold: Mapping[str, list[FoldCandidate]],
    export_ranges: Mapping[str, SymbolRanges],
    declined: dict[str, list[NotFolded]],
    half: Mapping[str, Method] | None = None,
) -> _Lowered:
    folded = {name: apply_folds(ep, to_fold[name]) for name, ep in exported.items()}
    programs = {name: ep for name, (ep, _) in folded.items()}
    if half is not None:
        programs = {
            name: as_float16(ep, tuple(half[name].example_inputs), half[name].dynamic_shapes)
            for name, ep in programs.items()
        }
        # The symbols of the second export are new: plan memory from its ranges, taken before lowering narrows them.
        export_ranges = {name: export_symbol_ranges(ep) for name, ep in programs.items()}
        # to_edge makes the scalars of ops tensors of the default dtype: fp16 ones, or each would be cast outside
        # the delegates on every call.
        with default_dtype(torch.float16):
            edge, partitioners = _to_edge(programs)
    else:
        edge, partitioners = _to_edge(programs)
    return _Lowered(edge, partitioners, {name: a for name, (_, a) in folded.items()}, export_ranges, declined)


def _to_edge(
    programs: Mapping[str, ExportedProgram], merge_partitions: bool = False
) -> tuple[EdgeProgramManager, dict[str, ExplainingXnnpackPartitioner]]:
    partitioners = {name: ExplainingXnnpackPartitioner(merge_partitions=merge_partitions) for name in programs}
    edge = to_edge_transform_and_lower(dict(programs), partitioner={name: [p] for name, p in partitioners.items()})
    return edge, partitioners


@dataclass(frozen=True)
class _Int8:
    """What the quantization report needs of an int8 lowering."""

    quantization: Quantization
    quantized: dict[str, QuantizedProgram]
    sensitivities: dict[str, tuple[GemmSensitivity, ...]]
    fidelity_inputs: dict[str, list[tuple[Any, ...]]]


def _lower_int8(
    methods: Mapping[str, Method],
    exported: Mapping[str, ExportedProgram],
    plans: Mapping[str, FoldPlan | None],
    quantization: Quantization,
    single: bool,
    progress: Progress | None,
) -> tuple[_Lowered, _Int8]:
    """Step 3 in int8: apply every planned fold, measure each GEMM's sensitivity if asked, quantize, lower once."""
    to_fold = _planned(plans)
    folded = {name: apply_folds(ep, to_fold[name]) for name, ep in exported.items()}
    programs = {name: ep for name, (ep, _) in folded.items()}
    check_keep_fp32(programs, quantization.keep_fp32)
    calibration = {name: _for_method(quantization.calibration, name, single) for name in methods}
    fidelity_inputs = {
        name: _fidelity_inputs(quantization.fidelity_inputs, name, single, method) for name, method in methods.items()
    }
    sensitivities = _sensitivities(programs, quantization, calibration, fidelity_inputs, progress)
    quantized = {
        name: quantize_program(
            ep,
            quantization.scheme,
            dynamic_shapes=methods[name].dynamic_shapes,
            calibration=calibration[name],
            keep_fp32=quantization.keep_fp32,
            progress=progress,
        )
        for name, ep in programs.items()
    }
    # The symbols of the second export are new: plan memory from its ranges, taken before lowering narrows them.
    export_ranges = {name: export_symbol_ranges(q.program) for name, q in quantized.items()}
    edge, partitioners = _to_edge({name: q.program for name, q in quantized.items()}, merge_partitions=True)
    applied = {name: a for name, (_, a) in folded.items()}
    lowered = _Lowered(edge, partitioners, applied, export_ranges, {name: [] for name in exported})
    return lowered, _Int8(quantization, quantized, sensitivities, fidelity_inputs)


def _sensitivities(
    programs: Mapping[str, ExportedProgram],
    quantization: Quantization,
    calibration: Mapping[str, Inputs | None],
    fidelity_inputs: Mapping[str, Inputs],
    progress: Progress | None,
) -> dict[str, tuple[GemmSensitivity, ...]]:
    """Each method's GEMMs quantized one at a time and ranked (``Quantization.sensitivity``); empty if not asked."""
    if not quantization.sensitivity:
        return {}
    return {
        name: tuple(gemm_sensitivity(ep, quantization.scheme, fidelity_inputs[name], calibration[name], progress))
        for name, ep in programs.items()
    }


def _to_executorch(lowered: _Lowered) -> ExecutorchProgramManager:
    # Mutable buffers keep their initial values, as in eager PyTorch (1.5.1 otherwise
    # serializes only their shape and the program starts from zeros).
    return lowered.edge.to_executorch(
        ExecutorchBackendConfig(
            passes=[InitializedMutableBufferPass(patterns=[""])],
            sym_shape_eval_pass={name: PlanForExportRangePass(r) for name, r in lowered.export_ranges.items()},
        )
    )


def _warn_gemms_not_delegated(report: LoweringReport) -> None:
    for method in report.methods.values():
        if method.gemms_not_delegated:
            logger.warning(
                "%s: %d GEMM(s) stay outside XNNPACK delegates and run on portable kernels: %s",
                method.name,
                len(method.gemms_not_delegated),
                "; ".join(f"{g.gemm}: {g.reason}" for g in method.gemms_not_delegated),
            )


def _for_method(given: InputsPerMethod | None, name: str, single: bool) -> Inputs | None:
    """``given`` for method ``name``: its entry in a mapping of methods, else itself (for a single module only)."""
    if isinstance(given, Mapping):
        return given.get(name)
    if given is None or single:
        return given
    raise TypeError("with several methods, give calibration and fidelity inputs as a mapping method name -> inputs")


def _fidelity_inputs(given: InputsPerMethod | None, name: str, single: bool, method: Method) -> list[tuple[Any, ...]]:
    """The inputs method ``name`` is measured on: the given ones, else generated signals unlike calibration's."""
    inputs = _for_method(given, name, single)
    if inputs is None:  # seed 2: calibration's generated signals use seed 1
        inputs = generated_signals(method.example_inputs, FIDELITY_INPUT_COUNT, seed=2)
    return [tuple(case) for case in inputs]


def _quantization_report(
    int8: _Int8,
    methods: Mapping[str, Method],
    buffer: bytes,
    external_data: Mapping[str, bytes],
    run_program: ProgramRunner,
) -> QuantizationReport:
    """Run the program on inputs not used for calibration and compare with eager, per method."""
    data = next(iter(external_data.values()), None)
    quantization = int8.quantization
    report_methods = {}
    for name, method in methods.items():
        inputs = int8.fidelity_inputs[name]
        with torch.no_grad():
            references = [_first(method.module(*case)) for case in inputs]
        actuals = [outputs[0] for outputs in run_program(buffer, data, name, inputs)]
        q = int8.quantized[name]
        report_methods[name] = QuantizedMethod(
            name=name,
            quantized_gemms=q.quantized_gemms,
            fp32_gemms=tuple(Fp32Gemm(gemm, reason) for gemm, reason in q.fp32_gemms),
            fidelity=fidelity_measures.measure(references, actuals, quantization.fidelity),
            sensitivity=int8.sensitivities.get(name, ()),
        )
    given = quantization.fidelity_inputs is not None
    return QuantizationReport(
        scheme=quantization.scheme.value,
        calibration="; ".join(dict.fromkeys(q.calibration for q in int8.quantized.values())),
        keep_fp32=tuple(quantization.keep_fp32),
        fidelity_inputs="given inputs" if given else f"{FIDELITY_INPUT_COUNT} generated signals",
        methods=report_methods,
    )


def _precision_report(
    methods: Mapping[str, Method], buffer: bytes, external_data: Mapping[str, bytes], run_program: ProgramRunner
) -> PrecisionReport:
    """The fp16 program run on generated signals and compared with fp32 eager, per method."""
    data = next(iter(external_data.values()), None)
    fidelity = {}
    for name, method in methods.items():
        inputs = _fidelity_inputs(None, name, True, method)
        with torch.no_grad():
            references = [_first(method.module(*case)) for case in inputs]
        actuals = [outputs[0] for outputs in run_program(buffer, data, name, inputs)]
        fidelity[name] = fidelity_measures.measure(references, actuals)
    return PrecisionReport(
        dtype="float16", fidelity_inputs=f"{FIDELITY_INPUT_COUNT} generated signals", fidelity=fidelity
    )


def _first(output: Any) -> Any:
    return output[0] if isinstance(output, (tuple, list)) else output


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


def _method_report(name: str, lowered: _Lowered, plan: FoldPlan | None, rewritten: Rewritten | None) -> MethodReport:
    folds = tuple(
        Fold(
            gemm=a.candidate.gemm_label,
            sources=a.candidate.source_targets,
            constants=tuple(target for _, target in a.constants),
            bytes_freed=a.candidate.bytes_freed,
            bytes_written=a.candidate.bytes_written,
        )
        for a in lowered.applied[name]
    )
    not_folded = tuple(NotFolded(r.gemm_label, r.reason) for r in (plan.rejections if plan else ())) + tuple(
        lowered.declined[name]
    )
    skipped = tuple(
        SkippedRewrite(rewrite, reason, nodes)
        for (rewrite, reason), nodes in (rewritten.skipped.items() if rewritten else ())
    )
    return describe_lowered_method(
        name,
        lowered.edge.exported_program(name),
        lowered.partitioners[name].decline_reasons,
        folds,
        not_folded,
        rewritten.changed if rewritten else (),
        skipped,
    )

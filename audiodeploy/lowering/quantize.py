"""int8 after the fold: PT2E quantization of a rewritten, folded program, ready for the XNNPACK partitioner.

Where it sits in :func:`audiodeploy.lower`::

    torch.export ── rewrites ── fold ── quantize_program ── partition ── .pte
                                        │
                                        └ .module() ── prepare_pt2e(XNNPACKQuantizer) ── calibrate (static)
                                          ── convert_pt2e ── torch.export again (same dynamic shapes)

The quantizer sees the program after the rewrites and the fold, so a ``weight_norm`` GEMM reaches it
as a GEMM on one constant weight: its per-channel int8 scales come from the folded weight, and the
delegate gets ``dequantize_per_channel(int8 constant) ── GEMM``, which XNNPACK takes whole. Quantizing
first would quantize ``weight_g`` and ``weight_v`` (or leave the computation fp32 and outside).

Schemes (:class:`QuantizationScheme`, valued as the command line spells them; ExecuTorch's ``XNNPackRecipeType`` in
brackets):

- ``int8-dynamic`` (``PT2E_INT8_DYNAMIC_PER_CHANNEL``): int8 per-channel symmetric weights, activations
  quantized per tensor at run time. XNNPACK 1.5.1 runs dynamically quantized ``linear`` and standard
  (not depthwise) 2-D convolutions; a depthwise convolution stays fp32 (XNNPACK declines it: "XNNPACK
  only supports standard 2D convolutions for dynamic quantization"; the quantizer does not annotate
  it). A 1-D convolution would too, so :mod:`~audiodeploy.lowering.passes.conv1d_as_conv2d` first
  writes it as the 2-D convolution of one row that XNNPACK runs anyway (wav2vec2's grouped positional
  convolution). The strided-convolution rewrite turns a feature encoder's convolutions into 1x1 2-D
  convolutions, so those are quantized too.
- ``int8-static`` (``PT2E_INT8_STATIC_PER_CHANNEL``): int8 per-channel weights and activation ranges
  observed on calibration inputs. Only the GEMMs are annotated (``linear``, ``conv1d``/``conv2d``),
  not the quantizer's ``add``/``mul``/``cat`` patterns: after the norm rewrites those are a layer
  norm's arithmetic, which int8 would ruin.

Attention's ``bmm``/``matmul`` (activation x activation) is not annotated by 1.5.1's quantizer and
stays fp32 inside the delegate.

Every GEMM stays fp32 whose weight is a *selection or reduction* constant that a rewrite emitted (each
output channel's non-zero weights all equal: one-hot tap gathers, ``1/K`` means): int8 would change
nothing in its weights and only add the activation's rounding error. So does every GEMM whose module
path matches a ``keep_fp32`` pattern (``fnmatch`` on each path of the node's ``nn_module_stack``, e.g.
``model.lm_head`` or ``model.wav2vec2.feature_extractor.conv_layers.0*``). A pattern that matches no GEMM
is refused (:func:`check_keep_fp32`): a misspelt pattern would otherwise replace the defaults with nothing
and quantize every GEMM without a word.

What :func:`audiodeploy.lower` is to do is one :class:`Quantization`, checked when it is made: the functions below
take its parts as checked.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from torch.export import ExportedProgram

from audiodeploy.errors import AudiodeployError
from audiodeploy.lowering.passes._gemms import gemm_label
from audiodeploy.lowering.passes.conv1d_as_conv2d import Conv1dAsConv2dPass
from audiodeploy.program.fidelity import Measure, measure, output_snr_db
from audiodeploy.program.report import GemmSensitivity

aten = torch.ops.aten

GENERATED_CALIBRATION_COUNT = 4

_GEMMS = {
    aten.linear.default,
    aten.conv1d.default,
    aten.conv2d.default,
    aten.convolution.default,
}
_DEQUANTIZE_WEIGHT = {
    torch.ops.quantized_decomposed.dequantize_per_channel.default,
    torch.ops.quantized_decomposed.dequantize_per_tensor.default,
}


Progress = Callable[[str], None]
"""Told what a long quantization step is doing, e.g. ``"measuring sensitivity: GEMM 3 of 40 (linear @ model.lm_head)"``."""

SENSITIVITY_STAGE = "measuring sensitivity"
CALIBRATION_STAGE = "calibrating activation ranges"
"""What ``progress`` messages start with (before a ``:``), for a caller that shows the stages differently."""

PATTERN_EXAMPLES = 4
"""How many GEMM module paths a refused ``keep_fp32`` pattern's message names."""


class QuantizationError(AudiodeployError, ValueError):
    """A quantization option the lowering cannot take."""


class KeepFp32PatternError(QuantizationError):
    """A ``keep_fp32`` pattern that matches no GEMM of the program."""


class QuantizationScheme(StrEnum):
    """How the GEMMs are quantized; each value is the scheme's name on the command line, in reports and sidecars.

    ``QuantizationScheme("int8-static")`` converts that name; any other is a :class:`QuantizationError` naming
    the choices.
    """

    INT8_DYNAMIC = "int8-dynamic"
    """ExecuTorch's ``PT2E_INT8_DYNAMIC_PER_CHANNEL``: int8 weights, activations quantized at run time."""
    INT8_STATIC = "int8-static"
    """ExecuTorch's ``PT2E_INT8_STATIC_PER_CHANNEL``: int8 weights, activation ranges calibrated ahead."""

    @classmethod
    def _missing_(cls, value: object) -> QuantizationScheme:
        raise QuantizationError(f"unknown quantization scheme {value!r}; choose one of: {', '.join(cls)}")


Inputs = Sequence[tuple[Any, ...]]
"""Input tuples of one method, each as the method takes them."""

InputsPerMethod = Inputs | Mapping[str, Inputs]
"""One method's input tuples, or for a program of several methods, a mapping method name -> them."""


@dataclass(frozen=True)
class Quantization:
    """What :func:`audiodeploy.lower` quantizes with, calibrates and measures on; checked here when made.

    ``Quantization(QuantizationScheme.INT8_STATIC, calibration=[(waveform,), ...], keep_fp32=["*.lm_head"])``.
    Refused: an unknown scheme, calibration for ``int8-dynamic``, empty calibration or fidelity inputs
    (:class:`QuantizationError`); ``keep_fp32`` as one string, or a pattern that is not a string
    (:class:`TypeError`). ``int8-static`` without calibration warns, at the line that made it. Whether each
    pattern matches a GEMM is checked against the program, by :func:`check_keep_fp32`.
    """

    scheme: QuantizationScheme
    """See :class:`QuantizationScheme`; a scheme given by its name (``"int8-static"``, from untyped code) is
    converted."""
    calibration: InputsPerMethod | None = None
    """``int8-static`` only: input tuples run through the prepared model to observe activation ranges; None:
    :data:`GENERATED_CALIBRATION_COUNT` generated signals (a warning says so)."""
    keep_fp32: Sequence[str] = ()
    """Module-name patterns (``fnmatch`` on ``nn_module_stack`` paths, e.g. ``"*.lm_head"``) whose GEMMs stay fp32;
    kept as a tuple."""
    sensitivity: bool = False
    """Also quantize each GEMM alone (every one, kept ones included) and record the output SNR on the fidelity
    inputs, most sensitive first, to choose ``keep_fp32`` from; simulated in PyTorch, seconds per GEMM."""
    fidelity_inputs: InputsPerMethod | None = None
    """What the quantized program is run on and compared with eager; None: two generated signals unlike the
    calibration ones."""
    fidelity: Mapping[str, Measure] | None = None
    """The measures, name -> ``(reference, actual) -> float``; None: ``snr_db`` and ``max_abs_diff`` of
    :mod:`~audiodeploy.program.fidelity`."""

    def __post_init__(self) -> None:
        # Frozen: the conversions go through object.__setattr__, as dataclasses' own __init__ does.
        object.__setattr__(self, "scheme", QuantizationScheme(self.scheme))
        object.__setattr__(self, "keep_fp32", _patterns(self.keep_fp32))
        _check_not_empty("calibration", self.calibration)
        _check_not_empty("fidelity_inputs", self.fidelity_inputs)
        if self.scheme is QuantizationScheme.INT8_DYNAMIC and self.calibration is not None:
            raise QuantizationError(
                "calibration is for int8-static: int8-dynamic quantizes activations at run time and observes none; "
                "drop calibration"
            )
        if self.scheme is QuantizationScheme.INT8_STATIC and self.calibration is None:
            warnings.warn(
                f"int8-static without calibration inputs: activation ranges come from {GENERATED_CALIBRATION_COUNT} "
                "generated signals, not real audio; pass calibration=[(input, ...), ...]",
                stacklevel=3,  # this, the dataclass's __init__, the line that made the Quantization
            )


def _patterns(keep_fp32: Sequence[str]) -> tuple[str, ...]:
    if isinstance(keep_fp32, str):
        raise TypeError(f"keep_fp32 takes a sequence of patterns, not one string: keep_fp32=[{keep_fp32!r}]")
    patterns = tuple(keep_fp32)
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"keep_fp32 takes fnmatch patterns (strings), not {type(pattern).__name__}: {pattern!r}")
    return patterns


def _check_not_empty(option: str, inputs: InputsPerMethod | None) -> None:
    if isinstance(inputs, Mapping):
        for method, cases in inputs.items():
            if cases is not None and not len(cases):
                raise QuantizationError(f"{option} of method {method!r} is empty: give at least one input tuple")
    elif inputs is not None and not len(inputs):
        raise QuantizationError(f"{option} is empty: give at least one input tuple, or None")


@dataclass(frozen=True)
class QuantizedProgram:
    program: ExportedProgram
    """Re-exported after ``convert_pt2e``: quantize/dequantize ops around the quantized GEMMs."""
    quantized_gemms: tuple[str, ...]
    """``op @ module.path`` of each GEMM with an int8 weight."""
    fp32_gemms: tuple[tuple[str, str], ...]
    """(GEMM, why it stays fp32) for every other GEMM on a constant weight, but a rewrite's selections and means."""
    calibration: str
    """Where the activation ranges came from: ``"none (dynamic)"``, ``"N given inputs"``, ``"N generated signals"``."""


def quantize_program(
    ep: ExportedProgram,
    scheme: QuantizationScheme,
    *,
    dynamic_shapes: Any = None,
    calibration: Inputs | None = None,
    keep_fp32: Sequence[str] = (),
    progress: Progress | None = None,
) -> QuantizedProgram:
    """Quantize a (rewritten, folded) ATen program with PT2E and export it again with ``dynamic_shapes``.

    The options are one method's share of a :class:`Quantization`, as checked there. ``progress`` hears of each
    calibration input (static only). The patterns are not matched here: one method of several may hold none of a
    pattern's GEMMs (:func:`check_keep_fp32` takes every method)."""
    scheme = QuantizationScheme(scheme)
    _rewrite_for_scheme(ep, scheme)
    example_inputs = tuple(ep.example_inputs[0]) if ep.example_inputs else ()
    cases, source = _calibration(scheme, calibration, example_inputs)
    report = None if scheme is QuantizationScheme.INT8_DYNAMIC else progress
    converted, kept = _convert(_unguarded_module(ep), scheme, cases, _GemmFilter.factory(tuple(keep_fp32)), report)
    program = torch.export.export(converted, example_inputs, dynamic_shapes=dynamic_shapes).run_decompositions({})
    quantized, fp32 = _quantized_gemms(program, kept, scheme is QuantizationScheme.INT8_DYNAMIC)
    return QuantizedProgram(program, quantized, fp32, source)


def _calibration(
    scheme: QuantizationScheme, calibration: Inputs | None, example_inputs: tuple[Any, ...]
) -> tuple[list[tuple[Any, ...]], str]:
    """What the prepared model is run on, and where that came from (``QuantizedProgram.calibration``)."""
    if scheme is QuantizationScheme.INT8_DYNAMIC:
        return [example_inputs], "none (dynamic)"  # one run: the weight observers see their weights
    if calibration is None:
        return generated_signals(example_inputs, GENERATED_CALIBRATION_COUNT, seed=1), (
            f"{GENERATED_CALIBRATION_COUNT} generated signals"
        )
    return [tuple(inputs) for inputs in calibration], f"{len(calibration)} given inputs"


def _rewrite_for_scheme(ep: ExportedProgram, scheme: QuantizationScheme) -> None:
    """In place: the GEMMs ``scheme``'s quantizer would skip for their form alone, written in the form it takes."""
    if scheme is QuantizationScheme.INT8_DYNAMIC:
        Conv1dAsConv2dPass(ep)(ep.graph_module)


def _unguarded_module(ep: ExportedProgram) -> torch.fx.GraphModule:
    """``ep.module()`` without its input guards: the dynamic shapes checked at the second export bound the lengths.

    The fold's fake-tensor runs narrow the shape environment (a fake convolution records ``length <= limit``
    of the example length as a guard, see :mod:`~audiodeploy.lowering.passes.plan_for_export_range`), and
    ``ep.module()`` turns that into an input check: the tiny HiFi-GAN, exported for 87-862 frames, refused a
    calibration mel of 161 (``Guard failed: 128 * mel.size()[1] <= 20480``).
    """
    return ep.module(check_guards=False)


@functools.cache
def _post_training_quantizer() -> type:
    """``XNNPACKQuantizer`` without its quantization-aware-training patterns (conv or conv_transpose, batch norm).

    1.5.1 annotates every pattern for a static config, those four included, and each traces its pattern with
    ``torch.export`` on every ``prepare_pt2e`` (12 exports: 2-4 s here, 95% of a sensitivity step of the tiny
    wav2vec2). They match a batch norm in training mode only, which an exported inference program does not
    hold (eval-mode batch norm is ``_native_batch_norm_legit_no_training``), so leaving them out annotates the
    same nodes. A subclass, because the quantizer reads its patterns from this class attribute.
    """
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer

    class PostTrainingXnnpackQuantizer(XNNPACKQuantizer):
        SUPPORTED_PATTERNS = [pattern for pattern in XNNPACKQuantizer.SUPPORTED_PATTERNS if not pattern.is_qat]

    return PostTrainingXnnpackQuantizer


def _convert(
    graph_module: torch.fx.GraphModule,
    scheme: QuantizationScheme,
    calibration: Sequence[tuple[Any, ...]],
    make_filter: Callable[[torch.fx.GraphModule], _GemmFilter],
    progress: Progress | None = None,
) -> tuple[torch.fx.GraphModule, _GemmFilter]:
    """``prepare_pt2e``, run ``calibration``, ``convert_pt2e``: the converted module and the filter used."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import get_symmetric_quantization_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    dynamic = scheme is QuantizationScheme.INT8_DYNAMIC
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    kept = make_filter(graph_module)
    quantizer = _post_training_quantizer()().set_filter_function(kept)
    if dynamic:
        quantizer.set_global(config)
    else:
        for op in (aten.linear.default, aten.conv1d.default, aten.conv2d.default):
            quantizer.set_operator_type(op, config)
    prepared = prepare_pt2e(graph_module, quantizer)
    with torch.no_grad():
        for index, inputs in enumerate(calibration, 1):
            if progress is not None:
                progress(f"{CALIBRATION_STAGE}: input {index} of {len(calibration)}")
            prepared(*inputs)
    return convert_pt2e(prepared), kept


class _GemmFilter:
    """The quantizer's filter: False for a node that must stay fp32 (kept by pattern, or a selection GEMM)."""

    def __init__(
        self, graph_module: torch.fx.GraphModule, patterns: tuple[str, ...], only: frozenset[str] | None = None
    ) -> None:
        self.graph_module = graph_module
        self.patterns = patterns
        self.only = only

    @classmethod
    def factory(cls, patterns: tuple[str, ...], only: frozenset[str] | None = None):
        return lambda graph_module: cls(graph_module, patterns, only)

    def __call__(self, node: torch.fx.Node) -> bool:
        return self.reason(node) is None

    def matched_pattern(self, node: torch.fx.Node) -> str | None:
        paths = [path for path, _ in (node.meta.get("nn_module_stack") or {}).values()]
        for pattern in self.patterns:
            if any(fnmatch.fnmatchcase(path, pattern) for path in paths):
                return pattern
        return None

    def reason(self, node: torch.fx.Node) -> str | None:
        pattern = self.matched_pattern(node)
        if pattern is not None:
            return f"kept fp32 by pattern {pattern!r}"
        if node.op == "call_function" and node.target in _GEMMS and len(node.args) > 1:
            if self.only is not None and node.name not in self.only:
                return "not measured in this pass"
            weight = _constant_value(self.graph_module, node.args[1])
            if weight is not None and is_selection_weight(weight):
                return "selection or reduction constant from a rewrite (int8 would only add rounding)"
        return None


def check_keep_fp32(programs: dict[str, ExportedProgram], patterns: Sequence[str]) -> None:
    """Raise :class:`KeepFp32PatternError` (one line) for a pattern that matches no GEMM of any of ``programs``.

    The message names a few GEMM module paths, the strings the patterns are matched against.
    """
    if not patterns:
        return
    gemm_paths: dict[str, list[str]] = {}  # innermost path -> every path of its stack, for the examples
    for ep in programs.values():
        graph_module = ep.graph_module
        for node in graph_module.graph.nodes:
            if _is_model_gemm(graph_module, ep, node):
                paths = [path for path, _ in (node.meta.get("nn_module_stack") or {}).values()]
                if paths:
                    gemm_paths.setdefault(paths[-1], paths)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(path, pattern) for paths in gemm_paths.values() for path in paths):
            raise KeepFp32PatternError(_unmatched_message(pattern, list(gemm_paths)))


def _unmatched_message(pattern: str, gemm_paths: list[str]) -> str:
    if not gemm_paths:
        return f"keep-fp32 pattern {pattern!r} matches no GEMM: this program has no quantizable GEMM; drop the pattern"
    shown = ", ".join(gemm_paths[:PATTERN_EXAMPLES])
    more = f" and {len(gemm_paths) - PATTERN_EXAMPLES} more" if len(gemm_paths) > PATTERN_EXAMPLES else ""
    return (
        f"keep-fp32 pattern {pattern!r} matches no GEMM's module path ({shown}{more}); give an fnmatch pattern "
        "that matches some of them, or leave it out for the default"
    )


def _is_model_gemm(graph_module: torch.fx.GraphModule, ep: ExportedProgram, node: torch.fx.Node) -> bool:
    """Whether ``node`` is one of the model's GEMMs on a constant weight (not a rewrite's selection or mean)."""
    if node.op != "call_function" or node.target not in _GEMMS or len(node.args) < 2:
        return False
    weight = node.args[1]
    if not isinstance(weight, torch.fx.Node) or weight.op != "placeholder":
        return False
    value = _program_constant(ep, weight)
    return value is not None and not is_selection_weight(value)


def is_selection_weight(weight: torch.Tensor) -> bool:
    """Whether every output channel's non-zero weights are one value (one-hot gathers, ``1/K`` means)."""
    rows = weight.detach().reshape(weight.shape[0], -1) if weight.dim() else weight.detach().reshape(1, 1)
    if rows.numel() == 0:
        return False
    first_nonzero = rows.gather(1, rows.abs().argmax(dim=1, keepdim=True))  # zero only for an all-zero row
    return bool((first_nonzero != 0).all()) and bool(((rows == 0) | (rows == first_nonzero)).all())


def _constant_value(graph_module: torch.fx.GraphModule, node: Any) -> torch.Tensor | None:
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        value = graph_module
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
        return value if isinstance(value, torch.Tensor) else None
    return None


def _quantized_gemms(
    program: ExportedProgram, kept: _GemmFilter, dynamic: bool
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Which GEMMs of the re-exported program read an int8 weight, and why each other one does not."""
    placeholders = {n for n in program.graph.nodes if n.op == "placeholder"}
    user_inputs = set(program.graph_signature.user_inputs)
    quantized, fp32 = [], []
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target not in _GEMMS or len(node.args) < 2:
            continue
        weight = node.args[1]
        if not isinstance(weight, torch.fx.Node):
            continue
        if weight.op == "call_function" and weight.target in _DEQUANTIZE_WEIGHT:
            quantized.append(gemm_label(node))
            continue
        if weight not in placeholders or weight.name in user_inputs:
            continue  # an activation times an activation: not quantized by 1.5.1's quantizer
        value = _program_constant(program, weight)
        if value is not None and is_selection_weight(value):
            continue  # a rewrite's gather or mean, not one of the model's GEMMs
        pattern = kept.matched_pattern(node)
        if pattern is not None:
            fp32.append((gemm_label(node), f"kept fp32 by pattern {pattern!r}"))
        elif dynamic and node.target is not aten.linear.default:
            fp32.append((gemm_label(node), "XNNPACK's dynamic int8 takes no depthwise convolution"))
        else:
            fp32.append((gemm_label(node), "not annotated by XNNPACKQuantizer"))
    return tuple(quantized), tuple(fp32)


def _program_constant(program: ExportedProgram, node: torch.fx.Node) -> torch.Tensor | None:
    signature = program.graph_signature
    for mapping in (
        signature.inputs_to_parameters,
        signature.inputs_to_buffers,
        signature.inputs_to_lifted_tensor_constants,
    ):
        if node.name in mapping:
            target = mapping[node.name]
            return program.state_dict.get(target, program.constants.get(target))
    return None


def gemm_sensitivity(
    ep: ExportedProgram,
    scheme: QuantizationScheme,
    inputs: Inputs,
    calibration: Inputs | None = None,
    progress: Progress | None = None,
) -> list[GemmSensitivity]:
    """Each quantizable GEMM of a (rewritten, folded) program quantized alone, most sensitive first.

    Runs PT2E's reference (quantize/dequantize) model in PyTorch, not XNNPACK: a ranking for
    choosing ``keep_fp32`` patterns, measured in seconds per GEMM on small models (minutes in all for a
    HiFi-GAN V1's 78 convolutions), so ``progress`` hears of each GEMM as it starts.
    """
    scheme = QuantizationScheme(scheme)
    _rewrite_for_scheme(ep, scheme)
    example_inputs = tuple(ep.example_inputs[0]) if ep.example_inputs else ()
    cases, _ = _calibration(scheme, calibration, example_inputs)
    reference_module = _unguarded_module(ep)
    with torch.no_grad():
        references = [_first(reference_module(*case)) for case in inputs]
    candidates = _quantizable_gemms(_unguarded_module(ep))
    results = []
    for index, node in enumerate(candidates, 1):
        if progress is not None:
            progress(f"{SENSITIVITY_STAGE}: GEMM {index} of {len(candidates)} ({gemm_label(node)})")
        only = _GemmFilter.factory((), frozenset({node.name}))
        converted, _ = _convert(_unguarded_module(ep), scheme, cases, only)
        if not any(n.target in _DEQUANTIZE_WEIGHT for n in converted.graph.nodes if n.op == "call_function"):
            continue  # the quantizer does not annotate it (a depthwise convolution under int8-dynamic)
        with torch.no_grad():
            actuals = [_first(converted(*case)) for case in inputs]
        snr = measure(references, actuals, {"snr_db": output_snr_db})["snr_db"]
        results.append(GemmSensitivity(gemm_label(node), snr))
    return sorted(results, key=lambda r: r.snr_db)


def _quantizable_gemms(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The GEMMs on a constant weight that no rule keeps fp32 (patterns aside: every one is measured)."""
    everything = _GemmFilter(graph_module, ())
    return [
        node
        for node in graph_module.graph.nodes
        if node.op == "call_function"
        and node.target in _GEMMS
        and len(node.args) > 1
        and _constant_value(graph_module, node.args[1]) is not None
        and everything.reason(node) is None
    ]


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output


def generated_signals(example_inputs: Sequence[Any], count: int, seed: int) -> list[tuple[Any, ...]]:
    """``count`` input tuples shaped like ``example_inputs``: tones, chirps and noise at the example's level.

    Float tensors are replaced (each at the RMS of the example, along its last dimension for a
    waveform ``[1, samples]``, elementwise noise otherwise); anything else is passed as given.
    """
    generator = torch.Generator().manual_seed(seed)
    signals = []
    for index in range(count):
        inputs = []
        for example in example_inputs:
            if not isinstance(example, torch.Tensor) or not example.is_floating_point():
                inputs.append(example)
                continue
            level = float(example.detach().double().pow(2).mean().sqrt()) or 1.0
            noise = torch.randn(example.shape, generator=generator, dtype=torch.float64)
            length = example.shape[-1] if example.dim() else 1
            t = torch.arange(length, dtype=torch.float64) / max(length, 1)
            frequency = 20.0 + 400.0 * torch.rand((), generator=generator, dtype=torch.float64).item()
            if index % 2 == 0:  # a tone under noise
                tone = torch.sin(2 * math.pi * frequency * t).expand(example.shape)
                signal = math.sqrt(2) * tone + 0.3 * noise
            else:  # a chirp over noise
                tone = torch.sin(2 * math.pi * frequency * t * (1 + 4 * t)).expand(example.shape)
                signal = 0.5 * math.sqrt(2) * tone + noise
            signal = signal / signal.pow(2).mean().sqrt() * level
            inputs.append(signal.to(example.dtype).contiguous())
        signals.append(tuple(inputs))
    return signals

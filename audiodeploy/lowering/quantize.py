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

Schemes (names as the command line spells them; ExecuTorch's ``XNNPackRecipeType`` in brackets):

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
"""

from __future__ import annotations

import fnmatch
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram

from audiodeploy.errors import AudiodeployError
from audiodeploy.lowering.passes._gemms import gemm_label
from audiodeploy.lowering.passes.conv1d_as_conv2d import Conv1dAsConv2dPass
from audiodeploy.lowering.report import GemmSensitivity

aten = torch.ops.aten

SCHEMES = ("int8-dynamic", "int8-static")
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


def check_options(scheme: str, calibration: Any, stacklevel: int = 2) -> None:
    """Raise on an unknown scheme; warn (one line, at the caller's caller) when calibration is missing or unused."""
    if scheme not in SCHEMES:
        raise QuantizationError(f"unknown quantization scheme {scheme!r}; choose one of: {', '.join(SCHEMES)}")
    if scheme == "int8-static" and calibration is None:
        warnings.warn(
            f"int8-static without calibration inputs: activation ranges come from {GENERATED_CALIBRATION_COUNT} "
            "generated signals, not real audio; pass calibration=[(input, ...), ...]",
            stacklevel=stacklevel + 1,
        )
    elif scheme == "int8-dynamic" and calibration is not None:
        warnings.warn(
            "int8-dynamic observes no activations: the calibration inputs are not used", stacklevel=stacklevel + 1
        )


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
    scheme: str,
    *,
    dynamic_shapes: Any = None,
    calibration: Sequence[tuple[Any, ...]] | None = None,
    keep_fp32: Sequence[str] = (),
    progress: Progress | None = None,
) -> QuantizedProgram:
    """Quantize a (rewritten, folded) ATen program with PT2E and export it again with ``dynamic_shapes``.

    ``progress`` hears of each calibration input (static only). The patterns are not checked here: one method
    of several may hold none of a pattern's GEMMs (:func:`check_keep_fp32` takes every method)."""
    if scheme not in SCHEMES:
        check_options(scheme, calibration)
    dynamic = scheme == "int8-dynamic"
    _rewrite_for_scheme(ep, scheme)
    example_inputs = tuple(ep.example_inputs[0]) if ep.example_inputs else ()
    if dynamic:
        source = "none (dynamic)"
        calibration = [example_inputs]  # one run: the weight observers see their weights
    elif calibration is None:
        calibration = generated_signals(example_inputs, GENERATED_CALIBRATION_COUNT, seed=1)
        source = f"{len(calibration)} generated signals"
    else:
        calibration = [tuple(inputs) for inputs in calibration]
        if not calibration:
            raise QuantizationError("calibration is empty: give at least one input tuple, or None")
        source = f"{len(calibration)} given inputs"
    report = None if dynamic else progress
    converted, kept = _convert(
        _unguarded_module(ep), scheme, calibration, _GemmFilter.factory(tuple(keep_fp32)), report
    )
    program = torch.export.export(converted, example_inputs, dynamic_shapes=dynamic_shapes).run_decompositions({})
    quantized, fp32 = _quantized_gemms(program, kept, dynamic)
    return QuantizedProgram(program, quantized, fp32, source)


def _rewrite_for_scheme(ep: ExportedProgram, scheme: str) -> None:
    """In place: the GEMMs ``scheme``'s quantizer would skip for their form alone, written in the form it takes."""
    if scheme == "int8-dynamic":
        Conv1dAsConv2dPass(ep)(ep.graph_module)


def _unguarded_module(ep: ExportedProgram) -> torch.fx.GraphModule:
    """``ep.module()`` without its input guards: the dynamic shapes checked at the second export bound the lengths.

    The fold's fake-tensor runs narrow the shape environment (a fake convolution records ``length <= limit``
    of the example length as a guard, see :mod:`~audiodeploy.lowering.passes.plan_for_export_range`), and
    ``ep.module()`` turns that into an input check: the tiny HiFi-GAN, exported for 87-862 frames, refused a
    calibration mel of 161 (``Guard failed: 128 * mel.size()[1] <= 20480``).
    """
    return ep.module(check_guards=False)


def _convert(
    graph_module: torch.fx.GraphModule,
    scheme: str,
    calibration: Sequence[tuple[Any, ...]],
    make_filter: Callable[[torch.fx.GraphModule], _GemmFilter],
    progress: Progress | None = None,
) -> tuple[torch.fx.GraphModule, _GemmFilter]:
    """``prepare_pt2e``, run ``calibration``, ``convert_pt2e``: the converted module and the filter used."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    dynamic = scheme == "int8-dynamic"
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    kept = make_filter(graph_module)
    quantizer = XNNPACKQuantizer().set_filter_function(kept)
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
    scheme: str,
    inputs: Sequence[tuple[Any, ...]],
    calibration: Sequence[tuple[Any, ...]] | None = None,
    progress: Progress | None = None,
) -> list[GemmSensitivity]:
    """Each quantizable GEMM of a (rewritten, folded) program quantized alone, most sensitive first.

    Runs PT2E's reference (quantize/dequantize) model in PyTorch, not XNNPACK: a ranking for
    choosing ``keep_fp32`` patterns, measured in seconds per GEMM on small models (minutes in all for a
    HiFi-GAN V1's 78 convolutions), so ``progress`` hears of each GEMM as it starts.
    """
    from audiodeploy.program.fidelity import measure, output_snr_db

    check_options(scheme, calibration, stacklevel=2)
    _rewrite_for_scheme(ep, scheme)
    example_inputs = tuple(ep.example_inputs[0]) if ep.example_inputs else ()
    if scheme == "int8-dynamic":
        calibration = [example_inputs]
    elif calibration is None:
        calibration = generated_signals(example_inputs, GENERATED_CALIBRATION_COUNT, seed=1)
    reference_module = _unguarded_module(ep)
    with torch.no_grad():
        references = [_first(reference_module(*case)) for case in inputs]
    graph_module = _unguarded_module(ep)
    everything = _GemmFilter(graph_module, ())
    candidates = [
        node
        for node in graph_module.graph.nodes
        if node.op == "call_function"
        and node.target in _GEMMS
        and len(node.args) > 1
        and _constant_value(graph_module, node.args[1]) is not None
        and everything.reason(node) is None
    ]
    results = []
    for index, node in enumerate(candidates, 1):
        if progress is not None:
            progress(f"{SENSITIVITY_STAGE}: GEMM {index} of {len(candidates)} ({gemm_label(node)})")
        only = _GemmFilter.factory((), frozenset({node.name}))
        converted, _ = _convert(_unguarded_module(ep), scheme, calibration, only)
        if not any(n.target in _DEQUANTIZE_WEIGHT for n in converted.graph.nodes if n.op == "call_function"):
            continue  # the quantizer does not annotate it (a depthwise convolution under int8-dynamic)
        with torch.no_grad():
            actuals = [_first(converted(*case)) for case in inputs]
        snr = measure(references, actuals, {"snr_db": output_snr_db})["snr_db"]
        results.append(GemmSensitivity(gemm_label(node), snr))
    return sorted(results, key=lambda r: r.snr_db)


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

"""``audiodeploy bench`` as a library: build the target, prepare the runtimes, measure, assemble the record.

    from audiodeploy.bench import BenchRequest, run_bench
    record = run_bench(BenchRequest("wav2vec2", variant="tiny", compare=("stock", "eager")))

Everything the user can get wrong is checked before anything slow starts (:func:`check`),
and a run that fails raises :class:`~audiodeploy.bench.errors.BenchError` (or a recipe or
program-load error) before any figure exists, so no results file claims numbers that were
not measured.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from audiodeploy.bench import pos_conv
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.pos_conv import PosConvShape
from audiodeploy.bench.results import (
    BenchCase,
    BenchRecord,
    BenchSettings,
    BenchTarget,
    Machine,
    RuntimeFigures,
)
from audiodeploy.bench.runtimes import (
    COMPARABLE,
    EagerRuntime,
    ExecuTorchRuntime,
    OnnxRuntime,
    Runtime,
    export_onnx,
    int8_scheme,
    lower_module,
    pte_runtime,
    require_onnxruntime,
)
from audiodeploy.bench.timing import machine_info, paired_ratio, set_threads
from audiodeploy.bench.transports import (
    AdbRunnerTransport,
    AdbTransport,
    LocalTransport,
    Measurement,
    NativeSideBySide,
    RunCounts,
    RunnerTransport,
    SshTransport,
    Transport,
    parse_device,
)
from audiodeploy.runtime.profile import Profile, sgemm_gflops

if TYPE_CHECKING:
    from audiodeploy.program.spec import InputSpec
    from audiodeploy.recipes.registry import Recipe
    from audiodeploy.recipes.spec import BuiltModel, LengthRange

Log = Callable[[str], None]

_FLOAT32 = 6  # ExecuTorch ScalarType code of float32


@dataclass(frozen=True)
class BenchRequest:
    """What to measure and how; the CLI's options one to one."""

    target: str
    """A recipe name (see ``audiodeploy list``) or the path of a .pte file."""
    variant: str | None = None
    source: str | None = None
    weights: str | None = None
    seconds: tuple[float, ...] | None = None
    """Audio durations to measure at; default one second (a .pte on the phone: its upper bound)."""
    min_seconds: float | None = None
    max_seconds: float | None = None
    """A recipe's program takes inputs of these durations, as ``export --min-seconds/--max-seconds`` writes it (equal:
    one fixed length); a bound not given is the recipe's, widened to every length measured."""
    compare: tuple[str, ...] = ()
    runs: int = 10
    warmup: int = 2
    stock_runs: int = 3
    stock_warmup: int = 1
    threads: int | None = None
    device: str = "local"
    """local, native, qemu-aarch64, adb, adb:SERIAL or ssh:[USER@]HOST[:PORT] (transports.parse_device)."""
    pos_conv: PosConvShape | None = None
    """The ``pos-conv`` target's size (``--channels``, ``--kernel``, ``--groups``, ``--length``); None: its
    defaults. Given with another target, an error."""
    runner: Path | None = None
    """``--device adb`` only: ExecuTorch's ``executor_runner`` built for the phone with the NDK, instead of the
    project's android-arm64 bundle (the default)."""
    method: str | None = None
    """The method of a recipe's program to measure, lowered alone: a codec's ``encode`` (audio to codes) or
    ``decode`` (the codes eager encode gives for the audio, to audio), a text-to-speech program's ``decode``
    (latents to speech); None: the method that takes the recipe's input (``forward``, a codec's ``encode``, a
    text-to-speech program's ``decode``)."""
    seed: int = 0
    profile: bool = False
    """Also profile each ExecuTorch program and ONNX Runtime session at each length (``--profile``): per operator
    kind and layer, after the timed runs, in runs of their own (a profiled run is slower)."""
    name: str | None = None
    """What models.md calls the result; default ``recipe-variant`` or the .pte's stem."""
    command: str | None = None
    """The command line to record; default this process's."""

    @property
    def pos_conv_shape(self) -> PosConvShape:
        """The size the ``pos-conv`` target measures: the one given, else its defaults."""
        return self.pos_conv or PosConvShape()


def parse_compare(text: str | None) -> tuple[str, ...]:
    """``"stock,eager"`` -> ``("stock", "eager")`` in the canonical order; unknown names are an error."""
    if not text:
        return ()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in COMPARABLE]
    if unknown:
        raise BenchError(f"--compare {','.join(unknown)}: choose among {', '.join(COMPARABLE)} (comma-separated)")
    return tuple(n for n in COMPARABLE if n in names)


def is_pte_target(target: str) -> bool:
    return target != pos_conv.TARGET and (target.endswith(".pte") or Path(target).is_file())


THREADS_PER_CPU = 4
"""``--threads`` takes at most this many threads per CPU of this machine (local, native, qemu-aarch64): more only
oversubscribes the CPUs, and 100000 made thread creation fail with a MemoryError and the bench hang."""
DEVICE_MAX_THREADS = 256
"""``--threads`` for a phone or board (adb, ssh), whose CPU count is not known before the runner reports it."""


def max_threads(device_kind: str) -> int:
    """The most ``--threads`` that `device_kind` takes."""
    if device_kind in ("adb", "ssh"):
        return DEVICE_MAX_THREADS
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def _check_threads(threads: int | None, device_kind: str) -> None:
    if threads is None:
        return
    if threads < 1:
        raise BenchError("--threads must be at least 1")
    limit = max_threads(device_kind)
    if threads > limit:
        why = (
            f"the most bench starts on a device over {device_kind}"
            if device_kind in ("adb", "ssh")
            else f"{THREADS_PER_CPU} per CPU, {os.cpu_count() or 1} CPU(s) here"
        )
        raise BenchError(
            f"--threads {threads} is more than {limit} ({why}); give at most {limit}, or leave it out for ExecuTorch's default"
        )


def _check_pos_conv(request: BenchRequest) -> None:
    """The pos-conv target lowers its own module both ways at one length: recipe and length options do not apply."""
    given = [
        option
        for option, value in (
            ("--compare", request.compare), ("--variant", request.variant), ("--source", request.source),
            ("--weights", request.weights), ("--seconds", request.seconds),
        )
        if value
    ]  # fmt: skip
    if given:
        raise BenchError(
            f"{', '.join(given)}: not for pos-conv, which compares stock and audiodeploy lowering of its own module; "
            "size it with --channels, --kernel, --groups and --length"
        )
    request.pos_conv_shape.check()


def check(request: BenchRequest) -> None:
    """Every mistake that can be found without building anything, each as a one-line error."""
    if request.runs < 1 or request.stock_runs < 1 or request.warmup < 0 or request.stock_warmup < 0:
        raise BenchError("--runs and --stock-runs must be at least 1, --warmup and --stock-warmup at least 0")
    kind, _ = parse_device(request.device)
    _check_threads(request.threads, kind)
    if request.seconds is not None and (
        not request.seconds or any(not (s > 0 and math.isfinite(s)) for s in request.seconds)
    ):
        raise BenchError("--seconds takes positive durations in seconds")
    unknown = [n for n in request.compare if n not in COMPARABLE]
    if unknown:
        raise BenchError(f"--compare {','.join(unknown)}: choose among {', '.join(COMPARABLE)}")
    if request.target == pos_conv.TARGET:
        _check_pos_conv(request)
    elif request.pos_conv is not None:
        raise BenchError(
            f"--channels, --kernel, --groups and --length size the {pos_conv.TARGET} target only; drop them for {request.target}"
        )
    if is_pte_target(request.target):
        if not Path(request.target).is_file():
            raise BenchError(
                f"{request.target}: no such file; give a .pte written by `audiodeploy export`, or a recipe name"
            )
        if request.compare:
            raise BenchError(
                "--compare needs a recipe target: a .pte holds no PyTorch module to lower the stock way, run eagerly or export to ONNX"
            )
        if any(v is not None for v in (request.variant, request.source, request.weights)):
            raise BenchError("--variant, --source and --weights apply to recipes, not to a .pte")
    if request.method is not None and (is_pte_target(request.target) or request.target == pos_conv.TARGET):
        raise BenchError(
            f"--method picks the method of a recipe's program, which bench lowers alone; drop it for {request.target}"
        )
    if (request.min_seconds, request.max_seconds) != (None, None) and (
        is_pte_target(request.target) or request.target == pos_conv.TARGET
    ):
        raise BenchError("--min-seconds and --max-seconds set the length range of a recipe's program; drop them")
    if kind != "adb" and request.runner is not None:
        raise BenchError("--runner is for --device adb")
    if request.profile and kind != "local":
        raise BenchError(
            f"--profile reads ExecuTorch's event trace in this process: use --device local, not {kind} "
            "(or profile the program here with `audiodeploy inspect PTE --profile`)"
        )
    if request.profile and request.target == pos_conv.TARGET:
        raise BenchError("--profile is for a recipe or a .pte; pos-conv compares two lowerings of one convolution")
    if kind in ("adb", "ssh"):
        off_device = [n for n in request.compare if n in _OFF_DEVICE]
        if off_device:
            raise BenchError(
                f"--device {kind} runs ExecuTorch programs only: drop {', '.join(off_device)} from --compare, or use --device local"
            )
    if kind == "qemu-aarch64":
        off_device = [n for n in request.compare if n in _OFF_DEVICE]
        if off_device:
            raise BenchError(
                f"--device {kind} runs ExecuTorch programs with the native runner: drop {', '.join(off_device)} "
                "from --compare, or use --device local"
            )
    for name in ("onnxruntime", "onnxruntime-int8"):
        if name in request.compare:
            require_onnxruntime(name)
    if not is_pte_target(request.target) and request.target != pos_conv.TARGET:
        _check_recipe_target(request)


def _check_recipe_target(request: BenchRequest) -> None:
    """A recipe target whose method bench cannot measure, or whose int8 scheme it refuses, as one line."""
    from audiodeploy import recipes

    recipe = recipes.get(request.target)
    measured_method(recipe, request.method)
    if "audiodeploy-int8" in request.compare:
        recipe.check_int8_scheme(int8_scheme(recipe.int8_schemes))  # a one-line RecipeError for UnivNet
    length_range = _length_range(recipe, request)
    outside = [s for s in _seconds(request) if not length_range.min_seconds <= s <= length_range.max_seconds]
    if outside:
        raise BenchError(
            f"--seconds {', '.join(f'{s:g}' for s in outside)}: outside the program's {length_range}; measure inside "
            "it or widen --min-seconds/--max-seconds"
        )


def measured_method(recipe: Recipe[Any], method: str | None) -> str:
    """The method of `recipe`'s program that bench measures: `method` when it names one bench measures, by default
    the one that takes the recipe's input (:func:`~audiodeploy.program.description.main_method`)."""
    from audiodeploy.program.description import ENCODE_METHOD, main_method, methods_of_task

    if method is None:
        return main_method(recipe.task)
    if recipe.task == "tts" and method == ENCODE_METHOD:
        raise BenchError(
            f"--method encode: {recipe.name}'s encode takes token ids, whose count is no length in seconds; bench its "
            "decode (latents to speech), or time the whole chain on a text with `audiodeploy run`"
        )
    methods = methods_of_task(recipe.task)
    if method in methods:
        return method
    if len(methods) == 1:
        raise BenchError(f"--method {method}: {recipe.name}'s program has one method, {methods[0]}; leave --method out")
    raise BenchError(f"--method {method}: {recipe.name}'s program has {_listed(methods)}; give one of them")


def _listed(methods: Sequence[str]) -> str:
    """``('encode', 'decode')`` -> ``"an encode and a decode method"``."""
    return " and ".join(f"{'an' if name[0] in 'aeiou' else 'a'} {name}" for name in methods) + " method"


def _length_range(recipe: Recipe[Any], request: BenchRequest) -> LengthRange:
    """The input durations the recipe's program takes: the bounds given, else the recipe's default range widened to
    every length measured (the program a user gets from `audiodeploy export`)."""
    from audiodeploy.recipes.spec import LengthRange

    seconds = _seconds(request)
    default = recipe.default_length_range
    low = min(default.min_seconds, seconds[0]) if request.min_seconds is None else request.min_seconds
    high = max(default.max_seconds, seconds[-1]) if request.max_seconds is None else request.max_seconds
    if not 0 < low <= high or not math.isfinite(high):
        raise BenchError(
            f"--min-seconds {low:g} --max-seconds {high:g} make no range of durations: give 0 < min <= max (a bound "
            "not given is the recipe's)"
        )
    return LengthRange(low, high)


_OFF_DEVICE = ("eager", "onnxruntime", "onnxruntime-int8")
"""What runs in this Python process only, never on a device."""


def run_bench(request: BenchRequest, log: Log = lambda message: None) -> dict[str, Any]:
    """Measure as ``request`` says; the ``audiodeploy.bench/1`` record as its dictionary (`measure_bench`)."""
    return measure_bench(request, log).to_dict()


def measure_bench(request: BenchRequest, log: Log = lambda message: None) -> BenchRecord:
    """Measure as ``request`` says; the ``audiodeploy.bench/1`` record."""
    check(request)
    transport, threads = _transport(request, log)
    # Before the run: its date is when the run started.
    machine = Machine.from_dict(machine_info(threads, request.command))
    if request.target == pos_conv.TARGET:
        target, runtimes, cases = _pos_conv_cases(request, transport, log)
    elif is_pte_target(request.target):
        target, runtimes, cases = _pte_cases(request, transport, log)
    else:
        target, runtimes, cases = _recipe_cases(request, transport, threads, log)
    return _measure(request, target, runtimes, cases, transport, threads, machine, log)


def _transport(request: BenchRequest, log: Log) -> tuple[Transport, int | None]:
    """The transport `request.device` names, its device checked (and its runner built) before anything slow,
    and the thread count to record: None when the device's runner keeps its own default."""
    kind, detail = parse_device(request.device)
    if kind == "adb" and request.runner is not None:
        executor_runner = AdbTransport(Path(request.runner), detail)
        executor_runner.connect()
        return executor_runner, request.threads
    if kind == "adb":
        return AdbRunnerTransport.for_device(detail, log), request.threads
    if kind == "ssh":
        return SshTransport.for_device(detail, log), request.threads  # type: ignore[arg-type]
    if kind == "qemu-aarch64" or (kind == "native" and request.target == pos_conv.TARGET):
        # pos-conv compares two lowerings in the runner, so its native device is the runner alone.
        return RunnerTransport.for_device(kind, log), request.threads
    # local and native: this process's thread count, which the native runner is then given too.
    transport = NativeSideBySide.for_device(log) if kind == "native" else LocalTransport()
    return transport, set_threads(request.threads)


@dataclass
class _Case:
    seconds: float | None
    length: int
    inputs: tuple[torch.Tensor, ...]
    audio_seconds: float | None
    expected: torch.Tensor | None
    runtimes: list[Runtime] = field(default_factory=list)
    """Programs for this length only (transports that cannot resize inputs); else empty."""
    ctc: bool = False
    """CTC logits out: the frame argmax agreement with eager is recorded too."""


def _seconds(request: BenchRequest) -> tuple[float, ...]:
    return tuple(sorted(set(request.seconds or (1.0,))))


def _recipe_cases(
    request: BenchRequest, transport: Transport, threads: int | None, log: Log
) -> tuple[BenchTarget, list[Runtime], list[_Case]]:
    """The recipe built over every length measured, a case per length, and the runtimes to compare."""
    from audiodeploy import recipes

    recipe = recipes.get(request.target)
    if transport.programs_per_length and (request.min_seconds, request.max_seconds) != (None, None):
        raise BenchError(
            f"--device {request.device} lowers one program per length measured: drop --min-seconds/--max-seconds"
        )
    built = _build(recipe, request, log)
    method = _MeasuredMethod.of(built, measured_method(recipe, request.method))
    target = BenchTarget(
        kind="recipe",
        recipe=built.recipe,
        variant=built.variant,
        source=built.source,
        weights=built.weights_provenance,
        parameters=sum(p.numel() for p in built.module.parameters()),
        path=None,
        sample_rate=built.sample_rate,
        input_kind=method.input.kind,
        length_range_seconds=(built.length_range.min_seconds, built.length_range.max_seconds),
        method=method.name if len(built.methods) > 1 else None,
    )
    cases = [_recipe_case(built, method, s, request.seed) for s in _seconds(request)]
    names = ("audiodeploy", *request.compare)
    keep_fp32 = built.keep_fp32
    scheme = int8_scheme(recipe.int8_schemes)
    if transport.programs_per_length:
        for case in cases:
            for name in names:
                log(f"lowering {name} for {case.audio_seconds:g} s (fixed length, as the phone's runner needs)")
                case.runtimes.append(_lowered(name, method.module, case.inputs, None, scheme, keep_fp32))
        return target, list(cases[0].runtimes), cases
    return target, _recipe_runtimes(method, names, scheme, keep_fp32, threads, log, request.profile), cases


@dataclass(frozen=True)
class _MeasuredMethod:
    """The method of a recipe's program that a bench run measures, lowered alone as a one-method program (whose
    method is then ``forward``): its module, how it exports, and its input."""

    name: str
    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: Any
    input: InputSpec
    decodes_codes: bool
    """A codec's decode: its input is what eager encode gives for the audio of each length."""

    @classmethod
    def of(cls, built: BuiltModel, name: str) -> _MeasuredMethod:
        module, example_inputs, dynamic_shapes = built.methods[name]
        decoder = built.decoder if name != built.method else None
        spec = built.input if decoder is None else decoder.input
        return cls(name, module, example_inputs, dynamic_shapes, spec, decodes_codes=decoder is not None)


def _build(recipe: Recipe[Any], request: BenchRequest, log: Log) -> BuiltModel:
    """The program a user gets from `audiodeploy export`, over `_length_range`."""
    variant = recipe.variant(request.variant).name
    log(f"building {recipe.name} {variant}")
    return recipe.build(
        variant=variant,
        source=request.source,
        weights=request.weights,
        seed=request.seed,
        length_range=_length_range(recipe, request),
    )


def _recipe_case(built: BuiltModel, method: _MeasuredMethod, seconds: float, seed: int) -> _Case:
    """Seeded random input of `seconds` of audio (for a codec's decode, the codes eager encode gives for it), and
    what the method's eager module gives for it."""
    length = built.input.length_for_seconds(seconds)
    inputs = built.random_inputs(length, seed=seed + 1)
    with torch.no_grad():
        if method.decodes_codes:
            inputs = (built.module(*inputs).contiguous(),)  # as `run` reads them from a file
            length = int(inputs[0].shape[method.input.length_axis])
        expected = method.module(*inputs)
    ctc = built.output.kind == "ctc-logits"
    return _Case(seconds, length, inputs, method.input.seconds(length), expected, ctc=ctc)


_HOW_LOWERED = {
    "audiodeploy": "computed weights folded, graph rewritten for XNNPACK",
    "stock": "stock ExecuTorch",
    "audiodeploy-fp16": "folded in fp32, then fp16",
}


def _recipe_runtimes(
    method: _MeasuredMethod,
    names: Sequence[str],
    scheme: str,
    keep_fp32: Sequence[str],
    threads: int | None,
    log: Log,
    profile: bool = False,
) -> list[Runtime]:
    """The runtimes `names` of the measured method's module, each taking every length of its range (ONNX Runtime's
    kept for a profile too, with `profile`)."""
    module, example_inputs, dynamic_shapes = method.module, method.example_inputs, method.dynamic_shapes
    runtimes: list[Runtime] = []
    onnx_export = None
    for name in names:
        if name in ("audiodeploy", "stock", "audiodeploy-fp16", "audiodeploy-int8"):
            how = _HOW_LOWERED.get(name, f"folded, then {scheme}")
            log(f"lowering {name} ({how}); large models take minutes")
            runtimes.append(_lowered(name, module, example_inputs, dynamic_shapes, scheme, keep_fp32))
        elif name == "eager":
            runtimes.append(EagerRuntime(module))
        elif name in ("onnxruntime", "onnxruntime-int8"):
            if onnx_export is None:  # one export for both: onnxruntime-int8 quantizes what onnxruntime runs
                log("exporting to ONNX (torch.onnx.export, dynamo)")
                onnx_export = export_onnx(module, example_inputs, dynamic_shapes)
            if name == "onnxruntime-int8":
                log("quantizing the ONNX model (onnxruntime quantize_dynamic, QInt8)")
            int8 = name == "onnxruntime-int8"
            runtimes.append(
                OnnxRuntime(
                    module,
                    example_inputs,
                    dynamic_shapes,
                    threads or 1,
                    int8=int8,
                    exported=onnx_export,
                    profile=profile,
                )
            )
    return runtimes


def _lowered(
    name: str, module: torch.nn.Module, inputs, dynamic_shapes, scheme: str, keep_fp32: Sequence[str]
) -> Runtime:
    """The ExecuTorch runtime ``name`` stands for: audiodeploy, stock, audiodeploy-fp16, or audiodeploy-int8
    (``scheme``, with the GEMMs of ``keep_fp32`` in fp32)."""
    if name == "audiodeploy-fp16":
        return lower_module(name, module, inputs, dynamic_shapes, fold=True, dtype=torch.float16)
    if name == "audiodeploy-int8":
        return lower_module(name, module, inputs, dynamic_shapes, fold=True, quantize=scheme, keep_fp32=keep_fp32)
    return lower_module(name, module, inputs, dynamic_shapes, fold=name == "audiodeploy")


def _pos_conv_cases(
    request: BenchRequest, transport: Transport, log: Log
) -> tuple[BenchTarget, list[Runtime], list[_Case]]:
    """The positional convolution lowered the stock way and by audiodeploy, at one fixed input length."""
    shape = request.pos_conv_shape
    model, x = pos_conv.build(shape, request.seed)
    with torch.no_grad():
        expected = model(x)
    runtimes: list[Runtime] = []
    for name in ("stock", "audiodeploy"):
        log(f"lowering {name}: {pos_conv.LABELS[name]}, {shape.describe()} on {tuple(x.shape)}")
        runtimes.append(lower_module(name, model, (x,), None, fold=name == "audiodeploy"))
    # Fixed-length programs: a runner that needs one program per length runs these as they are.
    case = _Case(
        None, shape.length, (x,), None, expected, runtimes=list(runtimes) if transport.programs_per_length else []
    )
    return BenchTarget.from_dict(pos_conv.target_record(shape, model)), runtimes, [case]


def _pte_cases(request: BenchRequest, transport: Transport, log: Log) -> tuple[BenchTarget, list[Runtime], list[_Case]]:
    from audiodeploy.program.description import program_digest, read_sidecar, sidecar_path

    path = Path(request.target)
    runtime = pte_runtime(path)
    bounds = runtime.input_upper_bounds()  # also proves the program loads, before anything is pushed
    if len(bounds) != 1 or bounds[0][1] != _FLOAT32:
        raise BenchError(f"{path}: bench feeds one float32 input; this program takes {len(bounds)} input(s)")
    description = None
    if sidecar_path(path).exists():
        sidecar = read_sidecar(path)  # a sidecar that is there must describe this program
        sidecar.check_digest(program_digest(runtime.buffer), str(path))
        description = sidecar.description
        runtime.report = sidecar.lowering
    # `pte_runtime` refused a program without a forward method: a codec's or a text-to-speech program.
    input_kind = description.input.kind if description is not None else None
    target = BenchTarget(
        kind="pte",
        recipe=description.recipe if description else None,
        variant=description.variant if description else None,
        source=description.source if description else None,
        weights=description.weights if description else None,
        parameters=None,
        path=str(path),
        sample_rate=description.sample_rate if description else None,
        input_kind=input_kind,
        length_range_seconds=description.length_range_seconds if description else None,
    )
    spec = description.input if description else None
    upper_shape = bounds[0][0]
    generator = torch.Generator().manual_seed(request.seed + 1)
    cases: list[_Case] = []
    if transport.programs_per_length or spec is None:
        # The phone's runner (and a program without a sidecar) runs at the upper bound.
        length = int(upper_shape[spec.length_axis]) if spec else None
        audio = spec.seconds(length) if spec and length is not None else None
        if request.seconds is not None and (
            spec is None
            or audio is None
            or any(abs(s - audio) > 0.5 / (spec.sample_rate / spec.samples_per_step) for s in request.seconds)
        ):
            have = f"{audio:g} s" if audio is not None else f"shape {upper_shape}"
            raise BenchError(
                f"{path} runs at its upper bound ({have}) here; export it for the length to measure "
                "(`audiodeploy export ... --seconds S`) and leave out --seconds"
            )
        inputs = ((0.1 * torch.randn(upper_shape, generator=generator)),)
        cases.append(_Case(audio, length if length is not None else upper_shape[-1], inputs, audio, None))
        if transport.programs_per_length:
            cases[0].runtimes.append(runtime)
        return target, [runtime], cases
    for s in _seconds(request):
        length = spec.length_for_seconds(s)
        if not spec.min_length <= length <= spec.max_length:
            raise BenchError(
                f"{path} accepts {spec.seconds(spec.min_length):g}-{spec.seconds(spec.max_length):g} s of audio; "
                f"--seconds {s:g} is outside that range"
            )
        cases.append(_Case(s, length, spec.random_inputs(length, seed=request.seed + 1), spec.seconds(length), None))
    return target, [runtime], cases


def _counts(request: BenchRequest, names: Sequence[str]) -> dict[str, RunCounts]:
    return {
        n: RunCounts(request.stock_runs, request.stock_warmup)
        if n == "stock"
        else RunCounts(request.runs, request.warmup)
        for n in names
    }


def _measure(
    request: BenchRequest,
    target: BenchTarget,
    runtimes: list[Runtime],
    cases: list[_Case],
    transport: Transport,
    threads: int | None,
    machine: Machine,
    log: Log,
) -> BenchRecord:
    infos = transport.runtime_infos(runtimes)
    names = list(infos)
    baseline = "audiodeploy" if "audiodeploy" in names and len(names) > 1 else None
    if baseline is None and "pte-native" in names:
        baseline = "pte"  # --device native on a .pte: the Python runtime against the runner
    counts = _counts(request, names)
    case_records = []
    try:
        for case in cases:
            programs = case.runtimes or runtimes
            log(f"measuring at {case.audio_seconds:g} s of audio" if case.audio_seconds else "measuring")
            measured = transport.measure(programs, case.inputs, counts, log, threads=threads)
            profiles = _profiles(programs, case, counts, log) if request.profile else {}
            case_records.append(_case_record(case, measured, baseline, profiles))
    finally:
        transport.close(runtimes)
    return BenchRecord(
        name=request.name or _default_name(request, target),
        target=target,
        transport=transport.describe(),
        settings=BenchSettings(
            runs=request.runs,
            warmup=request.warmup,
            stock_runs=request.stock_runs,
            stock_warmup=request.stock_warmup,
            threads=threads,
            seed=request.seed,
            compare=request.compare,
        ),
        machine=machine,
        baseline=baseline,
        runtimes=infos,
        cases=tuple(case_records),
    )


def _default_name(request: BenchRequest, target: BenchTarget) -> str:
    """What models.md calls a result when ``--name`` is not given."""
    if target.kind == pos_conv.TARGET:
        return pos_conv.default_name(request.pos_conv_shape)
    if target.kind == "recipe":
        return "-".join(part for part in (target.recipe, target.variant, target.method) if part)
    return Path(target.path or "").stem


def _profiles(
    runtimes: Sequence[Runtime], case: _Case, counts: Mapping[str, RunCounts], log: Log
) -> dict[str, Profile]:
    """Each ExecuTorch program's and ONNX Runtime session's profile on the case's inputs, read against this
    machine's sgemm rate (measured first, at the threads the runtimes run with)."""
    sgemm = sgemm_gflops()
    profiles = {}
    for runtime in runtimes:
        if not isinstance(runtime, ExecuTorchRuntime | OnnxRuntime):
            continue
        log(f"profiling {runtime.name}")
        runs = counts[runtime.name].runs
        profiles[runtime.name] = replace(runtime.profile(case.inputs, runs, warmup=1), sgemm_gflops=sgemm)
    return profiles


def _case_record(
    case: _Case, measured: dict[str, Measurement], baseline: str | None, profiles: Mapping[str, Profile]
) -> BenchCase:
    from audiodeploy.program.fidelity import frame_argmax_agreement, output_snr_db

    figures = {}
    for name, m in measured.items():
        diff = snr = agreement = None
        if case.expected is not None and m.output is not None:
            if tuple(m.output.shape) != tuple(case.expected.shape):
                raise BenchError(
                    f"{name}: output shape {tuple(m.output.shape)}, eager PyTorch gives {tuple(case.expected.shape)}"
                )
            diff = float((m.output.float() - case.expected.float()).abs().max())
            snr = output_snr_db(case.expected, m.output)
            if case.ctc:
                agreement = frame_argmax_agreement(case.expected, m.output)
        figures[name] = RuntimeFigures(
            load_s=m.load_s,
            peak_rss_bytes=m.peak_rss_bytes,
            rtf=None if not case.audio_seconds else m.latency.median_s / case.audio_seconds,
            max_abs_diff_vs_eager=diff,
            snr_db_vs_eager=_json_float(snr),
            argmax_agreement_vs_eager=agreement,
            notes=tuple(m.notes),
            latency=m.latency,
            profile=profiles.get(name),
        )
    ratios, paired = {}, {}
    if baseline:
        base = measured[baseline]
        for name, m in measured.items():
            if name == baseline:
                continue
            key = f"{baseline}/{name}"
            ratios[key] = base.latency.median_s / m.latency.median_s
            if base.timing is not None and m.timing is not None:
                paired[key] = paired_ratio(base.timing, m.timing)
    return BenchCase(
        seconds=case.seconds,
        audio_seconds=case.audio_seconds,
        input_length=case.length,
        input_shape=tuple(case.inputs[0].shape),
        runtimes=figures,
        ratios=ratios,
        paired_ratios=paired,
    )


def _json_float(value: float | None) -> float | None:
    """``value`` when JSON can hold it; None for an infinite SNR (the output is eager's bit for bit, as eager's
    own is: ``max_abs_diff_vs_eager`` 0 says so)."""
    return value if value is None or math.isfinite(value) else None

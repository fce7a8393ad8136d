"""``audiodeploy bench`` as a library: build the target, prepare the runtimes, measure, assemble the record.

    from audiodeploy.bench import BenchRequest, run_bench
    record = run_bench(BenchRequest("wav2vec2", variant="tiny", compare=("stock", "eager")))

Everything the user can get wrong is checked before anything slow starts (:func:`~audiodeploy.bench.request.check`),
and a run that fails raises :class:`~audiodeploy.bench.errors.BenchError` (or a recipe or
program-load error) before any figure exists, so no results file claims numbers that were
not measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from audiodeploy.bench import pos_conv
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.request import (
    BenchRequest,
    check,
    int8_scheme,
    is_pte_target,
    measured_method,
    measured_seconds,
    program_length_range,
)
from audiodeploy.bench.results import (
    BenchCase,
    BenchRecord,
    BenchSettings,
    BenchTarget,
    Machine,
    RuntimeFigures,
)
from audiodeploy.bench.runtimes import (
    EagerRuntime,
    ExecuTorchRuntime,
    OnnxRuntime,
    Runtime,
    export_onnx,
    lower_module,
    pte_runtime,
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
    from audiodeploy.recipes.spec import BuiltModel

Log = Callable[[str], None]

_FLOAT32 = 6  # ExecuTorch ScalarType code of float32


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
    cases = [_recipe_case(built, method, s, request.seed) for s in measured_seconds(request)]
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
        length_range=program_length_range(recipe, request),
    )


def _recipe_case(built: BuiltModel, method: _MeasuredMethod, seconds: float, seed: int) -> _Case:
    """Seeded random input of `seconds` of audio (for a codec's decode, the codes eager encode gives for it), and
    what the method's eager module gives for it."""
    length = built.input.length_for_seconds(seconds)
    inputs = built.random_inputs(length, seed=seed + 1)
    with torch.no_grad():
        if method.decodes_codes:
            # As `run` reads them from a file: the codes, and a chunked codec's scale beside them (or a carried state).
            assert built.decoder is not None  # a method that decodes codes is a codec's decode
            inputs = built.decoder.inputs_for(built.module(*inputs))
            length = int(inputs[0].shape[method.input.length_axis])
        expected = EagerRuntime(method.module).run(inputs)
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
    for s in measured_seconds(request):
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

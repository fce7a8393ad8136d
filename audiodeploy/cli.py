"""The ``audiodeploy`` command: list, export, run, inspect, bench.

Thin glue over the public Python API (``audiodeploy.recipes``, ``audiodeploy.lower``, ``audiodeploy.runtime``,
``audiodeploy.bench``). Every mistake, bad input or interruption ends in one line on stderr and a non-zero exit:
2 for a mistake, 130 for Ctrl-C, 128 + N for another signal; the user's files are left as they were and no
temporary file is left behind. Nothing that is not about the user's input is printed unless ``-v``.

Only typer and rich are imported up front; torch, executorch and the model libraries are imported by the commands
that need them, so that ``--help``, ``list`` and usage errors answer at once.
"""

from __future__ import annotations

import contextlib
import io
import math
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console

from audiodeploy import _output
from audiodeploy._files import (
    atomic_write_bytes,
    atomic_write_text,
    check_writable,
    display,
    read_user_file,
    refuse_overwrite,
)
from audiodeploy.errors import AudiodeployError
from audiodeploy.native.cli import runner_app

if TYPE_CHECKING:
    import numpy as np
    import torch

    from audiodeploy.bench import BenchRequest
    from audiodeploy.lowering import LoweredProgram
    from audiodeploy.program.description import Sidecar
    from audiodeploy.program.report import LoweringReport
    from audiodeploy.recipes.registry import Recipe
    from audiodeploy.recipes.spec import BuiltModel, LengthRange
    from audiodeploy.runtime.model import (
        AudioClassifier,
        ChunkedCodec,
        Codec,
        FeatureExtractor,
        SpeechRecognizer,
        Synthesizer,
        Vocoder,
        WrittenAudio,
    )
    from audiodeploy.runtime.program import Program

app = typer.Typer(
    name="audiodeploy",
    help="Take speech and audio models from PyTorch to phones (ExecuTorch + XNNPACK).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(runner_app, name="runner")
out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


class UserError(AudiodeployError):
    """A mistake in what the user asked for: the message is shown as is."""


class Interrupted(BaseException):
    """A stop signal (Ctrl-C's SIGINT, SIGTERM, SIGHUP) turned into an exception that unwinds the command, so every
    temporary file is removed on the way out. Not a KeyboardInterrupt: typer would turn that into a silent exit."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


@app.callback()
def _options(
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Also show library warnings, runtime logs and every fold.")
    ] = False,
) -> None:
    _output.configure(verbose)


@contextlib.contextmanager
def _step(message: str) -> Iterator[None]:
    """A spinner for a step that may take a while, then its duration."""
    start = time.monotonic()
    with err.status(f"{message}..."):
        yield
    err.print(f"{message}: done in {time.monotonic() - start:.1f} s", markup=False)


@app.command("list")
def list_recipes(
    all_variants: Annotated[
        bool,
        typer.Option("--all", help="Also the tiny test-size variants (synthetic weights, export in seconds)."),
    ] = False,
) -> None:
    """List the recipes, their variants and sources."""
    from audiodeploy import recipes

    hidden = 0
    for name in recipes.available():
        recipe = recipes.get(name)
        info = recipe.describe()
        shown = recipe.variant_names(include_hidden=all_variants)
        hidden += len(recipe.variant_names(include_hidden=True)) - len(shown)
        tiny = set(shown) - set(recipe.variant_names())
        variants = ", ".join(
            f"{v}{' (default)' if v == info['default_variant'] else ''}{' (test size)' if v in tiny else ''}"
            for v in shown
        )
        out.print(f"[bold]{name}[/bold]: {info['description']}")
        out.print(f"  variants: {variants}", markup=False)
        out.print(
            f"  sources: {', '.join(info['sources'])}; {info['sample_rate']} Hz; input: {info['input']}", markup=False
        )
    if hidden:
        # The README and the tests use the tiny variants: say where they are rather than leave them undiscoverable.
        out.print(f"and {hidden} tiny test-size variants: `audiodeploy list --all` shows them", markup=False)


def _program_targets(output: Path) -> tuple[Path, Path]:
    """The .pte and sidecar paths an export writes, both checked writable and distinct. A device or pipe is
    refused for either: the two are replaced together, as files, which writing through a device cannot do."""
    from audiodeploy.program.description import sidecar_path

    sidecar = sidecar_path(output)
    if sidecar == output:
        raise UserError(f"-o {display(output)}: the program's sidecar would overwrite it; give the program a .pte name")
    check_writable(output, streams=False)
    check_writable(sidecar, option="-o (its sidecar)", streams=False)
    return output, sidecar


class _ProgressLines:
    """A `progress` callback for a step that may take minutes: a stderr line at most every `every` seconds, and at
    once for the first message of an `announced` stage (the text before its first ':'), one slow by design. A log
    (or a terminal, above the step's spinner) shows the step is alive without a line per item."""

    def __init__(self, every: float = 5.0, announced: frozenset[str] = frozenset()) -> None:
        self.every = every
        self.announced = announced
        self.stage: str | None = None
        self.last = time.monotonic()

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        stage = message.split(":", 1)[0]
        if (stage in self.announced and stage != self.stage) or now - self.last >= self.every:
            err.print(message, markup=False)
            self.last = now
        self.stage = stage

    def file(self, number: int, files: int) -> None:
        """As `calibration_set`'s progress: before each file it reads."""
        self(f"reading calibration audio: file {number} of {files}")


@dataclass(frozen=True)
class _Int8Request:
    """How `export` is to quantize, its options checked: the scheme, what it calibrates on, what stays fp32."""

    scheme: str
    """``int8-dynamic`` or ``int8-static``, as the command line spells it."""
    calibration_files: list[Path] | None
    """The --calibrate audio; None: int8-static calibrates on generated signals."""
    calibrate_limit: int
    keep_fp32: tuple[str, ...] | None
    """The --keep-fp32 patterns; None: the built model's (`BuiltModel.keep_fp32`)."""
    sensitivity: bool
    strict: bool


@dataclass(frozen=True)
class _ExportRequest:
    """What `export` is to do, checked before any work: the recipe's variant and source, the input lengths, how it
    lowers, and the two files it writes, found writable."""

    recipe: Recipe[object]
    variant: str
    source: str
    weights: str | None
    length_range: LengthRange | None
    """None: the recipe's default range."""
    fold: bool
    int8: _Int8Request | None
    """None: fp32 (or fp16)."""
    fp16: bool
    """``--dtype fp16``: folded in fp32, stored and computed in fp16."""
    target: Path
    sidecar: Path


@app.command(
    help="Build a recipe's model, lower it to XNNPACK (fp32, fp16 or int8) and write a .pte with a JSON sidecar."
)
def export(
    recipe: Annotated[
        str | None,
        typer.Argument(
            help="Recipe name, see `audiodeploy list`; with --weights of a transformers checkpoint, default: the "
            "recipe its config.json names."
        ),
    ] = None,
    variant: Annotated[str | None, typer.Option(help="Variant; default: the recipe's first.")] = None,
    source: Annotated[str | None, typer.Option(help="Library to build from; default: the recipe's first.")] = None,
    weights: Annotated[
        str | None,
        typer.Option(
            help="Local directory (from_pretrained), hub id, torchaudio state dict, or an original checkpoint: a "
            "HiFi-GAN or BigVGAN generator (a file, or a directory with config.json), a Vocos directory (config.yaml "
            "and pytorch_model.bin); default: synthetic."
        ),
    ] = None,
    seconds: Annotated[float | None, typer.Option(help="Export one fixed input length, in seconds.")] = None,
    min_seconds: Annotated[float | None, typer.Option(help="Shortest input the program accepts.")] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Longest input the program accepts.")] = None,
    no_fold: Annotated[bool, typer.Option("--no-fold", help="Stock ExecuTorch lowering, for comparison.")] = False,
    quantize: Annotated[
        str | None,
        typer.Option(
            help="int8-dynamic (int8 weights, activations quantized at run time) or int8-static (activation "
            "ranges calibrated ahead); computed weights are folded first. Default: fp32."
        ),
    ] = None,
    calibrate: Annotated[
        list[Path] | None,
        typer.Option(
            help="With int8-static: audio files or directories to calibrate on (repeat); default: generated signals."
        ),
    ] = None,
    keep_fp32: Annotated[
        list[str] | None,
        typer.Option(
            "--keep-fp32",
            help="Module-name pattern (fnmatch) whose GEMMs stay fp32, e.g. '*.lm_head' (repeat); default: the "
            "recipe's most sensitive layers.",
        ),
    ] = None,
    sensitivity: Annotated[
        bool,
        typer.Option(
            "--sensitivity",
            help="With --quantize: also quantize each GEMM alone and report the most sensitive (output SNR vs "
            "fp32), to choose --keep-fp32; seconds per GEMM. `inspect` shows it later.",
        ),
    ] = False,
    calibrate_limit: Annotated[
        int | None,
        typer.Option(
            help="With --calibrate: calibrate on at most this many inputs (windows of the files), taken evenly over "
            "the files; default: 200."
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="With --quantize: refuse (exit 2, nothing written) an int8 program under the fidelity floor (15 dB "
            "output or waveform SNR against fp32) instead of writing it with a warning.",
        ),
    ] = False,
    dtype: Annotated[
        str,
        typer.Option(
            help="fp32, or fp16: weights and arithmetic in half precision (computed weights folded in fp32 first; "
            "float32 in and out), half the size; its fidelity against fp32 eager is reported."
        ),
    ] = "fp32",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Where to write the .pte.")] = None,
) -> None:
    """`audiodeploy export`. Long for its option declarations alone, which typer reads from the signature (the help
    is the decorator's); the body is the export's steps, each a function below."""
    request = _export_request(
        recipe,
        variant=variant,
        source=source,
        weights=weights,
        seconds=seconds,
        min_seconds=min_seconds,
        max_seconds=max_seconds,
        fold=not no_fold,
        quantize=quantize,
        calibrate=calibrate,
        calibrate_limit=calibrate_limit,
        keep_fp32=keep_fp32,
        sensitivity=sensitivity,
        strict=strict,
        dtype=dtype,
        output=output,
    )
    built = _build(request)
    lowered = _lower(request, built, _calibration(request, built))
    differences = _check_against_eager(request, lowered, built)
    _apply_fidelity_floor(request, lowered)
    _write_program(lowered, built, differences, request.target, request.sidecar)
    _print_export_summary(request, lowered, built, differences)


def _export_request(
    recipe_name: str | None,
    *,
    variant: str | None,
    source: str | None,
    weights: str | None,
    seconds: float | None,
    min_seconds: float | None,
    max_seconds: float | None,
    fold: bool,
    quantize: str | None,
    calibrate: list[Path] | None,
    calibrate_limit: int | None,
    keep_fp32: list[str] | None,
    sensitivity: bool,
    strict: bool,
    output: Path | None,
    dtype: str = "fp32",
) -> _ExportRequest:
    """`export`'s options as a request, every mistake in them refused before the model is built: the lengths, the
    recipe, its variant and source, the int8 options, then the files to write."""
    from audiodeploy import recipes

    if seconds is not None and (min_seconds is not None or max_seconds is not None):
        raise UserError("give either --seconds or --min-seconds/--max-seconds, not both")
    if recipe_name is not None:
        recipe = recipes.get(recipe_name)
    elif weights is not None:
        recipe = recipes.for_checkpoint(weights)
    else:
        raise UserError("name a recipe (see `audiodeploy list`), or give --weights DIR of a transformers checkpoint")
    chosen_variant = recipe.variant(variant).name
    chosen_source = recipe.source(source)
    int8 = _int8_request(
        recipe,
        quantize,
        fold=fold,
        calibrate=calibrate,
        calibrate_limit=calibrate_limit,
        keep_fp32=keep_fp32,
        sensitivity=sensitivity,
        strict=strict,
    )
    if dtype not in ("fp32", "fp16"):
        raise UserError(f"--dtype {dtype}: give fp32 or fp16 (for int8, --quantize)")
    if dtype == "fp16" and quantize is not None:
        raise UserError("--dtype fp16 and --quantize: choose one (an int8 program keeps its other parts in fp32)")
    length_range = _length_range(recipe, seconds, min_seconds, max_seconds)
    named_after = _checkpoint_name(weights) if recipe_name is None else None
    suffix = "-fp16" if dtype == "fp16" else _scheme_suffix(quantize)
    default_output = Path(f"{named_after or _default_program_name(recipe, chosen_variant)}{suffix}.pte")
    target, sidecar = _program_targets(output or default_output)
    return _ExportRequest(
        recipe=recipe,
        variant=chosen_variant,
        source=chosen_source,
        weights=weights,
        length_range=length_range,
        fold=fold,
        int8=int8,
        fp16=dtype == "fp16",
        target=target,
        sidecar=sidecar,
    )


def _int8_request(
    recipe: Recipe[object],
    scheme: str | None,
    *,
    fold: bool,
    calibrate: list[Path] | None,
    calibrate_limit: int | None,
    keep_fp32: list[str] | None,
    sensitivity: bool,
    strict: bool,
) -> _Int8Request | None:
    """The int8 options as a request (None for fp32), refused when they do not go together or the recipe does not
    take the scheme; the --calibrate files are found here, before the model is built."""
    from audiodeploy.recipes.calibration import DEFAULT_CALIBRATION_LIMIT, calibration_files

    if scheme is None:
        if calibrate or keep_fp32 or sensitivity or strict or calibrate_limit is not None:
            raise UserError(
                "--calibrate, --calibrate-limit, --keep-fp32, --sensitivity and --strict apply to quantized exports: "
                "add --quantize int8-static or int8-dynamic"
            )
        return None
    if calibrate_limit is not None and not calibrate:
        raise UserError("--calibrate-limit limits the --calibrate audio: add --calibrate FILES|DIR, or drop it")
    if calibrate_limit is not None and calibrate_limit < 1:
        raise UserError(f"--calibrate-limit {calibrate_limit} keeps no calibration input: give 1 or more")
    recipe.check_int8_scheme(scheme)
    if not fold:
        raise UserError("--quantize folds computed weights before it quantizes them: drop --no-fold")
    if calibrate and scheme != "int8-static":
        raise UserError(f"--calibrate is for int8-static; {scheme} quantizes activations at run time")
    return _Int8Request(
        scheme=scheme,
        calibration_files=calibration_files(calibrate) if calibrate else None,
        calibrate_limit=calibrate_limit or DEFAULT_CALIBRATION_LIMIT,
        keep_fp32=tuple(keep_fp32) if keep_fp32 else None,
        sensitivity=sensitivity,
        strict=strict,
    )


def _length_range(
    recipe: Recipe[object], seconds: float | None, min_seconds: float | None, max_seconds: float | None
) -> LengthRange | None:
    """The input lengths asked for, a bound not given taken from the recipe's default range; None: that range."""
    from audiodeploy.recipes.spec import LengthRange

    if seconds is not None:
        return LengthRange.fixed(seconds)
    if min_seconds is None and max_seconds is None:
        return None
    default = recipe.default_length_range
    return LengthRange(
        default.min_seconds if min_seconds is None else min_seconds,
        default.max_seconds if max_seconds is None else max_seconds,
    )


def _default_program_name(recipe: Recipe[object], variant: str) -> str:
    return recipe.name if variant == recipe.default_variant else f"{recipe.name}-{variant}"


def _checkpoint_name(weights: str | None) -> str | None:
    """The name of a local checkpoint directory, which a program exported from it is named after."""
    if weights is None:
        return None
    path = Path(weights).expanduser()
    return path.resolve().name if path.is_dir() else None


def _scheme_suffix(scheme: str | None) -> str:
    return "" if scheme is None else f"-{scheme}"  # beside the fp32 program, not over it


def _build(request: _ExportRequest) -> BuiltModel:
    with _step(f"building {request.recipe.name} {request.variant}"):
        built = request.recipe.build(
            variant=request.variant, source=request.source, weights=request.weights, length_range=request.length_range
        )
    err.print(f"weights: {built.weights_provenance}", markup=False)
    for note in built.notes:
        err.print(f"note: {note}", markup=False)
    return built


def _calibration(request: _ExportRequest, built: BuiltModel) -> list[tuple[torch.Tensor, ...]] | None:
    """The inputs int8-static calibrates on, read from the --calibrate audio; None: generated signals (int8-static
    says so), or none at all (fp32, int8-dynamic)."""
    from audiodeploy.recipes.calibration import calibration_set

    int8 = request.int8
    if int8 is None:
        return None
    if int8.calibration_files is not None:
        with _step("reading calibration audio"):
            chosen = calibration_set(
                built, int8.calibration_files, limit=int8.calibrate_limit, progress=_ProgressLines().file
            )
        for note in chosen.notes:
            err.print(f"note: {note}", markup=False)
        return list(chosen.inputs)
    if int8.scheme == "int8-static":
        err.print(
            "note: no --calibrate: activation ranges come from generated signals; calibrate on audio the model "
            "will hear for better int8 accuracy",
            markup=False,
        )
    return None


def _lower(
    request: _ExportRequest, built: BuiltModel, calibration: list[tuple[torch.Tensor, ...]] | None
) -> LoweredProgram:
    import torch

    import audiodeploy
    from audiodeploy.lowering.quantize import SENSITIVITY_STAGE
    from audiodeploy.recipes.calibration import fidelity_measures

    int8 = request.int8
    with _step("lowering to ExecuTorch + XNNPACK (large models take minutes)"):
        quantization = None
        if int8 is not None:
            quantization = audiodeploy.Quantization(
                audiodeploy.QuantizationScheme(int8.scheme),
                calibration=calibration,
                keep_fp32=built.keep_fp32 if int8.keep_fp32 is None else int8.keep_fp32,
                sensitivity=int8.sensitivity,
                fidelity=fidelity_measures(built),
            )
        program: torch.nn.Module | dict[str, audiodeploy.Method] = built.module
        single = len(built.methods) == 1
        if not single:  # a codec's or a text-to-speech model's encode and decode methods in one program
            program = {name: audiodeploy.Method(*method) for name, method in built.methods.items()}
        return audiodeploy.lower(
            program,
            built.example_inputs if single else None,
            dynamic_shapes=built.dynamic_shapes if single else None,
            options=audiodeploy.LoweringOptions(
                fold=request.fold, quantization=quantization, dtype=torch.float16 if request.fp16 else torch.float32
            ),
            progress=_ProgressLines(announced=frozenset({SENSITIVITY_STAGE})),
        )


def _check_against_eager(request: _ExportRequest, lowered: LoweredProgram, built: BuiltModel) -> dict[str, float]:
    """Each method's largest difference from eager PyTorch on its example inputs; over the tolerance, an fp32
    program is refused (a codec's codes differ by whole indices: they must be equal)."""
    with _step("checking the program against eager PyTorch"):
        differences = _max_abs_diffs(lowered, built)
    worst = max(differences, key=differences.__getitem__)
    # int8 and fp16 are measured by their fidelity (in the report and the sidecar), not held to the fp32 tolerance.
    if request.int8 is None and not request.fp16 and differences[worst] > built.atol:
        where = "" if worst == "forward" else f"'s {worst} method"
        raise UserError(
            f"the lowered program{where} differs from eager PyTorch by {differences[worst]:.2e} (tolerance "
            f"{built.atol:.0e}); nothing was written: please report this with the command you ran"
        )
    return differences


def _apply_fidelity_floor(request: _ExportRequest, lowered: LoweredProgram) -> None:
    """An int8 program under its fidelity floor: refused with --strict, else written with the warnings, which go
    into its report as well as on stderr."""
    import dataclasses

    from audiodeploy.recipes.calibration import fidelity_warnings

    quantization = lowered.report.quantization
    warnings = fidelity_warnings(quantization) if quantization is not None else ()
    if warnings and request.int8 is not None and request.int8.strict:
        raise UserError(f"{warnings[0]}; nothing was written (--strict)")
    if quantization is not None and warnings:
        # In the sidecar too, so that `inspect` and whoever ships the file later see it.
        lowered.report = dataclasses.replace(
            lowered.report, quantization=dataclasses.replace(quantization, warnings=warnings)
        )
    for warning in warnings:
        err.print(f"warning: {warning}", markup=False)


def _print_export_summary(
    request: _ExportRequest, lowered: LoweredProgram, built: BuiltModel, differences: dict[str, float]
) -> None:
    out.print(lowered.report.describe(verbose=_output.verbose()), markup=False)
    tolerance = f"tolerance {built.atol:.0e}"
    if request.int8 is not None or request.fp16:
        tolerance = f"{request.int8.scheme if request.int8 else 'fp16'}; fp32 tolerance {built.atol:.0e} not applied"
    shown = ", ".join(f"{name} {value:.2e}" for name, value in differences.items())
    if list(differences) == ["forward"]:
        shown = f"{differences['forward']:.2e}"
    out.print(f"max abs diff vs eager: {shown} ({tolerance})")
    out.print(
        f"wrote {display(request.target)} ({lowered.report.pte_bytes / 2**20:.1f} MiB) and "
        f"{display(request.sidecar.name)}",
        markup=False,
    )
    if built.weights_provenance.startswith("synthetic"):
        out.print("[yellow]note: synthetic weights: the model's outputs are meaningless, its speed is real[/yellow]")


def _write_program(
    lowered: LoweredProgram, built: BuiltModel, differences: dict[str, float], target: Path, sidecar: Path
) -> None:
    """The .pte, its sidecar (and any .ptd) replaced together, or not at all."""
    from audiodeploy._files import atomic_write_files
    from audiodeploy.program.description import sidecar_content
    from audiodeploy.runtime.program import mark_verified

    description = built.describe(max_abs_diff_vs_eager=differences)
    files = {target: lowered.buffer}
    files.update({target.parent / f"{tag}.ptd": data for tag, data in lowered.external_data.items()})
    files[sidecar] = sidecar_content(target, lowered.buffer, description, lowered.report.to_dict())
    atomic_write_files(files)
    # This process made these bytes and ran them: later loads need not probe them in a child process.
    mark_verified(lowered.buffer)


def _max_abs_diffs(lowered: LoweredProgram, built: BuiltModel) -> dict[str, float]:
    """Each method's largest absolute difference from its eager module on its example inputs, over all its outputs."""
    import torch

    from audiodeploy.runtime import Program

    program = Program(lowered.buffer, origin="the lowered program", trusted=True)
    differences = {}
    for name, (module, example_inputs, _) in built.methods.items():
        with torch.no_grad():
            expected = module(*example_inputs)
        expected_outputs = expected if isinstance(expected, (tuple, list)) else (expected,)
        actual_outputs = program.run(example_inputs, name)
        # NaN compares as no difference in max(): it is an infinite one.
        differences[name] = max(
            float((actual - wanted).abs().nan_to_num(nan=math.inf).max())
            for actual, wanted in zip(actual_outputs, expected_outputs, strict=True)
        )
    return differences


_WINDOW_HELP = "Seconds of input per run of the program; default: the longest input it takes."
_OVERLAP_HELP = "Seconds shared by neighbouring windows; default: a fifth of a window."

# A transcript is text under any name, but not under these: they name audio or binary files, so a transcript there
# is a mistake (most likely the -o meant for a vocoder's wav).
_NOT_TEXT_SUFFIXES = frozenset(
    {
        ".wav",
        ".wave",
        ".flac",
        ".ogg",
        ".oga",
        ".opus",
        ".mp3",
        ".m4a",
        ".aac",
        ".aif",
        ".aiff",
        ".au",
        ".caf",
        ".npy",
        ".npz",
        ".pte",
    }
)


def _check_run_output_suffix(output: Path, writes: Literal["text", "wav", "npy", "npz"], what: str) -> None:
    """Refuse an -o whose extension names another kind of file than `run` writes: a vocoder writes a .wav, a
    feature extractor a .npy, a speech recognizer or classifier text (.txt or any name that is not audio). A device
    or pipe (/dev/stdout) has no extension to honour."""
    from audiodeploy._files import is_stream

    if is_stream(output):
        return
    suffix = output.suffix.lower()
    if writes != "text" and suffix != f".{writes}":
        raise UserError(
            f"-o {display(output)}: {what} writes a {writes} file; give -o a .{writes} name, e.g. "
            f"{display(output.with_suffix('.' + writes))}"
        )
    if writes == "text" and suffix in _NOT_TEXT_SUFFIXES:
        raise UserError(
            f"-o {display(output)}: {what} as text, not {suffix}; give -o a .txt name, e.g. "
            f"{display(output.with_suffix('.txt'))}"
        )


@dataclass(frozen=True)
class _RunRequest:
    """What `run` is to do, its output file found writable and not one of its inputs."""

    input: Path
    output: Path | None
    protected: list[tuple[Path, str]]
    window: float | None
    overlap: float | None


_TTS_OPTIONS = ("--text-file", "--seed", "--noise-scale", "--noise-scale-duration", "--speaking-rate", "--speaker")


@dataclass(frozen=True)
class _SpeechOptions:
    """What `run` takes for a text-to-speech program only."""

    text_file: Path | None
    seed: int
    noise_scale: float | None
    noise_scale_duration: float | None
    speaking_rate: float | None
    speaker: int | None

    @property
    def given(self) -> bool:
        values = (self.text_file, self.noise_scale, self.noise_scale_duration, self.speaking_rate, self.speaker)
        return self.seed != 0 or any(value is not None for value in values)


@app.command()
def run(
    model: Annotated[Path, typer.Argument(help="The .pte written by `audiodeploy export` (its .json beside it).")],
    input: Annotated[
        str | None,
        typer.Argument(
            help="Audio (wav, flac, ogg, ...); for a vocoder also a mel .npy, for a codec also codes .npy; for text "
            "to speech, the text to speak.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Transcript or labels (text), vocoded, decoded or spoken .wav, features or codes .npy.",
        ),
    ] = None,
    window: Annotated[float | None, typer.Option(help=_WINDOW_HELP)] = None,
    overlap: Annotated[float | None, typer.Option(help=_OVERLAP_HELP)] = None,
    text_file: Annotated[
        Path | None, typer.Option("--text-file", help="Text to speech: the text to speak, from a UTF-8 file.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Text to speech: the seed of the noise (0 .. 4294967295).")] = 0,
    noise_scale: Annotated[
        float | None, typer.Option(help="Text to speech: the latents' noise; default: the voice's (0.667 in MMS).")
    ] = None,
    noise_scale_duration: Annotated[
        float | None, typer.Option(help="Text to speech: the durations' noise; default: the voice's (0.8 in MMS).")
    ] = None,
    speaking_rate: Annotated[
        float | None, typer.Option(help="Text to speech: the speed; 1.25 speaks a quarter faster.")
    ] = None,
    speaker: Annotated[
        int | None, typer.Option(help="Text to speech: which speaker of a voice of several (from 0; `inspect` says).")
    ] = None,
) -> None:
    """Run a .pte on input of any length: a transcript for speech recognizers, the top labels for classifiers,
    a .wav for vocoders, a .npy for feature extractors; a codec encodes audio to codes (.npy; a .npz with a scale
    per chunk for one that runs on its own chunks) and decodes codes to a .wav; a text-to-speech program speaks
    text (or --text-file) into a .wav."""
    from audiodeploy.program.description import sidecar_path

    if (input is None) == (text_file is None):
        raise UserError(
            "give the input (audio, a .npy, or for text to speech the text) or --text-file, one of them"
            if input is None
            else "give the text or --text-file, not both"
        )
    source = text_file if text_file is not None else Path(str(input))
    protected = [(model, "the program"), (sidecar_path(model), "the program's sidecar")]
    if _names_a_file(source):  # not text to speak
        protected.append((source, "the input"))
    if output is not None:  # without -o text is printed, and a wav or npy is named after the input
        refuse_overwrite(output, protected)
        check_writable(output)
    speech = _SpeechOptions(text_file, seed, noise_scale, noise_scale_duration, speaking_rate, speaker)
    if text_file is None:
        _check_input_file(model, source, speech)

    from audiodeploy.runtime import (
        AudioClassifier,
        ChunkedCodec,
        Codec,
        FeatureExtractor,
        SpeechRecognizer,
        Synthesizer,
        Vocoder,
        load,
    )

    loaded = load(model)
    if speech.given and not isinstance(loaded, Synthesizer):
        raise _not_for_this_program(model)
    if loaded.description is not None and loaded.description.weights.startswith("synthetic"):
        # Otherwise random text (or noise) looks like a broken model: say why before the output.
        synthetic = "note: the program has synthetic weights (exported without --weights): its output is meaningless"
        err.print(synthetic, markup=False)
    request = _RunRequest(source, output, protected, window, overlap)
    if isinstance(loaded, Synthesizer):  # before its base class, the vocoder
        _run_speak(loaded, request, input, speech)
    elif isinstance(loaded, Codec):  # before its base class, the waveform encoders'
        _run_codec(loaded, request)
    elif isinstance(loaded, ChunkedCodec):
        _run_chunked_codec(loaded, request)
    elif isinstance(loaded, SpeechRecognizer):
        _run_transcribe(loaded, request)
    elif isinstance(loaded, AudioClassifier):
        _run_classify(loaded, request)
    elif isinstance(loaded, FeatureExtractor):
        _run_features(loaded, request)
    elif isinstance(loaded, Vocoder):
        _run_vocode(loaded, request)
    else:
        raise UserError(
            f"{display(sidecar_path(model))}: no sidecar beside {display(model.name)}; `run` needs it to know what "
            "the program expects: export it with `audiodeploy export`, which writes both"
        )


def _not_for_this_program(model: Path) -> UserError:
    return UserError(f"{', '.join(_TTS_OPTIONS)} are for text-to-speech programs; {display(model)} is not one")


def _check_input_file(model: Path, source: Path, speech: _SpeechOptions) -> None:
    """Refuse an input file that cannot be read before the runtime and torch are imported, as the runtime would
    refuse it (the same checks): audio (no such file, a directory, a pipe, not audio, a header that lies), a
    vocoder's mel or a codec's codes .npy (no such file, not a regular file, not a numeric .npy). A mistake costs a
    third of a second, not two. Left to the runtime: a program whose sidecar does not read (its own error), text to
    speak, and what only the program's shapes can judge (a mel's bins, codes past the codebook)."""
    from audiodeploy.program.audio import AudioFile, load_npy
    from audiodeploy.program.description import read_sidecar

    try:
        description = read_sidecar(model).description
    except AudiodeployError:
        return
    if description.task == "tts":
        if _names_a_file(source) and source.is_file():  # "." or a folder's name is text
            raise UserError(
                f"{display(source)} names a file, and a text-to-speech program speaks the text it is given: give the "
                f"words themselves, or --text-file {display(source)} to speak what a text file says"
            )
        return
    if speech.given:  # the first mistake, as the runtime's order has it
        raise _not_for_this_program(model)
    if description.decoder is not None and description.decoder.chunks is not None:
        from audiodeploy.program.codes import CHUNKED_CODES_SUFFIX, ChunkedCodes

        if source.suffix.lower() == ".npy":
            raise _codes_npy_for_chunked_codec(source)
        if source.suffix.lower() == CHUNKED_CODES_SUFFIX:
            ChunkedCodes.load(source).check(description.decoder, display(source))
            return
    if source.suffix.lower() != ".npy":
        with AudioFile(source, description.sample_rate, description.input.channels):
            return
    if description.task == "vocoder":
        load_npy(source, "mel")
    elif description.task == "codec":
        load_npy(source, "codes", "int64")


def _names_a_file(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a text to speak longer than a file name can be
        return False


def _run_speak(loaded: Synthesizer, request: _RunRequest, text: str | None, speech: _SpeechOptions) -> None:
    """The text (or --text-file) spoken into a .wav, sentence by sentence: -o, the text file's name with .wav, or
    speech.wav."""
    from audiodeploy.runtime import Voice

    if speech.text_file is not None:
        text = _read_text_file(speech.text_file)
        target = _named_output(request, "wav", ".wav", "a text-to-speech program")
    else:
        target = _named_output(replace(request, input=Path("speech")), "wav", ".wav", "text to speech")
    assert text is not None  # one of the text and --text-file, checked in run
    voice = Voice(speech.seed, speech.noise_scale, speech.noise_scale_duration, speech.speaking_rate, speech.speaker)
    _print_written(
        loaded.synthesize_to_file(
            text, target, voice, window_seconds=request.window, overlap_seconds=request.overlap, progress=True
        )
    )


def _read_text_file(path: Path) -> str:
    shown, remedy = f"--text-file {display(path)}", "give a UTF-8 text file"
    try:
        return read_user_file(path, shown, "text file", remedy, UserError).decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{shown}: not UTF-8 text; save it as UTF-8") from None


def _run_transcribe(loaded: SpeechRecognizer, request: _RunRequest) -> None:
    if request.output is not None:
        _check_run_output_suffix(request.output, "text", "a speech recognizer writes its transcript")
    transcript = loaded.transcribe(
        request.input, window_seconds=request.window, overlap_seconds=request.overlap, progress=True
    )
    if request.output is not None:
        atomic_write_text(request.output, transcript.text + "\n")
    out.print(transcript.text, markup=False)


_TOP_LABELS = 5


def _run_classify(loaded: AudioClassifier, request: _RunRequest) -> None:
    """The most probable labels with their probabilities; for a frame classifier, each stretch of one best label."""
    if request.output is not None:
        _check_run_output_suffix(request.output, "text", "a classifier writes its labels")
    result = loaded.classify(
        request.input, window_seconds=request.window, overlap_seconds=request.overlap, progress=True
    )
    if result.frame_seconds is None:
        top = result.top(_TOP_LABELS)
        width = max(len(label) for label, _ in top)
        lines = [f"{label:<{width}}  {score:.3f}" for label, score in top]
    else:
        segments = result.segments()
        width = max(len(segment.label) for segment in segments)
        lines = [
            f"{segment.start_seconds:7.2f}-{segment.end_seconds:.2f} s  {segment.label:<{width}}  {segment.score:.3f}"
            for segment in segments
        ]
    text = "\n".join(lines)
    if request.output is not None:
        atomic_write_text(request.output, text + "\n")
    out.print(text, markup=False)


def _run_features(loaded: FeatureExtractor, request: _RunRequest) -> None:
    """The features as a .npy: `(frames, features)` hidden states, or one `(features,)` embedding."""
    target = _named_output(request, "npy", ".features.npy", "a feature extractor")
    features = loaded.features(
        request.input, window_seconds=request.window, overlap_seconds=request.overlap, progress=True
    )
    _write_npy(target, features)
    what = "hidden states" if features.ndim == 2 else "embedding"
    out.print(f"wrote {display(target)}: {what} of shape {tuple(features.shape)}, float32", markup=False)


def _run_vocode(loaded: Vocoder, request: _RunRequest) -> None:
    target = _named_output(request, "wav", ".vocoded.wav", "a vocoder")
    _print_written(
        loaded.vocode_to_file(
            request.input, target, window_seconds=request.window, overlap_seconds=request.overlap, progress=True
        )
    )


def _run_codec(loaded: Codec, request: _RunRequest) -> None:
    """Codes (a .npy) decode to a .wav; audio encodes to codes, a `(codebooks, frames)` int64 .npy."""
    if request.input.suffix.lower() == ".npy":
        target = _named_output(request, "wav", ".decoded.wav", "a codec decoding codes")
        _print_written(
            loaded.decode_to_file(
                request.input, target, window_seconds=request.window, overlap_seconds=request.overlap, progress=True
            )
        )
        return
    target = _named_output(request, "npy", ".codes.npy", "a codec encoding audio")
    codes = loaded.encode(request.input, window_seconds=request.window, overlap_seconds=request.overlap, progress=True)
    _write_npy(target, codes)
    out.print(f"wrote {display(target)}: codes of shape {tuple(codes.shape)} (codebooks, frames), int64", markup=False)


def _run_chunked_codec(loaded: ChunkedCodec, request: _RunRequest) -> None:
    """Codes (the .npz its encode writes: codes and a scale per chunk) decode to a .wav; audio encodes to them."""
    if request.window is not None or request.overlap is not None:
        raise UserError(
            "--window and --overlap cut the input into windows; this codec runs on its model's own chunks "
            f"({loaded.chunk_samples / loaded.sample_rate:g} s): leave them out"
        )
    from audiodeploy.program.codes import CHUNKED_CODES_SUFFIX

    suffix = request.input.suffix.lower()
    if suffix == ".npy":
        raise _codes_npy_for_chunked_codec(request.input)
    if suffix == CHUNKED_CODES_SUFFIX:
        target = _named_output(request, "wav", ".decoded.wav", "a codec decoding codes")
        _print_written(loaded.decode_to_file(request.input, target, progress=True))
        return
    target = _named_output(request, "npz", ".codes.npz", "a codec encoding audio (codes and a scale per chunk)")
    codes = loaded.encode(request.input, progress=True)
    codes.save(target)
    out.print(
        f"wrote {display(target)}: codes of shape {tuple(codes.codes.shape)} (chunks, codebooks, frames), int64"
        + (", and a scale per chunk" if codes.scales is not None else ""),
        markup=False,
    )


def _codes_npy_for_chunked_codec(source: Path) -> UserError:
    return UserError(
        f"{display(source)}: this codec's codes are a .npz (codes and a scale per chunk), as its encode writes them "
        "(`audiodeploy run MODEL.pte audio.wav -o codes.npz`); give that .npz"
    )


def _print_written(written: WrittenAudio) -> None:
    if written.clipping_warning is not None:
        err.print(f"warning: {written.clipping_warning}", markup=False)
    out.print(
        f"wrote {display(written.path)}: {written.samples} samples, {written.seconds:.2f} s at {written.sample_rate} Hz",
        markup=False,
    )


def _write_npy(target: Path, array: np.ndarray) -> None:
    """`array` as a .npy at `target`, written whole or not at all."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    atomic_write_bytes(target, buffer.getvalue())


def _named_output(request: _RunRequest, writes: Literal["wav", "npy", "npz"], suffix: str, what: str) -> Path:
    """The -o file, its extension checked; without -o, a file named after the input, checked as -o is."""
    if request.output is not None:
        _check_run_output_suffix(request.output, writes, what)
        return request.output
    target = request.input.with_name(f"{request.input.stem}{suffix}")
    refuse_overwrite(target, request.protected)
    check_writable(target)
    return target


@app.command()
def inspect(
    model: Annotated[Path, typer.Argument(help="A .pte file.")],
    load: Annotated[
        bool,
        typer.Option(
            "--load", help="Also load the program and every method in ExecuTorch's runtime (seconds for large models)."
        ),
    ] = False,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Also run `forward` on random input and show where the time goes: per XNNPACK operator kind and per "
            "layer, with the GEMMs' GFLOP/s (loads the program).",
        ),
    ] = False,
    seconds: Annotated[
        list[float] | None,
        typer.Option(help="With --profile: audio duration to profile at; repeat for several. Default: 1 s."),
    ] = None,
    runs: Annotated[int, typer.Option(help="With --profile: profiled runs, after one warm-up run.")] = 5,
) -> None:
    """Methods, delegates, ops outside delegates and size of a .pte, and its sidecar's summary.

    Reads the program's header and flatbuffer and its sidecar; only `--load` and `--profile` give it to the runtime.
    """
    if not profile and (seconds or runs != 5):
        raise UserError("--seconds and --runs say how to profile: give --profile too")
    buffer, program = _load_program(model) if load or profile else (_read_program(model), None)
    _print_methods(model, buffer, program)
    _print_sidecar_summary(model, buffer, program)
    if profile:
        _print_profile(model, tuple(seconds) if seconds else None, runs)


def _print_profile(model: Path, seconds: tuple[float, ...] | None, runs: int) -> None:
    """The program profiled at each length as `audiodeploy bench PTE --profile` does it, the profiles alone shown."""
    from audiodeploy.bench import BenchRequest, measure_bench
    from audiodeploy.runtime.profile import format_profile

    request = BenchRequest(target=str(model), seconds=seconds, runs=runs, warmup=1, profile=True)
    record = measure_bench(request, log=_log_with_elapsed_time())
    for case in record.cases:
        at = f" at {case.audio_seconds:g} s" if case.audio_seconds else ""
        for figures in case.runtimes.values():
            if figures.profile is not None:
                out.print(format_profile(figures.profile, f"{display(model)}{at}"), markup=False)


def _load_program(model: Path) -> tuple[bytes, Program]:
    from audiodeploy.runtime import Program

    program = Program.load(model)  # verified, probed in a child process, then loaded here
    return program.buffer, program


def _read_program(model: Path) -> bytes:
    """The program's bytes, read without the runtime; a file that is not a program is refused as a load would."""
    from audiodeploy.runtime.pte_check import GIVE_PTE, check_program_bytes

    shown = display(model)
    buffer = read_user_file(model, shown, "program", GIVE_PTE, UserError)
    # The flatbuffer is parsed next, by the inspection: its layout is checked first, as before a load.
    check_program_bytes(buffer, shown)
    return buffer


def _print_methods(model: Path, buffer: bytes, program: Program | None) -> None:
    from audiodeploy.runtime.inspection import ProgramFormatError, describe_program

    try:
        methods = describe_program(buffer)
    except ProgramFormatError as error:
        raise UserError(f"{display(model)}: {error}") from None
    out.print(f"{display(model)}: {len(buffer) / 2**20:.2f} MiB", markup=False)
    for method in methods:
        outside = ", ".join(f"{op} x{n}" for op, n in method.kernels.items()) or "none"
        out.print(
            f"method {method.name}: {method.delegates} delegate call(s) {method.backends}; kernels outside: {outside}",
            markup=False,
        )
    if program is not None:
        out.print(f"loaded in ExecuTorch's runtime: {', '.join(program.method_names)}", markup=False)


def _print_sidecar_summary(model: Path, buffer: bytes, program: Program | None) -> None:
    """What the sidecar says of the model, once it is found to describe these bytes (and with --load, the loaded
    method's inputs and outputs); a line saying there is none when it is missing."""
    from audiodeploy.program.description import program_digest, read_sidecar, sidecar_path

    shown = display(model)
    if not sidecar_path(model).exists():
        out.print(f"no sidecar: {display(sidecar_path(model))} does not exist", markup=False)
        return
    sidecar = read_sidecar(model)
    sidecar.check_digest(program.sha256 if program is not None else program_digest(buffer), shown)
    described = sidecar.description
    if program is not None:
        described.check_program(program, shown)
    low, high = described.length_range_seconds
    out.print(
        f"model: {described.recipe} {described.variant} from {described.source}; {described.sample_rate} Hz; "
        f"input {described.input.kind} {low:g}-{high:g} s",
        markup=False,
    )
    out.print(f"weights: {described.weights}", markup=False)
    if described.task not in ("ctc-asr", "vocoder"):  # those two are said by the recipe's name
        labels = described.labels
        named = f", {len(labels)} labels: {', '.join(labels)}" if labels is not None else ""
        if described.decoder is not None:
            decoder = described.decoder
            named = (
                f": encode gives {decoder.codebooks} codebooks of {decoder.codebook_size} entries, a frame every "
                f"{decoder.input.samples_per_step} samples; decode gives the waveform back"
            )
            if decoder.chunks is not None:
                rate = described.sample_rate
                channels = "stereo " if described.input.channels == 2 else ""
                scale = " and its scale" if decoder.chunks.scaled else ""
                named += (
                    f"; {channels}chunks of {described.input.max_length / rate:g} s every "
                    f"{decoder.chunks.stride / rate:g} s, each chunk's codes{scale} in a .npz"
                )
            if described.carried is not None and decoder.carried is not None:
                named += (
                    f"; windows carry the model's state to the next, overlapping by {described.carried.lead} frames "
                    f"(encode) and {decoder.carried.lead} (decode)"
                )
        if described.text is not None:
            text = described.text
            named = (
                f": encode takes {text.min_tokens}-{text.max_tokens} tokens of one sentence ({len(text.front_end.characters)}"
                f"-token vocabulary, {text.front_end.origin}) and gives the prior and durations; decode speaks "
                f"{described.input.samples_per_step} samples per frame of latents"
                + (f"; {text.speakers} speakers (--speaker 0 to {text.speakers - 1})" if text.speakers > 1 else "")
            )
        out.print(f"task: {described.task}{named}", markup=False)
    out.print(_lowering_report(model, sidecar).describe(verbose=_output.verbose()), markup=False)
    out.print("versions: " + ", ".join(f"{k} {v}" for k, v in sidecar.versions.items()), markup=False)


def _lowering_report(model: Path, sidecar: Sidecar) -> LoweringReport:
    from audiodeploy.program.description import sidecar_path
    from audiodeploy.program.report import LoweringReport

    try:
        return LoweringReport.from_dict(dict(sidecar.lowering))
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(
            f"{display(sidecar_path(model))}: its lowering report is malformed ({error}); export the model again"
        ) from None


@app.command(
    help="Latency of a recipe or .pte: load time, median/p90/min, real-time factor, memory, delegates; with\n"
    "--compare, side by side with stock ExecuTorch, eager PyTorch and ONNX Runtime, interleaved in one run.\n"
    "pos-conv: delegates, ops on portable kernels, latency and max abs diff of stock and folded lowering."
)
def bench(
    target: Annotated[
        str,
        typer.Argument(
            help="A recipe name (see `audiodeploy list`), a .pte file, or pos-conv (wav2vec2's weight-normed positional "
            "convolution, stock against folded lowering)."
        ),
    ],
    variant: Annotated[str | None, typer.Option(help="Recipe variant; default: the recipe's first.")] = None,
    source: Annotated[str | None, typer.Option(help="Library to build the recipe from.")] = None,
    weights: Annotated[str | None, typer.Option(help="Weights for the recipe; default: synthetic.")] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="A codec's encode or decode (the codes eager encode gives for the audio), a text-to-speech "
            "program's decode: the method measured, lowered alone. Default: the one that takes the recipe's input."
        ),
    ] = None,
    seconds: Annotated[
        list[float] | None,
        typer.Option(help="Audio duration to measure at; repeat for several lengths. Default: 1 s."),
    ] = None,
    min_seconds: Annotated[
        float | None,
        typer.Option(
            help="Shortest input a recipe's program takes, as export's (equal to --max-seconds: one fixed length). "
            "Default: the recipe's, or the shortest --seconds."
        ),
    ] = None,
    max_seconds: Annotated[
        float | None,
        typer.Option(help="Longest input a recipe's program takes. Default: the recipe's, or the longest --seconds."),
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            help="Also measure, in the same run: stock,eager,onnxruntime,audiodeploy-fp16,audiodeploy-int8,onnxruntime-int8 (any of them)."
        ),
    ] = None,
    runs: Annotated[int, typer.Option(help="Timed runs of each runtime (stock: --stock-runs).")] = 10,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up runs before timing.")] = 2,
    stock_runs: Annotated[int, typer.Option(help="Timed runs of stock lowering (often 100x slower).")] = 3,
    stock_warmup: Annotated[int, typer.Option(help="Warm-up runs of stock lowering.")] = 1,
    threads: Annotated[
        int | None,
        typer.Option(help="Threads for every runtime, at most 4 per CPU; default: ExecuTorch's (performant cores)."),
    ] = None,
    device: Annotated[
        str,
        typer.Option(
            help="local (this process), native (this process and the C++ runner side by side), qemu-aarch64 (the "
            "arm64 runner emulated here), adb or adb:SERIAL (an Android phone), or ssh:[USER@]HOST[:PORT] (an arm64 "
            "Linux board)."
        ),
    ] = "local",
    runner: Annotated[
        Path | None,
        typer.Option(
            help="With --device adb: ExecuTorch's executor_runner built with the NDK, pushed instead of the "
            "project's arm64 bundle (the default)."
        ),
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG chart of the latencies here.")] = None,
    name: Annotated[str | None, typer.Option(help="Name of the result (models.md); default recipe-variant.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of synthetic weights and inputs.")] = 0,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Also show where the time goes in each ExecuTorch program and ONNX Runtime session: per operator kind "
            "and per layer, with the GEMMs' GFLOP/s against this machine's sgemm (profiled runs after the timed ones).",
        ),
    ] = False,
    channels: Annotated[int | None, typer.Option(help="pos-conv only: channels in and out; default 768.")] = None,
    kernel: Annotated[int | None, typer.Option(help="pos-conv only: kernel size, padded by half; default 128.")] = None,
    groups: Annotated[int | None, typer.Option(help="pos-conv only: convolution groups; default 16.")] = None,
    length: Annotated[int | None, typer.Option(help="pos-conv only: input frames; default 49 (1 s).")] = None,
) -> None:
    """`audiodeploy bench`. Long for its option declarations alone, which typer reads from the signature (the help
    is the decorator's); the body turns them into a `BenchRequest` and measures it."""
    import shlex

    from audiodeploy.bench.request import BenchRequest, PosConvShape, check, parse_compare
    from audiodeploy.bench.timing import restart_with_passive_openmp_threads

    _check_bench_outputs(target, json_path, plot)

    request = BenchRequest(
        target=target,
        variant=variant,
        source=source,
        weights=weights,
        method=method,
        seconds=tuple(seconds) if seconds else None,
        min_seconds=min_seconds,
        max_seconds=max_seconds,
        compare=parse_compare(compare),
        runs=runs,
        warmup=warmup,
        stock_runs=stock_runs,
        stock_warmup=stock_warmup,
        threads=threads,
        device=device,
        runner=runner,
        pos_conv=PosConvShape.from_options(channels, kernel, groups, length),
        seed=seed,
        profile=profile,
        name=name,
        command=shlex.join(["audiodeploy", *sys.argv[1:]]),
    )
    check(request)  # without torch, so before the restart: a mistake costs no second process
    # before `bench` imports torch: the policy is read when it loads
    restart_with_passive_openmp_threads(["-m", "audiodeploy", *sys.argv[1:]])
    _measure_and_write(request, json_path, plot)


def _check_bench_outputs(target: str, json_path: Path | None, plot: Path | None) -> None:
    """Refuse, before any work, a --json or --plot that cannot be written or would overwrite the program measured or
    the other output."""
    outputs = [(path, option) for path, option in ((json_path, "--json"), (plot, "--plot")) if path is not None]
    for path, option in outputs:
        protected = [(Path(target), "the program being measured")] + [(p, o) for p, o in outputs if o != option]
        refuse_overwrite(path, protected, option)
        check_writable(path, option)


def _measure_and_write(request: BenchRequest, json_path: Path | None, plot: Path | None) -> None:
    """Measure as `request` says, print the table, and write --json and --plot. The chart is drawn before anything
    is written, and matplotlib is looked for before anything is measured."""
    from audiodeploy.bench import format_table, run_bench, write_json
    from audiodeploy.bench.plot import render_png, require_matplotlib, write_png

    if plot is not None:
        require_matplotlib()
    record = run_bench(request, log=_log_with_elapsed_time())
    png = render_png(record) if plot is not None else None
    out.print(format_table(record), markup=False)
    if json_path is not None:
        write_json(json_path, record)
        out.print(f"wrote {display(json_path)}", markup=False)
    if plot is not None and png is not None:
        write_png(plot, png)
        out.print(f"wrote {display(plot)}", markup=False)


def _log_with_elapsed_time() -> Callable[[str], None]:
    """The bench's log: a line on stderr per message, after the seconds since the log was made."""
    start = time.monotonic()

    def log(message: str) -> None:
        err.print(f"[{time.monotonic() - start:7.1f} s] {message}", markup=False)

    return log


def _raise_interrupted(signal_number: int, frame: Any) -> None:
    raise Interrupted(signal_number)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _os_error_line(error: OSError) -> str:
    where = f"{display(error.filename)}: " if error.filename is not None else ""
    return f"{where}{error.strerror or _one_line(error)}"


def main(argv: list[str] | None = None) -> None:
    """The console entry point: run the command, and turn every way it can end into an exit status and at most
    one line on stderr."""
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, _raise_interrupted)
    try:
        try:
            code = app(args=argv, prog_name="audiodeploy", standalone_mode=False)
        except typer.exceptions.TyperException as usage:
            if isinstance(usage, (typer.Abort, typer.Exit)) or not hasattr(usage, "show"):
                raise
            usage.show()  # click's usage message: the command's usage line and one line saying what is wrong
            sys.exit(getattr(usage, "exit_code", 2))
    except AudiodeployError as error:
        err.print(f"error: {_one_line(error)}", markup=False)
        sys.exit(error.exit_status)
    except Interrupted as stop:
        what = (
            "interrupted"
            if stop.signal_number == signal.SIGINT
            else f"stopped by {signal.Signals(stop.signal_number).name}"
        )
        err.print(f"{what}: the files you had are as they were", markup=False)
        sys.exit(128 + stop.signal_number)
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted: the files you had are as they were", markup=False)
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except OSError as error:
        err.print(f"error: {_os_error_line(error)}", markup=False)
        sys.exit(1)
    except MemoryError:
        err.print("error: out of memory; try a shorter --window or a smaller model", markup=False)
        sys.exit(1)
    except Exception as error:
        if _output.verbose():
            raise
        err.print(
            f"internal error: {type(error).__name__}: {_one_line(error)} (run with -v for the traceback, and please "
            "report it)",
            markup=False,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

"""The ``audiodeploy`` command: list, export, run, inspect, bench.

Thin glue over the public Python API (``audiodeploy.recipes``, ``audiodeploy.lower``,
``audiodeploy.runtime``). A user mistake prints one line that names the problem and
what to do, exits non-zero, and leaves no partial file behind.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.console import Console

app = typer.Typer(
    name="audiodeploy",
    help="Take speech and audio models from PyTorch to phones (ExecuTorch + XNNPACK).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


class UserError(Exception):
    """A mistake in what the user asked for: the message is shown as is."""


def _user_errors() -> tuple[type[BaseException], ...]:
    from audiodeploy.bench.errors import BenchError
    from audiodeploy.recipes.errors import RecipeError
    from audiodeploy.runtime import ProgramLoadError
    from audiodeploy.runtime.audio import AudioInputError
    from audiodeploy.runtime.sidecar import SidecarError

    return (UserError, RecipeError, ProgramLoadError, AudioInputError, SidecarError, BenchError)


@contextlib.contextmanager
def _step(message: str) -> Iterator[None]:
    """A spinner with the elapsed time for a step that may take a while, then its duration."""
    start = time.monotonic()
    with err.status(f"{message}..."):
        yield
    err.print(f"{message}: done in {time.monotonic() - start:.1f} s")


def _writable_target(path: Path) -> Path:
    if path.exists() and path.is_dir():
        raise UserError(f"{path} is a directory; give a file name for the output, e.g. {path / 'model.pte'}")
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: directory {path.parent} does not exist; create it or choose another -o")
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"cannot write {path}: directory {path.parent} is not writable; choose another -o")
    return path


@app.command("list")
def list_recipes() -> None:
    """List the recipes, their variants and sources."""
    from audiodeploy import recipes

    for name in recipes.available():
        recipe = recipes.get(name)
        info = recipe.describe()
        variants = ", ".join(
            f"{v['name']}{' (default)' if v['name'] == info['default_variant'] else ''}" for v in info["variants"]
        )
        out.print(f"[bold]{name}[/bold]: {info['description']}")
        out.print(f"  variants: {variants}")
        out.print(f"  sources: {', '.join(info['sources'])}; {info['sample_rate']} Hz; input: {info['input']}")


@app.command()
def export(
    recipe: Annotated[str, typer.Argument(help="Recipe name, see `audiodeploy list`.")],
    variant: Annotated[Optional[str], typer.Option(help="Variant; default: the recipe's first.")] = None,
    source: Annotated[Optional[str], typer.Option(help="Library to build from; default: the recipe's first.")] = None,
    weights: Annotated[
        Optional[str],
        typer.Option(help="Local directory (from_pretrained), hub id, or torchaudio state dict; default: synthetic."),
    ] = None,
    seconds: Annotated[Optional[float], typer.Option(help="Export one fixed input length, in seconds.")] = None,
    min_seconds: Annotated[Optional[float], typer.Option(help="Shortest input the program accepts.")] = None,
    max_seconds: Annotated[Optional[float], typer.Option(help="Longest input the program accepts.")] = None,
    no_fold: Annotated[bool, typer.Option("--no-fold", help="Stock ExecuTorch lowering, for comparison.")] = False,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Where to write the .pte.")] = None,
) -> None:
    """Build a recipe's model, lower it to XNNPACK and write a .pte with a JSON sidecar."""
    from audiodeploy import recipes
    from audiodeploy.recipes.spec import LengthRange

    if seconds is not None and (min_seconds is not None or max_seconds is not None):
        raise UserError("give either --seconds or --min-seconds/--max-seconds, not both")
    recipe_ = recipes.get(recipe)
    chosen_variant = recipe_.variant(variant).name
    length_range = None
    if seconds is not None:
        length_range = LengthRange.fixed(seconds)
    elif min_seconds is not None or max_seconds is not None:
        default = recipe_.default_length_range
        length_range = LengthRange(
            default.min_seconds if min_seconds is None else min_seconds,
            default.max_seconds if max_seconds is None else max_seconds,
        )
    default_name = recipe if chosen_variant == recipe_.default_variant else f"{recipe}-{chosen_variant}"
    target = _writable_target(output or Path(f"{default_name}.pte"))

    with _step(f"building {recipe} {chosen_variant}"):
        built = recipe_.build(variant=chosen_variant, source=source, weights=weights, length_range=length_range)
    err.print(f"weights: {built.weights_provenance}")
    import audiodeploy

    with _step("lowering to ExecuTorch + XNNPACK (large models take minutes)"):
        lowered = audiodeploy.lower(
            built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes, fold=not no_fold
        )
    with _step("checking the program against eager PyTorch"):
        max_abs_diff = _max_abs_diff(lowered, built)
    if max_abs_diff > built.atol:
        raise UserError(
            f"the lowered program differs from eager PyTorch by {max_abs_diff:.2e} (tolerance {built.atol:.0e}); "
            "nothing was written: please report this with the command you ran"
        )
    from audiodeploy.runtime.sidecar import write_sidecar

    model = built.describe()
    model["max_abs_diff_vs_eager"] = max_abs_diff
    try:
        lowered.save(target)
        write_sidecar(target, model, lowered.report.to_dict())
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    out.print(str(lowered.report))
    out.print(f"max abs diff vs eager: {max_abs_diff:.2e} (tolerance {built.atol:.0e})")
    out.print(f"wrote {target} ({lowered.report.pte_bytes / 2**20:.1f} MiB) and {target.with_suffix('.json').name}")
    if built.weights_provenance.startswith("synthetic"):
        out.print("[yellow]note: synthetic weights: the model's outputs are meaningless, its speed is real[/yellow]")


def _max_abs_diff(lowered: Any, built: Any) -> float:
    import torch

    from audiodeploy.runtime import Program

    program = Program(lowered.buffer)
    with torch.no_grad():
        expected = built.module(*built.example_inputs)
    actual = program.run(built.example_inputs)[0]
    return float((actual - expected).abs().max())


@app.command()
def run(
    model: Annotated[Path, typer.Argument(help="The .pte written by `audiodeploy export`.")],
    input: Annotated[Path, typer.Argument(help="Audio (wav, flac, ogg); for a vocoder also a mel spectrogram .npy.")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Transcript .txt or vocoded .wav.")] = None,
) -> None:
    """Run a .pte on real input: a transcript for speech recognizers, a .wav for vocoders."""
    from audiodeploy.runtime.sidecar import read_sidecar

    program = _load_program(model)
    description = read_sidecar(model)["model"]
    if output is not None:
        _writable_target(output)
    if description["output"]["kind"] == "ctc-logits":
        _run_asr(program, description, input, output)
    else:
        _run_vocoder(program, description, input, output)


def _load_program(path: Path):
    from audiodeploy.runtime import Program

    if not path.is_file():
        raise UserError(f"{path}: no such file; give the .pte written by `audiodeploy export`")
    return Program.load(path)


def _run_asr(program, description: dict, input: Path, output: Optional[Path]) -> None:
    import torch

    from audiodeploy._files import atomic_write_text
    from audiodeploy.recipes._ctc import CtcVocabulary
    from audiodeploy.recipes.spec import InputSpec
    from audiodeploy.runtime.audio import read_mono

    spec = InputSpec.from_dict(description["input"])
    waveform = read_mono(input, spec.sample_rate)
    padded = spec.padded_length(waveform.numel())
    batch = torch.nn.functional.pad(waveform, (0, padded - waveform.numel())).reshape(spec.shape(padded))
    logits = program.run((batch,))[0]
    text = CtcVocabulary.from_dict(description["vocabulary"]).decode(logits)
    if output is not None:
        atomic_write_text(output, text + "\n")
    out.print(text, markup=False, highlight=False)


def _run_vocoder(program, description: dict, input: Path, output: Optional[Path]) -> None:
    import torch

    from audiodeploy.recipes._audio import MelSpectrogram
    from audiodeploy.recipes.spec import InputSpec
    from audiodeploy.runtime.audio import read_mono, write_wav

    spec = InputSpec.from_dict(description["input"])
    if input.suffix == ".npy":
        mel = _read_mel(input, spec.feature_size)
    else:
        mel = MelSpectrogram.from_dict(description["mel"])(read_mono(input, spec.sample_rate))
    frames = mel.shape[1]
    padded = spec.padded_length(frames)
    batch = torch.nn.functional.pad(mel, (0, 0, 0, padded - frames))
    waveform = program.run((batch,))[0].reshape(-1)[: frames * spec.samples_per_step]
    target = output or input.with_name(f"{input.stem}.vocoded.wav")
    _writable_target(target)
    write_wav(target, waveform, spec.sample_rate)
    seconds = waveform.numel() / spec.sample_rate
    out.print(f"wrote {target}: {waveform.numel()} samples, {seconds:.2f} s at {spec.sample_rate} Hz")


def _read_mel(path: Path, mel_bins: int | None):
    import numpy as np
    import torch

    if not path.is_file():
        raise UserError(f"{path}: no such file; give a mel spectrogram .npy or an audio file")
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise UserError(f"{path}: not a readable .npy array ({error}); save the mel with numpy.save") from None
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2 or array.shape[1] != mel_bins or array.shape[0] == 0:
        raise UserError(
            f"{path}: mel spectrogram of shape {array.shape}; this vocoder takes (frames, {mel_bins}) "
            f"or (1, frames, {mel_bins})"
        )
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).unsqueeze(0)


@app.command()
def inspect(model: Annotated[Path, typer.Argument(help="A .pte file.")]) -> None:
    """Methods, delegates, ops outside delegates and size of a .pte, and its sidecar's summary."""
    from audiodeploy.runtime.inspection import describe_program
    from audiodeploy.runtime.sidecar import SidecarError, read_sidecar

    _load_program(model)  # verifies the program before parsing it
    summary = describe_program(model.read_bytes())
    out.print(f"{model}: {model.stat().st_size / 2**20:.2f} MiB")
    for method in summary:
        outside = ", ".join(f"{op} x{n}" for op, n in method.kernels.items()) or "none"
        out.print(f"method {method.name}: {method.delegates} delegate call(s) {method.backends}; kernels outside: {outside}")
    try:
        sidecar = read_sidecar(model)
    except SidecarError as error:
        out.print(f"no sidecar: {error}")
        return
    described = sidecar["model"]
    out.print(
        f"model: {described['recipe']} {described['variant']} from {described['source']}; "
        f"{described['sample_rate']} Hz; input {described['input']['kind']} "
        f"{described['length_range_seconds'][0]:g}-{described['length_range_seconds'][1]:g} s"
    )
    out.print(f"weights: {described['weights']}")
    from audiodeploy.lowering import LoweringReport

    out.print(str(LoweringReport.from_dict(sidecar["lowering"])))
    out.print("versions: " + ", ".join(f"{k} {v}" for k, v in sidecar["versions"].items()))


@app.command()
def bench(
    target: Annotated[str, typer.Argument(help="A recipe name (see `audiodeploy list`) or a .pte file.")],
    variant: Annotated[Optional[str], typer.Option(help="Recipe variant; default: the recipe's first.")] = None,
    source: Annotated[Optional[str], typer.Option(help="Library to build the recipe from.")] = None,
    weights: Annotated[Optional[str], typer.Option(help="Weights for the recipe; default: synthetic.")] = None,
    seconds: Annotated[
        Optional[list[float]],
        typer.Option(help="Audio duration to measure at; repeat for several lengths. Default: 1 s."),
    ] = None,
    compare: Annotated[
        Optional[str], typer.Option(help="Also measure, in the same run: stock,eager,onnxruntime (any of them).")
    ] = None,
    runs: Annotated[int, typer.Option(help="Timed runs of each runtime (stock: --stock-runs).")] = 10,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up runs before timing.")] = 2,
    stock_runs: Annotated[int, typer.Option(help="Timed runs of stock lowering (often 100x slower).")] = 3,
    stock_warmup: Annotated[int, typer.Option(help="Warm-up runs of stock lowering.")] = 1,
    threads: Annotated[
        Optional[int], typer.Option(help="Threads for every runtime; default: ExecuTorch's (performant cores).")
    ] = None,
    device: Annotated[str, typer.Option(help="local (this process), adb, or adb:SERIAL (an Android phone).")] = "local",
    runner: Annotated[
        Optional[Path], typer.Option(help="With --device adb: executor_runner built for arm64-v8a with XNNPACK.")
    ] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the results as JSON here.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a PNG chart of the latencies here.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Name of the result (models.md); default recipe-variant.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of synthetic weights and inputs.")] = 0,
) -> None:
    """Latency of a recipe or .pte: load time, median/p90/min, real-time factor, memory, delegates; with
    --compare, side by side with stock ExecuTorch, eager PyTorch and ONNX Runtime, interleaved in one run."""
    import shlex

    from audiodeploy.bench import BenchRequest, check, format_table, parse_compare, run_bench, write_json
    from audiodeploy.bench.plot import render_png, require_matplotlib, write_png

    request = BenchRequest(
        target=target,
        variant=variant,
        source=source,
        weights=weights,
        seconds=tuple(seconds) if seconds else None,
        compare=parse_compare(compare),
        runs=runs,
        warmup=warmup,
        stock_runs=stock_runs,
        stock_warmup=stock_warmup,
        threads=threads,
        device=device,
        runner=runner,
        seed=seed,
        name=name,
        command=shlex.join(["audiodeploy", *sys.argv[1:]]),
    )
    check(request)
    for path in (json_path, plot):
        if path is not None:
            _writable_target(path)
    if plot is not None:
        require_matplotlib()
    if "OMP_WAIT_POLICY" not in os.environ:
        # PyTorch's OpenMP threads spin between ops by default; on a machine where another process holds a
        # core that made eager PyTorch 40x slower here, and in an interleaved run a spinning pool takes the
        # CPU from the runtime timed next. The policy is read when torch loads, hence a fresh process.
        os.execve(
            sys.executable,
            [sys.executable, "-m", "audiodeploy", *sys.argv[1:]],
            {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
        )

    start = time.monotonic()

    def progress(message: str) -> None:
        err.print(f"[{time.monotonic() - start:7.1f} s] {message}", markup=False, highlight=False)

    record = run_bench(request, log=progress)
    png = render_png(record) if plot is not None else None  # before writing anything
    out.print(format_table(record), markup=False, highlight=False)
    if json_path is not None:
        write_json(json_path, record)
        out.print(f"wrote {json_path}")
    if plot is not None and png is not None:
        write_png(plot, png)
        out.print(f"wrote {plot}")


def main() -> None:
    errors = _user_errors()
    try:
        app(standalone_mode=False)
    except errors as error:
        err.print(f"error: {error}", markup=False, highlight=False)
        sys.exit(2)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except (typer.Exit, SystemExit) as done:
        code = getattr(done, "exit_code", getattr(done, "code", 0))
        sys.exit(code)
    except Exception as error:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(error.exit_code)
        raise


if __name__ == "__main__":
    main()

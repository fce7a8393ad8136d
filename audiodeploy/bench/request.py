"""What ``audiodeploy bench`` is asked to measure (:class:`BenchRequest`), and every mistake in it that can be found
before anything is built (:func:`check`).

Nothing here imports torch, so that a wrong option is refused in a fraction of a second, as ``export``'s are, rather
than after the seconds torch and ExecuTorch take to import (``runner`` measures, and imports them).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audiodeploy.bench.device import parse_device
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import POS_CONV

if TYPE_CHECKING:
    from audiodeploy.recipes.registry import Recipe
    from audiodeploy.recipes.spec import LengthRange

COMPARABLE = ("stock", "eager", "onnxruntime", "audiodeploy-fp16", "audiodeploy-int8", "onnxruntime-int8")
"""What ``--compare`` accepts, in the order results list them (after ``audiodeploy``)."""

BENCH_EXTRA_HINT = "pip install -e '.[bench]'"


def int8_scheme(int8_schemes: Sequence[str]) -> str:
    """What ``audiodeploy-int8`` lowers a recipe with: the first of its schemes (``Recipe.int8_schemes``), so
    int8-dynamic for the speech encoders and int8-static for the vocoders, which calibrates on generated signals
    here; int8-dynamic for a recipe that takes none (its check then refuses it)."""
    return int8_schemes[0] if int8_schemes else "int8-dynamic"


@dataclass(frozen=True)
class PosConvShape:
    """The convolution's size and the input length; the defaults are wav2vec2-base's at 1 s of audio."""

    channels: int = 768
    """Input = output channels (transformers ``hidden_size``)."""
    kernel: int = 128
    """Kernel size (``num_conv_pos_embeddings``); the padding is half of it."""
    groups: int = 16
    """Convolution groups (``num_conv_pos_embedding_groups``)."""
    length: int = 49
    """Input frames: wav2vec2's feature encoder gives 49 for 1 s at 16 kHz."""

    @classmethod
    def from_options(
        cls, channels: int | None, kernel: int | None, groups: int | None, length: int | None
    ) -> PosConvShape | None:
        """The shape the command-line options give, the defaults filling those left out; None when none is given
        (so that a target other than pos-conv can refuse them)."""
        given = {"channels": channels, "kernel": kernel, "groups": groups, "length": length}
        if all(value is None for value in given.values()):
            return None
        return cls(**{key: value for key, value in given.items() if value is not None})

    @property
    def padding(self) -> int:
        return self.kernel // 2

    @property
    def output_length(self) -> int:
        return self.length + 2 * self.padding - self.kernel + 1

    def check(self) -> None:
        """A one-line BenchError for a shape the convolution cannot have."""
        sizes = {"--channels": self.channels, "--kernel": self.kernel, "--groups": self.groups, "--length": self.length}
        small = [f"{option} {value}" for option, value in sizes.items() if value < 1]
        if small:
            raise BenchError(f"{', '.join(small)}: pos-conv sizes must be at least 1")
        if self.channels % self.groups:
            raise BenchError(
                f"--channels {self.channels} is not divisible by --groups {self.groups}; give a multiple of it"
            )

    def describe(self) -> str:
        """The module as PyTorch writes it."""
        return (
            f"weight_norm(Conv1d({self.channels}, {self.channels}, {self.kernel}, padding={self.padding}, "
            f"groups={self.groups}), dim=2)"
        )

    def gflop(self) -> float:
        """Multiply-adds x 2 of the grouped convolution, in GFLOP."""
        return 2 * self.channels * (self.channels // self.groups) * self.kernel * self.output_length / 1e9


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
    return target != POS_CONV and (target.endswith(".pte") or Path(target).is_file())


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
    if request.target == POS_CONV:
        _check_pos_conv(request)
    elif request.pos_conv is not None:
        raise BenchError(
            f"--channels, --kernel, --groups and --length size the {POS_CONV} target only; drop them for {request.target}"
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
    if request.method is not None and (is_pte_target(request.target) or request.target == POS_CONV):
        raise BenchError(
            f"--method picks the method of a recipe's program, which bench lowers alone; drop it for {request.target}"
        )
    if (request.min_seconds, request.max_seconds) != (None, None) and (
        is_pte_target(request.target) or request.target == POS_CONV
    ):
        raise BenchError("--min-seconds and --max-seconds set the length range of a recipe's program; drop them")
    if kind != "adb" and request.runner is not None:
        raise BenchError("--runner is for --device adb")
    if request.profile and kind != "local":
        raise BenchError(
            f"--profile reads ExecuTorch's event trace in this process: use --device local, not {kind} "
            "(or profile the program here with `audiodeploy inspect PTE --profile`)"
        )
    if request.profile and request.target == POS_CONV:
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
    if not is_pte_target(request.target) and request.target != POS_CONV:
        _check_recipe_target(request)


def _check_recipe_target(request: BenchRequest) -> None:
    """A recipe target whose method bench cannot measure, or whose int8 scheme it refuses, as one line."""
    from audiodeploy import recipes

    recipe = recipes.get(request.target)
    measured_method(recipe, request.method)
    if "audiodeploy-int8" in request.compare:
        recipe.check_int8_scheme(int8_scheme(recipe.int8_schemes))  # a one-line RecipeError for UnivNet
    length_range = program_length_range(recipe, request)
    outside = [s for s in measured_seconds(request) if not length_range.min_seconds <= s <= length_range.max_seconds]
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


def program_length_range(recipe: Recipe[Any], request: BenchRequest) -> LengthRange:
    """The input durations the recipe's program takes: the bounds given, else the recipe's default range widened to
    every length measured (the program a user gets from `audiodeploy export`)."""
    from audiodeploy.recipes.spec import LengthRange

    seconds = measured_seconds(request)
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


def require_onnxruntime(compared: str = "onnxruntime") -> None:
    """Fail early, in one line, when ``--compare onnxruntime`` (or ``onnxruntime-int8``) cannot be honoured."""
    missing = [name for name in ("onnxruntime", "onnxscript", "onnx") if not _imports(name)]
    if missing:
        raise BenchError(
            f"--compare {compared} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed: {BENCH_EXTRA_HINT}"
        )


def _imports(name: str) -> bool:
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def measured_seconds(request: BenchRequest) -> tuple[float, ...]:
    """The durations measured, each once and in order: those given, else one second."""
    return tuple(sorted(set(request.seconds or (1.0,))))

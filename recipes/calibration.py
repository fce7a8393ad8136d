"""Calibration inputs for static int8 from audio files, through the recipe's own input pipeline.

    files = calibration_files(["speech/"])            # a directory: its audio files, sorted
    calibration = calibration_set(built, files)       # inputs (windows of each file), and notes for the user
    int8 = audiodeploy.Quantization(audiodeploy.QuantizationScheme.INT8_STATIC, calibration=calibration.inputs)
    audiodeploy.lower(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes,
                      options=audiodeploy.LoweringOptions(quantization=int8))

Each file becomes the inputs the program takes, as `audiodeploy run` would prepare them:

- a waveform recipe (wav2vec2, HuBERT, WavLM): the file read as mono at the model's rate
  (`audiodeploy.program.audio.AudioFile`), zero-padded to a multiple of the feature encoder's stride;
- a vocoder: the log-mel frames of the built model's own front end (`built.mel`) over the file.

A file longer than the program's longest input is cut into windows of that length, as `run` cuts it (the last
one moved back to end at the file's end, so that every window is full): each is one more calibration input,
and every input is a length the program was exported for. A file shorter than the program's shortest input is
repeated up to it, not padded with silence: a calibration input that is mostly silence widens the observed
ranges (tiny speecht5-hifigan, int8-static, five files of which one is 0.05 s: held-out waveform SNR 16 dB with
that file zero-padded, 27 dB with it repeated). But a file shorter than `MIN_CALIBRATION_SECONDS` (50 ms, a few
pitch periods of a voice) is refused: repeated, it is a buzz at the repetition rate, or a constant for one
sample, and its ranges ruin the program (tiny wav2vec2 calibrated on a one-sample file: output SNR -2.8 dB, no
frame's argmax kept).

At most `limit` inputs are kept (`DEFAULT_CALIBRATION_LIMIT`, `export --calibrate-limit`): more files than that
are sampled evenly over the sorted list, not its first ones, so that a directory sorted by speaker or session
still gives every part of it; the set's notes say how many were left out. Only regular files are read: a pipe
or a device could block forever.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from audiodeploy._files import display

from .errors import CalibrationError

if TYPE_CHECKING:
    import torch

    from audiodeploy.program.audio import AudioFile
    from audiodeploy.program.report import QuantizationReport

    from .spec import BuiltModel

__all__ = [
    "AUDIO_SUFFIXES",
    "DEFAULT_CALIBRATION_LIMIT",
    "MIN_CALIBRATION_SECONDS",
    "CalibrationSet",
    "calibration_files",
    "calibration_inputs",
    "calibration_set",
    "fidelity_measures",
    "fidelity_warnings",
]

AUDIO_SUFFIXES = frozenset(
    {".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".au", ".snd", ".caf", ".w64", ".rf64"}
)
"""What a calibration directory's audio files are named: the formats libsndfile reads."""

MIN_CALIBRATION_SECONDS = 0.05
"""The shortest calibration file: see the module docstring."""

DEFAULT_CALIBRATION_LIMIT = 200
"""How many calibration inputs are kept by default: observing ranges on more adds time, not accuracy."""

FileProgress = Callable[[int, int], None]
"""Told `(file number, files)` before each file is read."""


@dataclass(frozen=True)
class CalibrationSet:
    """The inputs to calibrate on, and what the user should know about how they were made."""

    inputs: tuple[tuple[torch.Tensor, ...], ...]
    notes: tuple[str, ...] = ()
    """One line each: files repeated up to the shortest input, files left out by the limit."""


def calibration_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """`FILES|DIR` expanded: a file as given; a directory, its audio files (`AUDIO_SUFFIXES`, also in
    subdirectories, regular files only), sorted. A missing path, a path that is not a regular file (a pipe, a
    device), or a directory without audio files, is a `CalibrationError`.
    Whether a file is audio is found when it is read (`calibration_inputs`)."""
    files: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
            if not found:
                raise CalibrationError(
                    f"calibration directory {display(path)} holds no audio files "
                    f"({', '.join(sorted(AUDIO_SUFFIXES))}); give a directory of recordings, or the files themselves"
                )
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise CalibrationError(
                f"calibration audio {display(path)} is not a regular file (a pipe, socket or device, which may never "
                "end); save the audio to a file and give that, or a directory of them"
            )
        else:
            raise CalibrationError(
                f"calibration audio {display(path)}: no such file or directory; give audio files or a directory of them"
            )
    if not files:
        raise CalibrationError("no calibration audio given; give audio files or a directory of them")
    return files


def calibration_inputs(built: BuiltModel, files: Sequence[str | os.PathLike[str]]) -> list[tuple[torch.Tensor, ...]]:
    """Every input of every file, as `built`'s program takes it, without a limit (see `calibration_set`)."""
    return list(calibration_set(built, files, limit=None).inputs)


def calibration_set(
    built: BuiltModel,
    files: Sequence[str | os.PathLike[str]],
    limit: int | None = DEFAULT_CALIBRATION_LIMIT,
    progress: FileProgress | None = None,
) -> CalibrationSet:
    """At most `limit` inputs (None: all) from `files`, as `built`'s program takes them (see the module docstring).

    Raises `CalibrationError` (one line naming the file and the remedy) for a file that is missing, not audio,
    empty, not finite or shorter than `MIN_CALIBRATION_SECONDS`.
    """
    if not files:
        raise CalibrationError("no calibration audio given; give audio files or a directory of them")
    if limit is not None and limit < 1:
        raise CalibrationError(f"a calibration limit of {limit} inputs keeps nothing; give at least 1")
    chosen = _spread(list(files), limit)
    inputs: list[tuple[torch.Tensor, ...]] = []
    repeated: list[Path] = []
    used = 0
    for number, given in enumerate(chosen, 1):
        if limit is not None and len(inputs) >= limit:
            break
        if progress is not None:
            progress(number, len(chosen))
        path = Path(given)
        windows, was_repeated = _inputs(built, path)
        inputs.extend(windows[: None if limit is None else limit - len(inputs)])
        repeated.extend([path] if was_repeated else [])
        used += 1
    return CalibrationSet(tuple(inputs), _notes(built, len(inputs), used, len(files), repeated, limit))


def _spread(files: list[str | os.PathLike[str]], limit: int | None) -> list[str | os.PathLike[str]]:
    """`limit` files evenly spaced over `files` when there are more (a file gives one input at least)."""
    if limit is None or len(files) <= limit:
        return files
    return [files[index * len(files) // limit] for index in range(limit)]


def _notes(
    built: BuiltModel, inputs: int, used: int, given: int, repeated: list[Path], limit: int | None
) -> tuple[str, ...]:
    notes = []
    if repeated:
        more = f" and {len(repeated) - 1} more" if len(repeated) > 1 else ""
        notes.append(
            f"{display(repeated[0])}{more}: shorter than the program's shortest input "
            f"({built.input.seconds(built.input.min_length):g} s), repeated up to it for calibration"
        )
    if used < given:
        left = given - used
        notes.append(
            f"calibrating on {inputs} inputs from {used} of the {given} calibration files (--calibrate-limit "
            f"{limit}); the other {left} {'was' if left == 1 else 'were'} left out: raise --calibrate-limit to use more"
        )
    return tuple(notes)


def fidelity_warnings(report: QuantizationReport) -> tuple[str, ...]:
    """One line per method whose fidelity against fp32 is under its floor (`fidelity.SNR_FLOORS_DB`), with what to
    do about it; empty when the program is faithful enough."""
    from audiodeploy.program.fidelity import below_floor

    warnings = []
    for method in report.methods.values():
        for name, floor in below_floor(method.fidelity).items():
            where = "" if list(report.methods) == ["forward"] else f"method {method.name}: "
            measured = f" (on {report.fidelity_inputs})" if report.fidelity_inputs else ""
            warnings.append(
                f"{where}int8 {_SNR_NAMES.get(name, name)} {method.fidelity[name]:.1f} dB against fp32{measured} is "
                f"below the {floor:g} dB floor: calibrate on audio the model will hear (--calibrate), keep the most "
                "sensitive GEMMs fp32 (--sensitivity, --keep-fp32), or export fp32"
            )
    return tuple(warnings)


_SNR_NAMES = {"snr_db": "output SNR", "waveform_snr_db": "waveform SNR"}


def fidelity_measures(built: BuiltModel) -> dict[str, Callable[[torch.Tensor, torch.Tensor], float]]:
    """What a quantized program of `built` is measured by (`audiodeploy.Quantization(..., fidelity=...)`), by task:
    every program: `snr_db`, `max_abs_diff`; logits (CTC, classifiers): also `argmax_agreement` (per frame, or of
    the one label); vocoders: the SNR as `waveform_snr_db` and `log_mel_distance` through the recipe's own front
    end."""
    from audiodeploy.program import fidelity

    if built.output.kind != "waveform":
        measures: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
            "snr_db": fidelity.output_snr_db,
            "max_abs_diff": fidelity.max_abs_diff,
        }
        if built.output.kind in ("ctc-logits", "class-logits", "frame-class-logits"):
            measures["argmax_agreement"] = fidelity.frame_argmax_agreement
        return measures
    measures = {"waveform_snr_db": fidelity.waveform_snr_db, "max_abs_diff": fidelity.max_abs_diff}
    if built.mel is not None:
        measures["log_mel_distance"] = fidelity.log_mel_distance(built.mel)
    return measures


def _inputs(built: BuiltModel, path: Path) -> tuple[list[tuple[torch.Tensor, ...]], bool]:
    """The inputs of one file (a window each), and whether the file was repeated up to the shortest input."""
    from audiodeploy.program.audio import AudioFile, AudioInputError

    try:
        with AudioFile(path, built.sample_rate) as audio:
            _check_long_enough(built, audio)
            if built.input.kind == "waveform":
                return _waveform_inputs(built, audio)
            return _mel_inputs(built, audio)
    except AudioInputError as error:
        raise CalibrationError(f"calibration audio {error}") from None


def _check_long_enough(built: BuiltModel, audio: AudioFile) -> None:
    needed = math.floor(MIN_CALIBRATION_SECONDS * built.sample_rate)
    if built.mel is not None:
        needed = max(needed, built.mel.min_samples)
    if audio.total < needed:
        count = f"{audio.file_frames} sample{'s' if audio.file_frames != 1 else ''}"
        raise CalibrationError(
            f"calibration audio {audio.origin} is {audio.seconds:.4g} s long ({count}), shorter than the "
            f"{MIN_CALIBRATION_SECONDS:g} s a calibration file needs (repeated, it would calibrate on a buzz); "
            f"remove it, or give recordings of at least {MIN_CALIBRATION_SECONDS:g} s"
        )


def _windows(total: int, window: int) -> list[tuple[int, int]]:
    """Non-overlapping `[start, stop)` of `window` units over `total`, the last moved back to end at `total`
    (as `run` places it); one shorter window when `total` is shorter than `window`."""
    if total <= window:
        return [(0, total)]
    starts = list(range(0, total - window + 1, window))
    if starts[-1] + window < total:
        starts.append(total - window)
    return [(start, start + window) for start in starts]


def _waveform_inputs(built: BuiltModel, audio: AudioFile) -> tuple[list[tuple[torch.Tensor, ...]], bool]:
    import numpy as np
    import torch

    spec = built.input
    inputs = []
    repeated = audio.total < spec.min_length
    for start, stop in _windows(audio.total, spec.max_length):
        samples = audio.read(start, stop)
        if samples.size < spec.min_length:
            samples = np.resize(samples, spec.min_length)  # repeated, see the module docstring
        waveform = np.zeros(spec.padded_length(samples.size), dtype=np.float32)
        waveform[: samples.size] = samples
        inputs.append((torch.from_numpy(waveform)[None],))
    return inputs, repeated


def _mel_inputs(built: BuiltModel, audio: AudioFile) -> tuple[list[tuple[torch.Tensor, ...]], bool]:
    import numpy as np
    import torch

    spec, mel = built.input, built.mel
    if mel is None:
        raise CalibrationError(f"recipe '{built.recipe}' takes {spec.kind} input but has no mel front end")
    needed = max(mel.min_samples, spec.min_length * mel.hop_length)
    if audio.total < needed:  # too short for the program's shortest input: repeated up to it
        frames = mel(np.resize(audio.read(0, audio.total), needed))[:, : spec.max_length]
        return [(frames.contiguous(),)], True
    windows = _windows(mel.frame_count(audio.total), spec.max_length)
    return [
        (torch.from_numpy(mel.frames(audio.read, audio.total, a, b))[None].contiguous(),) for a, b in windows
    ], False

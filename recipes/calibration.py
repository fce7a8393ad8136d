"""Calibration inputs for static int8 from audio files, through the recipe's own input pipeline.

    files = calibration_files(["speech/"])            # a directory: its audio files, sorted
    calibration = calibration_inputs(built, files)    # one input tuple per file
    audiodeploy.lower(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes,
                      quantize="int8-static", calibration=calibration)

Each file becomes the input the program takes, as `audiodeploy run` would prepare it:

- a waveform recipe (wav2vec2, HuBERT, WavLM): the file read as mono at the model's rate
  (`audiodeploy.runtime.audio.AudioFile`), its first `input.max_length` samples, zero-padded to a multiple of
  the feature encoder's stride;
- a vocoder: the log-mel frames of the built model's own front end (`built.mel`) over the file, its first
  `input.max_length` frames.

A file longer than the program's range contributes its beginning only: calibration needs activation ranges,
not every second of a long recording. A file shorter than the program's shortest input is repeated up to it,
not padded with silence: a calibration input that is mostly silence widens the observed ranges (tiny
speecht5-hifigan, int8-static, five files of which one is 0.05 s: held-out waveform SNR 16 dB with that
file zero-padded, 27 dB with it repeated).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from audiodeploy._files import display
from .errors import CalibrationError

if TYPE_CHECKING:
    import torch

    from .spec import BuiltModel

__all__ = ["AUDIO_SUFFIXES", "calibration_files", "calibration_inputs", "fidelity_measures"]

AUDIO_SUFFIXES = frozenset(
    {".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".au", ".snd", ".caf", ".w64", ".rf64"}
)
"""What a calibration directory's audio files are named: the formats libsndfile reads."""


def calibration_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """`FILES|DIR` expanded: a file as given; a directory, its audio files (`AUDIO_SUFFIXES`, also in
    subdirectories), sorted. A missing path, or a directory without audio files, is a `CalibrationError`.
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
        elif path.exists():
            files.append(path)
        else:
            raise CalibrationError(f"calibration audio {display(path)}: no such file or directory; give audio files or a directory of them")
    if not files:
        raise CalibrationError("no calibration audio given; give audio files or a directory of them")
    return files


def calibration_inputs(built: BuiltModel, files: Sequence[str | os.PathLike[str]]) -> list[tuple[torch.Tensor, ...]]:
    """One input tuple per file, as `built`'s program takes it (see the module docstring).

    Raises `CalibrationError` (one line naming the file and the remedy) for a file that is missing, not audio,
    empty or not finite.
    """
    if not files:
        raise CalibrationError("no calibration audio given; give audio files or a directory of them")
    return [_input(built, Path(path)) for path in files]


def fidelity_measures(built: BuiltModel) -> dict[str, Callable[[torch.Tensor, torch.Tensor], float]]:
    """What a quantized program of `built` is measured by (`audiodeploy.lower(..., fidelity=...)`), by task:
    every program: `snr_db`, `max_abs_diff`; CTC logits: also `argmax_agreement` (frames); vocoders: the SNR as
    `waveform_snr_db` and `log_mel_distance` through the recipe's own front end."""
    from audiodeploy.lowering import fidelity

    if built.output.kind == "ctc-logits":
        return {
            "snr_db": fidelity.output_snr_db,
            "max_abs_diff": fidelity.max_abs_diff,
            "argmax_agreement": fidelity.frame_argmax_agreement,
        }
    measures: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
        "waveform_snr_db": fidelity.waveform_snr_db,
        "max_abs_diff": fidelity.max_abs_diff,
    }
    if built.mel is not None:
        measures["log_mel_distance"] = fidelity.log_mel_distance(built.mel)
    return measures


def _input(built: BuiltModel, path: Path) -> tuple[torch.Tensor, ...]:
    import numpy as np
    import torch

    from audiodeploy.runtime.audio import AudioFile, AudioInputError

    spec = built.input
    try:
        with AudioFile(path, built.sample_rate) as audio:
            if spec.kind == "waveform":
                samples = audio.read(0, min(audio.total, spec.max_length))
                if samples.size < spec.min_length:
                    samples = np.resize(samples, spec.min_length)  # repeated, see the module docstring
                waveform = np.zeros(spec.padded_length(samples.size), dtype=np.float32)
                waveform[: samples.size] = samples
                return (torch.from_numpy(waveform)[None],)
            mel = built.mel
            if mel is None:
                raise CalibrationError(f"recipe '{built.recipe}' takes {spec.kind} input but has no mel front end")
            needed = max(mel.min_samples, spec.min_length * mel.hop_length)
            if audio.total < needed:  # too short for the program's shortest input: repeated up to it
                frames = mel(np.resize(audio.read(0, audio.total), needed))[:, : spec.max_length]
            else:
                count = min(mel.frame_count(audio.total), spec.max_length)
                frames = torch.from_numpy(mel.frames(audio.read, audio.total, 0, count))[None]
            return (frames.contiguous(),)
    except AudioInputError as error:
        raise CalibrationError(f"calibration audio {error}") from None

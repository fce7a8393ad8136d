"""Audio in and out for the runtime: read any soundfile format as mono at a rate, write wav atomically."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import soundfile
import torch

from audiodeploy._files import atomic_write_bytes


class AudioInputError(ValueError):
    """An input file that is missing, not audio, or empty; the message says what to do."""


def read_mono(path: str | os.PathLike[str], sample_rate: int) -> torch.Tensor:
    """The file's audio as a float32 ``(samples,)`` tensor: channels averaged, resampled to ``sample_rate``."""
    path = Path(path)
    if not path.is_file():
        raise AudioInputError(f"{path}: no such file; give the path of a wav, flac or ogg file")
    try:
        audio, file_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
        raise AudioInputError(f"{path}: not a readable audio file ({error}); give a wav, flac or ogg file") from None
    if audio.shape[0] == 0:
        raise AudioInputError(f"{path}: the audio is empty; give a file with at least some samples")
    waveform = torch.from_numpy(np.ascontiguousarray(audio.mean(axis=1)))
    if file_rate != sample_rate:
        import torchaudio.functional

        waveform = torchaudio.functional.resample(waveform, file_rate, sample_rate)
    return waveform


def write_wav(path: str | os.PathLike[str], waveform: torch.Tensor, sample_rate: int) -> Path:
    """Write a mono waveform as 16-bit PCM wav, atomically."""
    audio = waveform.detach().reshape(-1).clamp(-1.0, 1.0).numpy()
    encoded = io.BytesIO()
    soundfile.write(encoded, audio, sample_rate, format="WAV", subtype="PCM_16")
    return atomic_write_bytes(path, encoded.getvalue())

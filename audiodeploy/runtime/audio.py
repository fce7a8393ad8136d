"""Audio in and out for the runtime: any soundfile format or array, read as mono at the program's rate, block by
block; 16-bit wav out, atomically, whole or streamed.

A long file is never read whole: `AudioFile.read(start, stop)` seeks, reads the samples that range needs (and
the resampling filter's context), mixes the channels and resamples, giving exactly the samples that resampling
the whole file would give at those positions.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import soundfile

from audiodeploy._files import atomic_output, atomic_write_bytes, display

if TYPE_CHECKING:
    import torch


class AudioInputError(ValueError):
    """Input audio that is missing, not audio, empty, or not finite; the message says what to do."""


class AudioSource(Protocol):
    """Mono audio at `sample_rate`, `total` samples long, read by ranges of samples."""

    origin: str
    sample_rate: int
    total: int

    def read(self, start: int, stop: int) -> np.ndarray:
        """Samples ``[start, stop)`` as float32 (``0 <= start <= stop <= total``)."""
        ...


def _check_finite(samples: np.ndarray, origin: str, first_sample: int, sample_rate: int) -> None:
    finite = np.isfinite(samples)
    if not finite.all():
        at = (first_sample + int(np.argmin(finite))) / sample_rate
        raise AudioInputError(
            f"{origin}: the audio holds NaN or infinite samples (the first at {at:.2f} s); give finite audio"
        )


class AudioArray:
    """Audio given as an array (numpy or torch): 1-D, or ``(1, samples)``, at `source_rate` (default: the
    program's rate)."""

    def __init__(self, audio: object, sample_rate: int, source_rate: int | None = None, origin: str = "the audio") -> None:
        array = _as_real_array(audio, origin)
        if array.ndim == 2 and array.shape[0] == 1:
            array = array[0]
        if array.ndim != 1:
            raise AudioInputError(
                f"{origin}: audio of shape {tuple(array.shape)}; give mono samples, shaped (samples,) or (1, samples)"
            )
        if array.size == 0:
            raise AudioInputError(f"{origin}: the audio is empty; give at least some samples")
        rate = sample_rate if source_rate is None else source_rate
        _check_finite(array, origin, 0, rate)
        if rate != sample_rate:
            array = _resample(array, rate, sample_rate)
        self.origin = origin
        self.sample_rate = sample_rate
        self.samples = np.ascontiguousarray(array, dtype=np.float32)
        self.total = int(self.samples.size)

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.samples[start:stop]


class AudioFile:
    """An audio file (anything libsndfile reads: wav, flac, ogg, mp3...) read block by block, as mono at
    `sample_rate`. Use it as a context manager, or `close()` it."""

    def __init__(self, path: str | os.PathLike[str], sample_rate: int) -> None:
        self.path = Path(path)
        self.origin = display(self.path)
        if not self.path.exists():
            raise AudioInputError(f"{self.origin}: no such file; give the path of a wav, flac or ogg file")
        if self.path.is_dir():
            raise AudioInputError(f"{self.origin} is a directory; give the path of a wav, flac or ogg file")
        try:
            self._file = soundfile.SoundFile(str(self.path))
        except (soundfile.LibsndfileError, RuntimeError, TypeError, OSError) as error:
            reason = " ".join(str(error).split())
            raise AudioInputError(f"{self.origin}: not a readable audio file ({reason}); give a wav, flac or ogg file") from None
        self.file_rate = int(self._file.samplerate)
        self.file_frames = int(self._file.frames)
        if self.file_frames <= 0:
            self._file.close()
            raise AudioInputError(f"{self.origin}: the audio is empty; give a file with at least some samples")
        self.sample_rate = sample_rate
        self._ratio = _Ratio(self.file_rate, sample_rate)
        self.total = self._ratio.output_length(self.file_frames)

    def __enter__(self) -> AudioFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    @property
    def seconds(self) -> float:
        return self.file_frames / self.file_rate

    def _read_file(self, start: int, stop: int) -> np.ndarray:
        """File samples ``[start, stop)``, mono, checked finite."""
        try:
            self._file.seek(start)
            block = self._file.read(stop - start, dtype="float32", always_2d=True)
        except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
            reason = " ".join(str(error).split())
            raise AudioInputError(f"{self.origin}: the audio cannot be read past {start / self.file_rate:.2f} s ({reason})") from None
        mono = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0]
        _check_finite(mono, self.origin, start, self.file_rate)
        return mono

    def read(self, start: int, stop: int) -> np.ndarray:
        if self._ratio.identity:
            return self._read_file(start, stop)
        # Resampling maps file block b (`ratio.down` samples) onto output block b (`ratio.up` samples); reading
        # whole blocks with the filter's width of context on both sides gives the samples of a whole-file
        # resampling. At the file's own ends the resampler pads zeros, as it would for the whole file.
        ratio = self._ratio
        first_block = start // ratio.up - ratio.context_blocks
        last_block = -(-stop // ratio.up) + ratio.context_blocks
        file_start = max(0, first_block * ratio.down)
        file_stop = min(self.file_frames, last_block * ratio.down)
        resampled = _resample(self._read_file(file_start, file_stop), self.file_rate, self.sample_rate)
        offset = file_start // ratio.down * ratio.up
        return np.ascontiguousarray(resampled[start - offset : stop - offset])


class _Ratio:
    """A resampling ratio in lowest terms, and the context torchaudio's windowed-sinc filter needs."""

    def __init__(self, source: int, target: int) -> None:
        common = math.gcd(source, target)
        self.down, self.up = source // common, target // common
        self.identity = source == target
        # torchaudio.functional.resample's default filter: 6 zero crossings at 0.99 of the lower Nyquist rate.
        width = math.ceil(6 * self.down / (0.99 * min(self.down, self.up)))
        self.context_blocks = -(-width // self.down) + 1

    def output_length(self, samples: int) -> int:
        return -(-samples * self.up // self.down)


def _resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    import torch
    import torchaudio.functional

    return torchaudio.functional.resample(torch.from_numpy(np.ascontiguousarray(samples)), source_rate, target_rate).numpy()


def _as_real_array(value: object, origin: str) -> np.ndarray:
    """`value` as a float32 numpy array; `AudioInputError` for complex, boolean or non-numeric data."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        value = value.detach().cpu().numpy()  # type: ignore[union-attr]
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:
        raise AudioInputError(f"{origin}: not an array of numbers ({error}); give real-valued samples") from None
    if array.dtype.kind not in "fiu":
        kind = {"c": "complex", "b": "boolean"}.get(array.dtype.kind, f"non-numeric ({array.dtype})")
        raise AudioInputError(f"{origin}: the values are {kind}; give real-valued samples")
    return array.astype(np.float32, copy=False)


def open_audio(
    audio: str | os.PathLike[str] | np.ndarray | torch.Tensor, sample_rate: int, source_rate: int | None = None
) -> AudioFile | AudioArray:
    """A path opens the file (read block by block); an array is taken as samples at `source_rate`."""
    if isinstance(audio, (str, os.PathLike)):
        if source_rate is not None:
            raise ValueError("source_rate is for arrays; a file says its own rate")
        return AudioFile(audio, sample_rate)
    return AudioArray(audio, sample_rate, source_rate)


def read_mono(path: str | os.PathLike[str], sample_rate: int) -> torch.Tensor:
    """The whole file as a float32 ``(samples,)`` tensor: channels averaged, resampled to `sample_rate`."""
    import torch

    with AudioFile(path, sample_rate) as audio:
        return torch.from_numpy(audio.read(0, audio.total))


def _pcm16(waveform: np.ndarray) -> np.ndarray:
    return np.clip(waveform.reshape(-1), -1.0, 1.0)


def write_wav(path: str | os.PathLike[str], waveform: torch.Tensor | np.ndarray, sample_rate: int) -> Path:
    """Write a mono waveform as 16-bit PCM wav, atomically."""
    audio = waveform.detach().cpu().numpy() if hasattr(waveform, "detach") else np.asarray(waveform)  # type: ignore[union-attr]
    encoded = io.BytesIO()
    soundfile.write(encoded, _pcm16(audio), sample_rate, format="WAV", subtype="PCM_16")
    return atomic_write_bytes(path, encoded.getvalue())


class WavWriter:
    """A mono 16-bit wav written block by block to a temporary file beside `path`, renamed into place on a clean
    exit of the ``with`` block and removed on any failure or interruption."""

    def __init__(self, path: str | os.PathLike[str], sample_rate: int) -> None:
        self.path = Path(path)
        self.sample_rate = sample_rate
        self.samples = 0

    def __enter__(self) -> WavWriter:
        self._output = atomic_output(self.path)
        temporary = self._output.__enter__()
        try:
            self._file = soundfile.SoundFile(
                str(temporary), "w", samplerate=self.sample_rate, channels=1, format="WAV", subtype="PCM_16"
            )
        except BaseException as error:
            self._output.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def write(self, waveform: np.ndarray) -> None:
        self._file.write(_pcm16(waveform))
        self.samples += int(waveform.size)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: object) -> bool | None:
        self._file.close()
        return self._output.__exit__(kind, error, traceback)

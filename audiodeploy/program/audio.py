"""Audio in and out for the runtime: any soundfile format or array, read as mono (or, for a stereo program, as two
channels) at the program's rate, block by block; 16-bit wav out, atomically, whole or streamed.

A long file is never read whole: `AudioFile.read(start, stop)` seeks, reads the samples that range needs (and
the resampling filter's context), mixes the channels and resamples, giving exactly the samples that resampling
the whole file would give at those positions.

Resampling is torchaudio's windowed sinc (6 zero crossings, cutoff at 0.99 of the lower Nyquist rate) for every
pair of rates, with no approximation of the ratio. torchaudio builds one filter row per output phase, each as long
as a whole input period: ``up * down`` values for rates ``down:up`` in lowest terms, 16000 x 44101 of them for a
header that says 44101 Hz (12 GB measured). When that filter would be large, the same filter is evaluated only
where it is not zero, ``2 * width + 2`` taps a phase: at most about 38 MB of taps for any rate this module accepts
(1000 Hz to 768 kHz), with no pitch or length error (the samples are within 1e-4 of torchaudio's, which computes
its filter in float32).
"""

from __future__ import annotations

import errno
import io
import math
import os
import stat
import struct
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import soundfile

from audiodeploy._files import atomic_output, atomic_write_bytes, display
from audiodeploy.errors import AudiodeployError

if TYPE_CHECKING:
    import torch

MIN_SAMPLE_RATE = 1_000
MAX_SAMPLE_RATE = 768_000
"""Rates outside these are not audio a speech or vocoder program can use; they come from a damaged header (or a
wrong `sample_rate=`), and taking them at their word would turn 1 s of samples into hours, or the reverse."""

_ZERO_CROSSINGS = 6
_ROLLOFF = 0.99
_DENSE_FILTER_LIMIT = 1 << 20
"""torchaudio's filter holds ``up * (2 * width + down)`` values (float64 while it is built); up to this many
(8 MB) it is used as it is, beyond it the sparse evaluation of the same filter."""
_GATHER_LIMIT = 1 << 18
"""Output samples times taps gathered at once by the sparse evaluation (a few MB)."""


class AudioInputError(AudiodeployError, ValueError):
    """Input audio that is missing, not audio, empty, or not finite; the message says what to do."""


def _check_finite(samples: np.ndarray, origin: str, first_sample: int, sample_rate: int) -> None:
    """`samples`: mono, or channels by samples."""
    finite = np.isfinite(samples)
    if finite.ndim == 2:
        finite = finite.all(axis=0)
    if not finite.all():
        at = (first_sample + int(np.argmin(finite))) / sample_rate
        raise AudioInputError(
            f"{origin}: the audio holds NaN or infinite samples (the first at {at:.2f} s); give finite audio"
        )


def _check_rate(rate: int, origin: str, what: str, remedy: str) -> None:
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioInputError(
            f"{origin}: {what} {rate} Hz, outside the {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz of real audio; {remedy}"
        )


class AudioArray:
    """Audio given as an array (numpy or torch): 1-D, or ``(1, samples)``, at `source_rate` (default: the
    program's rate). For a stereo program (`channels` 2) also ``(2, samples)``; mono samples then play on both
    channels, and `read` gives ``(2, samples)`` blocks."""

    def __init__(
        self,
        audio: object,
        sample_rate: int,
        source_rate: int | None = None,
        origin: str = "the audio",
        channels: int = 1,
    ) -> None:
        array = _as_real_array(audio, origin)
        if array.ndim == 2 and array.shape[0] == 1:
            array = array[0]
        if array.ndim == 1:
            array = array[None]
        elif not (array.ndim == 2 and array.shape[0] == channels == 2):
            takes = "mono samples, shaped (samples,) or (1, samples)"
            if channels == 2:
                takes = "stereo samples shaped (2, samples), or mono ones shaped (samples,) or (1, samples)"
            raise AudioInputError(f"{origin}: audio of shape {tuple(array.shape)}; give {takes}")
        if array.shape[1] == 0:
            raise AudioInputError(f"{origin}: the audio is empty; give at least some samples")
        rate = sample_rate if source_rate is None else int(source_rate)
        if rate != sample_rate:
            _check_rate(rate, origin, "a sample rate of", "give the rate the samples were recorded at")
        _check_finite(array, origin, 0, rate)
        if rate != sample_rate:
            array = _resample_rows(_Ratio(rate, sample_rate), array)
        self.origin = origin
        self.sample_rate = sample_rate
        self.channels = channels
        self.samples = np.ascontiguousarray(np.broadcast_to(array, (channels, array.shape[1])), dtype=np.float32)
        self.total = int(self.samples.shape[1])

    def read(self, start: int, stop: int) -> np.ndarray:
        block = self.samples[:, start:stop]
        return block[0] if self.channels == 1 else block


def _check_regular_file(path: Path, origin: str) -> None:
    """Refuse what is not a regular file before opening it: a pipe (``<(cat a.wav)``) cannot seek back, and
    opening a FIFO that nobody writes to waits forever."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise AudioInputError(
            f"{origin}: cannot be read ({error.strerror}); give the path of a wav, flac or ogg file"
        ) from None
    if stat.S_ISREG(mode):
        return
    kind = "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise AudioInputError(
        f"{origin} is {kind}, not a file: audio is read by seeking; save it to a file first "
        "(e.g. `cat ... > input.wav`) and give that file"
    )


class AudioFile:
    """An audio file (anything libsndfile reads: wav, flac, ogg, mp3...) read block by block, as mono at
    `sample_rate`; for a stereo program (`channels` 2) as ``(2, samples)`` blocks, a mono file on both channels.
    Use it as a context manager, or `close()` it."""

    def __init__(self, path: str | os.PathLike[str], sample_rate: int, channels: int = 1) -> None:
        self.path = Path(path)
        self.origin = display(self.path)
        if not self.path.exists():
            raise AudioInputError(f"{self.origin}: no such file; give the path of a wav, flac or ogg file")
        if self.path.is_dir():
            raise AudioInputError(f"{self.origin} is a directory; give the path of a wav, flac or ogg file")
        _check_regular_file(self.path, self.origin)
        try:
            self._file = soundfile.SoundFile(str(self.path))
        except (soundfile.LibsndfileError, RuntimeError, TypeError, OSError) as error:
            reason = " ".join(str(error).split())
            raise AudioInputError(
                f"{self.origin}: not a readable audio file ({reason}); give a wav, flac or ogg file"
            ) from None
        self.file_rate = int(self._file.samplerate)
        self.file_frames = int(self._file.frames)
        self.channels = channels
        try:
            self._check_header()
        except BaseException:
            self._file.close()
            raise
        self.sample_rate = sample_rate
        self._ratio = _Ratio(self.file_rate, sample_rate)
        self.total = self._ratio.output_length(self.file_frames)

    def _check_header(self) -> None:
        """What the header says, checked against sense and, for a PCM wav, against the file's size."""
        _check_rate(
            self.file_rate,
            self.origin,
            "the header says",
            "fix the header with the rate the audio was recorded at, e.g. `sox -r 16000 in.wav out.wav` for 16 kHz",
        )
        if self._file.format == "WAV":
            with open(self.path, "rb") as stream:
                held = _wav_frames_beyond_header(stream)
            if held is not None:
                raise AudioInputError(
                    f"{self.origin}: the header says {self.file_frames} samples but the file holds "
                    f"{held / self.file_rate:.2f} s; rewrite it with its real length, "
                    "e.g. `ffmpeg -ignore_length 1 -i in.wav out.wav`"
                )
        if self.file_frames <= 0:
            raise AudioInputError(f"{self.origin}: the audio is empty; give a file with at least some samples")
        if self.channels == 2 and self._file.channels > 2:
            raise AudioInputError(
                f"{self.origin}: {self._file.channels} channels; this program takes stereo: give a mono or stereo "
                "file (e.g. `sox in.wav -c 2 out.wav`)"
            )

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
        """File samples ``[start, stop)``, mono (stereo: ``(2, samples)``), checked finite."""
        try:
            self._file.seek(start)
            block = self._file.read(stop - start, dtype="float32", always_2d=True)
        except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
            reason = " ".join(str(error).split())
            raise AudioInputError(
                f"{self.origin}: the audio cannot be read past {start / self.file_rate:.2f} s ({reason})"
            ) from None
        if self.channels == 2:
            stereo = np.ascontiguousarray(np.broadcast_to(block.T, (2, block.shape[0])))
            _check_finite(stereo, self.origin, start, self.file_rate)
            return stereo
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
        resampled = _resample_rows(ratio, self._read_file(file_start, file_stop))
        offset = file_start // ratio.down * ratio.up
        return np.ascontiguousarray(resampled[..., start - offset : stop - offset])


# wav encodings whose every frame takes `block_align` bytes, so the data chunk's size gives the frame count.
_FIXED_FRAME_WAV_FORMATS = {1, 3, 6, 7, 0xFFFE}  # PCM, IEEE float, A-law, mu-law, extensible


def _wav_frames_beyond_header(stream: BinaryIO) -> int | None:
    """The frames a PCM wav's data holds when its header's data size says at least one fewer (libsndfile reads
    only what the header says); None when they agree, or the file is not a PCM RIFF wav.

    The bytes after the data chunk are the file's if they are a sequence of chunks (LIST, id3...) reaching the
    end of the file; otherwise they are audio the header does not count.
    """
    size = os.fstat(stream.fileno()).st_size
    head = stream.read(12)
    if len(head) < 12 or head[:4] not in (b"RIFF", b"RIFX") or head[8:12] != b"WAVE":
        return None
    order = "<" if head[:4] == b"RIFF" else ">"
    position, block_align = 12, 0
    while position + 8 <= size:
        stream.seek(position)
        kind, length = struct.unpack(f"{order}4sI", stream.read(8))
        if kind == b"fmt ":
            fields = stream.read(16)
            if len(fields) < 16:
                return None
            tag, _, _, _, block_align = struct.unpack(f"{order}HHIIH", fields[:14])
            if tag not in _FIXED_FRAME_WAV_FORMATS:
                return None
        elif kind == b"data":
            start = position + 8
            # A header counting all the rest of the file, or more (a truncated file), is read as it is.
            if block_align <= 0 or start + length >= size:
                return None
            if _chunks_reach_end(stream, start + length + (length & 1), size, order):
                return None
            held, said = (size - start) // block_align, length // block_align
            return held if held > said + 1 else None
        position += 8 + length + (length & 1)
    return None


def _chunks_reach_end(stream: BinaryIO, position: int, size: int, order: str) -> bool:
    """Whether the bytes from `position` are RIFF chunks ending at the end of the file (give or take a pad)."""
    for _ in range(1000):
        if size - position < 8:
            return True
        stream.seek(position)
        kind, length = struct.unpack(f"{order}4sI", stream.read(8))
        if not all(32 <= byte < 127 for byte in kind):
            return False
        position += 8 + length + (length & 1)
        if position > size + 1:
            return False
    return True  # a thousand well-formed chunks are the file's, not audio


class _Ratio:
    """A resampling ratio in lowest terms, the context torchaudio's windowed-sinc filter needs, and the
    resampling itself."""

    def __init__(self, source: int, target: int) -> None:
        common = math.gcd(source, target)
        self.down, self.up = source // common, target // common
        self.identity = source == target
        # torchaudio.functional.resample's default filter: 6 zero crossings at 0.99 of the lower Nyquist rate.
        self.width = math.ceil(_ZERO_CROSSINGS * self.down / (_ROLLOFF * min(self.down, self.up)))
        self.context_blocks = -(-self.width // self.down) + 1
        self._taps: tuple[np.ndarray, np.ndarray] | None = None

    def output_length(self, samples: int) -> int:
        return -(-samples * self.up // self.down)

    @property
    def dense(self) -> bool:
        """Whether torchaudio's own filter (one row per output phase, a whole input period long) is small."""
        return self.up * (2 * self.width + self.down) <= _DENSE_FILTER_LIMIT

    def resample(self, samples: np.ndarray) -> np.ndarray:
        """`samples` resampled as torchaudio.functional.resample does (zeros beyond both ends), in bounded memory."""
        if self.identity:
            return samples
        if self.dense:
            import torch
            import torchaudio.functional

            tensor = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
            return torchaudio.functional.resample(tensor, self.down, self.up).numpy()
        return self._resample_sparse(np.asarray(samples, dtype=np.float32))

    def _phase_taps(self) -> tuple[np.ndarray, np.ndarray]:
        """For each output phase p: the offset of its first input sample within the input period, and its
        ``2 * width + 2`` filter taps: torchaudio's kernel row p, less the zeros."""
        if self._taps is None:
            up, down, width = self.up, self.down, self.width
            cutoff = min(up, down) * _ROLLOFF
            phases = np.arange(up, dtype=np.int64)
            offsets = phases * down // up - width
            taps = np.empty((up, 2 * width + 2), dtype=np.float32)
            steps = np.arange(2 * width + 2, dtype=np.float64)
            rows = max(1, _GATHER_LIMIT // taps.shape[1])
            for first in range(0, up, rows):
                chunk = phases[first : first + rows]
                # Time of each tap from the output sample, in cycles of the cutoff, as torchaudio computes it.
                t = ((offsets[chunk, None] + steps) / down - chunk[:, None] / up) * cutoff
                inside = np.abs(t) < _ZERO_CROSSINGS
                window = np.cos(t * math.pi / _ZERO_CROSSINGS / 2) ** 2
                t *= math.pi
                with np.errstate(divide="ignore", invalid="ignore"):
                    sinc = np.where(t == 0, 1.0, np.sin(t) / t)
                taps[first : first + rows] = np.where(inside, sinc * window * (cutoff / down), 0.0)
            self._taps = (offsets, taps)
        return self._taps

    def _resample_sparse(self, samples: np.ndarray) -> np.ndarray:
        offsets, taps = self._phase_taps()
        length = taps.shape[1]
        total = self.output_length(samples.size)
        # Output j = m * up + p reads inputs from m * down + offsets[p]: pad so every read is inside.
        left = self.width
        last = (total - 1) // self.up * self.down + int(offsets.max()) + length
        padded = np.zeros(left + max(samples.size, last), dtype=np.float32)
        padded[left : left + samples.size] = samples
        windows = np.lib.stride_tricks.sliding_window_view(padded, length)
        output = np.empty(total, dtype=np.float32)
        chunk = max(1, _GATHER_LIMIT // length)
        for first in range(0, total, chunk):
            outputs = np.arange(first, min(first + chunk, total), dtype=np.int64)
            block, phase = np.divmod(outputs, self.up)
            starts = block * self.down + offsets[phase] + left
            output[first : first + outputs.size] = np.einsum("ij,ij->i", windows[starts], taps[phase])
        return output


def _resample_rows(ratio: _Ratio, samples: np.ndarray) -> np.ndarray:
    """`samples` (mono, or channels by samples) resampled channel by channel."""
    if samples.ndim == 1:
        return ratio.resample(samples)
    return np.stack([ratio.resample(row) for row in samples])


def _as_real_array(value: object, origin: str) -> np.ndarray:
    """`value` as a float32 numpy array; `AudioInputError` for complex, boolean or non-numeric data."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:
        raise AudioInputError(f"{origin}: not an array of numbers ({error}); give real-valued samples") from None
    if array.dtype.kind not in "fiu":
        kind = {"c": "complex", "b": "boolean"}.get(array.dtype.kind, f"non-numeric ({array.dtype})")
        raise AudioInputError(f"{origin}: the values are {kind}; give real-valued samples")
    return array.astype(np.float32, copy=False)


def open_audio(
    audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
    sample_rate: int,
    source_rate: int | None = None,
    channels: int = 1,
) -> AudioFile | AudioArray:
    """A path opens the file (read block by block); an array is taken as samples at `source_rate`. `channels`: 1
    reads mono (the channels mixed), 2 reads stereo (a mono input on both channels)."""
    if isinstance(audio, (str, os.PathLike)):
        if source_rate is not None:
            raise ValueError("source_rate is for arrays; a file says its own rate")
        return AudioFile(audio, sample_rate, channels)
    return AudioArray(audio, sample_rate, source_rate, channels=channels)


def load_npy(path: Path, what: str = "mel", dtype: str = "float32") -> np.ndarray:
    """The array of `what` (a mel, codes) in the .npy at `path`, memory-mapped; `AudioInputError` (one line, naming
    `what` and how to save it as `dtype`) when it is not a numeric .npy file."""
    shown = display(path)
    if not path.exists():
        kind = "a mel spectrogram .npy or an audio file" if what == "mel" else f"a {what} .npy"
        raise AudioInputError(f"{shown}: no such file; give {kind}")
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file (a pipe or device)"
        raise AudioInputError(f"{shown} is {kind}; save the {what} to a file with numpy.save and give that file")
    try:
        # Memory-mapped: a long input is read window by window. Never unpickled: a .npy of Python objects can run
        # code when loaded, and no input needs it.
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:
        if "pickle" in str(error) or "Python objects" in str(error):
            raise AudioInputError(
                f"{shown}: not a numeric .npy array (it holds Python objects or is not a .npy file); "
                f"save the {what} as numbers, e.g. numpy.save(path, {what}.astype('{dtype}'))"
            ) from None
        raise AudioInputError(
            f"{shown}: not a readable .npy array ({_one_line(error)}); save the {what} with numpy.save"
        ) from None
    except (OSError, EOFError) as error:
        raise AudioInputError(
            f"{shown}: not a readable .npy array ({_one_line(error)}); save the {what} with numpy.save"
        ) from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def count_clipped(waveform: np.ndarray) -> int:
    """Samples at or beyond full scale: 16-bit PCM holds them as ±1, whatever they were (a vocoder's tanh output
    saturates at exactly ±1 on a mel far off its scale)."""
    return int(np.count_nonzero(np.abs(waveform) >= 1.0))


VOCODER_CLIPPING_CAUSE = "the input is probably not on the scale this vocoder takes (its recipe's log-mel)"
CODEC_CLIPPING_CAUSE = (
    "the decoded audio goes past full scale (audio encoded near full scale, or codes of another codec)"
)


def clipping_warning(clipped: int, samples: int, cause: str = VOCODER_CLIPPING_CAUSE) -> str | None:
    """One line for the user when samples were clipped, with their likely `cause` (None when none were)."""
    if clipped == 0:
        return None
    percent = 100 * clipped / samples
    shown = f"{percent:.0f}" if percent >= 1 else f"{percent:.2g}"
    return f"{shown}% of samples clipped at ±1 ({clipped} of {samples}); {cause}"


def _pcm16(waveform: np.ndarray, channels: int = 1) -> np.ndarray:
    """Mono samples (any shape) as one column, or `channels` by samples as soundfile's samples by channels."""
    frames = waveform.reshape(-1) if channels == 1 else waveform.reshape(channels, -1).T
    return np.clip(frames, -1.0, 1.0)


def write_wav(path: str | os.PathLike[str], waveform: torch.Tensor | np.ndarray, sample_rate: int) -> Path:
    """Write a waveform as 16-bit PCM wav, atomically: mono samples, or ``(2, samples)`` stereo."""
    audio = waveform.detach().cpu().numpy() if hasattr(waveform, "detach") else np.asarray(waveform)
    channels = 2 if audio.ndim == 2 and audio.shape[0] == 2 else 1
    encoded = io.BytesIO()
    soundfile.write(encoded, _pcm16(audio, channels), sample_rate, format="WAV", subtype="PCM_16")
    return atomic_write_bytes(path, encoded.getvalue())


class WavWriter:
    """A 16-bit wav (mono, or `channels` 2: stereo blocks shaped ``(2, samples)``) written block by block to a temporary file beside `path`, renamed into place on a clean
    exit of the ``with`` block and removed on any failure or interruption.

    A write that fails (a full disk) raises `OSError` naming `path`, its reason, and that the previous file is
    unchanged. `samples` counts the samples written (of each channel), `clipped` those at or beyond full scale (of
    any channel).
    """

    def __init__(self, path: str | os.PathLike[str], sample_rate: int, channels: int = 1) -> None:
        self.path = Path(path)
        self.sample_rate = sample_rate
        self.channels = channels
        self.samples = 0
        self.clipped = 0
        self._existed = self.path.exists()

    def __enter__(self) -> WavWriter:
        self._output = atomic_output(self.path)
        temporary = self._output.__enter__()
        try:
            self._file = soundfile.SoundFile(
                str(temporary), "w", samplerate=self.sample_rate, channels=self.channels, format="WAV", subtype="PCM_16"
            )
        except BaseException as error:
            failure = self._os_error(error) if isinstance(error, soundfile.LibsndfileError) else error
            self._output.__exit__(type(failure), failure, failure.__traceback__)
            if failure is not error:
                raise failure from None
            raise
        return self

    def write(self, waveform: np.ndarray) -> None:
        frames = _pcm16(waveform, self.channels)
        try:
            self._file.write(frames)
        except soundfile.LibsndfileError as error:
            raise self._os_error(error, 2 * frames.size) from None
        self.samples += int(frames.shape[0])
        self.clipped += count_clipped(np.abs(frames).max(axis=1) if frames.ndim == 2 else frames)

    @property
    def clipping_warning(self) -> str | None:
        return clipping_warning(self.clipped, self.samples)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool | None:
        try:
            # Closing writes the header's sizes: it can fail on a full disk too.
            self._file.close()
        except soundfile.LibsndfileError as closing:
            if kind is None:
                failure = self._os_error(closing, 64)
                self._output.__exit__(OSError, failure, None)
                raise failure from None
        try:
            return self._output.__exit__(kind, error, traceback)
        except OSError as failure:
            if failure is error:
                raise
            raise self._os_error(failure) from None

    def _os_error(self, error: BaseException, needed: int = 4096) -> OSError:
        """`error` as the `OSError` the user reads: the target, the reason, and that nothing was replaced.

        libsndfile reports a failed write as "System error" and drops errno; a disk without room for what was
        being written is taken to be the reason."""
        code = getattr(error, "errno", None) or errno.EIO
        reason = getattr(error, "strerror", None) or " ".join(str(error).split()).rstrip(".")
        if not isinstance(error, OSError) and self._free_bytes() < needed + 4096:  # tmpfs and ext4 take whole pages
            code, reason = errno.ENOSPC, os.strerror(errno.ENOSPC)
        unchanged = "the previous file is unchanged" if self._existed else "no file was written"
        return OSError(code, f"{reason}; {unchanged}", display(self.path))

    def _free_bytes(self) -> int:
        try:
            disk = os.statvfs(self.path.parent)
        except OSError:
            return 1 << 62
        return disk.f_bavail * disk.f_frsize

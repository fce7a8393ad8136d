"""A program and its description, loaded: transcribe, vocode, or run, on inputs of any length.

    import audiodeploy.runtime as runtime
    model = runtime.load("wav2vec2.pte")           # a SpeechRecognizer: the sidecar says it is CTC
    print(model.transcribe("speech.flac").text)     # any duration, any rate, any channel count
    vocoder = runtime.load("hifigan.pte")          # a Vocoder
    vocoder.vocode_to_file("mel.npy", "speech.wav")  # long mels stream to disk in windows
    emotion = runtime.load("my-emotion-model.pte")  # an AudioClassifier: the sidecar has its labels
    print(emotion.classify("speech.wav").top(3))    # [("happy", 0.81), ...]
    codec = runtime.load("dac.pte")                # a Codec: one program, an encode and a decode method
    codec.decode_to_file(codec.encode("speech.wav"), "back.wav")
    voice = runtime.load("vits.pte")               # a Synthesizer: text to speech
    voice.synthesize_to_file("Hello world. How are you?", "hello.wav", runtime.Voice(seed=555))

Only the program and its description are needed: no recipe, no model library.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from audiodeploy._files import display
from audiodeploy.errors import AudiodeployError
from audiodeploy.program.audio import (
    CODEC_CLIPPING_CAUSE,
    VOCODER_CLIPPING_CAUSE,
    AudioFile,
    AudioInputError,
    WavWriter,
    clipping_warning,
    load_npy,
    open_audio,
)
from audiodeploy.program.codes import ChunkedCodes, LinearOverlapAdd
from audiodeploy.program.description import (
    DECODE_METHOD,
    ENCODE_METHOD,
    CarriedState,
    CodecDecoder,
    DescriptionError,
    ProgramDescription,
    read_sidecar,
    sidecar_path,
)
from audiodeploy.program.spec import InputSpec, Task
from audiodeploy.program.tts import (
    TextError,
    TextToSpeech,
    TorchNormal,
    frame_durations,
    pieces_within,
    prior_latents,
    sentences,
)
from audiodeploy.runtime.program import Program
from audiodeploy.runtime.windows import Window, WindowPlan, plan_windows

if TYPE_CHECKING:
    import torch

ItemT = TypeVar("ItemT")

DEFAULT_OVERLAP_FRACTION = 0.2
"""Without `overlap_seconds`, neighbouring windows overlap by a fifth of a window, so every kept output step has at
least a tenth of a window of context on each side; a description's `window_overlap` says otherwise."""


class WindowOptionError(AudiodeployError, ValueError):
    """A window or overlap that the program cannot take; the message says what it can."""


def _whole_units(units: float, rounding: Callable[[float], int]) -> int:
    """`units` rounded to a whole number by `rounding`, ignoring float noise: 1.98 s is 99.00000000000001 frames
    of 20 ms, and must not round up to 100."""
    nearest = round(units)
    return nearest if abs(units - nearest) < 1e-6 else rounding(units)


def _overlap_problem(
    seconds: float, overlap: int, window: int, tail: int, unit_seconds: float, why: str | None = None
) -> str:
    """Why `overlap` units (the `seconds` asked, rounded up to whole units) cannot join windows of `window`
    units: the range it must be in, in seconds a user can type back (the bounds rounded inwards to the ms). `tail`:
    the least overlap, because `why` (by default: a window gives that many output units fewer than it takes)."""
    whole = f"{window * unit_seconds:.4g} s"
    frame = f"{unit_seconds * 1000:.3g} ms"
    if window - 1 < tail:
        return (
            f"windows of {whole} are too short to share the {tail} frame(s) of {frame} this program needs: give a "
            "longer window"
        )
    low = math.ceil(tail * unit_seconds * 1000) / 1000
    high = math.floor((window - 1) * unit_seconds * 1000) / 1000
    counted = overlap * unit_seconds
    rounded = "" if abs(counted - seconds) < 5e-4 else f" ({seconds:g} s is {counted:.4g} s)"
    # The program's output is `tail` frames shorter than its input: neighbours must share those to leave no gap.
    why = why or f"a window gives {tail} frame(s) fewer than it takes"
    least = f"at least {tail} ({why}) and " if tail else ""
    return (
        f"an overlap of {seconds:g} s does not fit windows of {whole}: it counts whole {frame} frames{rounded} and "
        f"must be {least}less than the window: give {low:g} to {high:g} s"
    )


@dataclass(frozen=True)
class Transcript:
    """What a CTC speech recognizer heard."""

    text: str
    labels: tuple[int, ...]
    """The best label of every output frame, in order (indices into the description's vocabulary)."""
    seconds: float
    """Duration of the audio transcribed."""
    windows: int
    """How many times the program ran."""


@dataclass(frozen=True)
class Waveform:
    """A vocoded waveform in memory."""

    samples: torch.Tensor
    """Float32 samples: `(samples,)` mono, or `(channels, samples)` (a stereo codec)."""
    sample_rate: int
    windows: int

    @property
    def seconds(self) -> float:
        return self.samples.shape[-1] / self.sample_rate

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write it as a 16-bit wav, atomically."""
        from audiodeploy.program.audio import write_wav

        return write_wav(path, self.samples, self.sample_rate)


@dataclass(frozen=True)
class WrittenAudio:
    """A vocoded waveform written to a file."""

    path: Path
    samples: int
    sample_rate: int
    windows: int
    clipped: int = 0
    """Samples at or beyond full scale, written as ±1 (see `clipping_warning`)."""
    clipping_cause: str = VOCODER_CLIPPING_CAUSE
    """What most likely made samples clip, for `clipping_warning`."""

    @property
    def seconds(self) -> float:
        return self.samples / self.sample_rate

    @property
    def clipping_warning(self) -> str | None:
        """One line saying how much of the waveform was clipped, or None when nothing was."""
        return clipping_warning(self.clipped, self.samples, self.clipping_cause)


class Model:
    """A loaded program with its description (None for a program without a sidecar: only `run` then)."""

    def __init__(self, program: Program, description: ProgramDescription | None, path: Path | None = None) -> None:
        self.program = program
        self.description = description
        self.path = path

    @property
    def task(self) -> Task | None:
        return None if self.description is None else self.description.task

    def run(self, inputs: Sequence[torch.Tensor], method: str = "forward") -> list[torch.Tensor]:
        """Run `method` once on `inputs` as they are (checked against what the program declares)."""
        return self.program.run(inputs, method)

    def __repr__(self) -> str:
        what = "no description" if self.description is None else f"{self.description.recipe} {self.description.variant}"
        return f"{type(self).__name__}({self.program.origin}, {what})"


def _with_progress(items: Sequence[ItemT], progress: bool, what: str, unit: str) -> Iterator[ItemT]:
    """`items` in order; with `progress`, a progress bar on stderr while they are worked through (more than three,
    on a terminal)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not progress or len(items) <= 3 or not console.is_terminal:
        yield from items
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeRemainingColumn())
    # Rendered from this thread after each item: ExecuTorch holds the GIL while it runs a program, so rich's
    # refresh thread would not get to draw until the end.
    with Progress(*columns, console=console, transient=True, auto_refresh=False) as bar:
        task = bar.add_task(what, total=len(items))
        bar.refresh()
        for item in items:
            yield item
            bar.advance(task)
            bar.refresh()


class _Windowed(Model):
    """What the speech recognizer and the vocoder share: cutting an input into windows the program takes."""

    description: ProgramDescription
    unit: int
    """Input steps per output step (see `windows`)."""
    method = "forward"
    """The method each window runs."""

    @property
    def spec(self) -> InputSpec:
        return self.description.input

    @property
    def carried(self) -> CarriedState | None:
        """The state the method carries from window to window, when it does."""
        return self.description.carried

    def plan(
        self, total_steps: int, window_seconds: float | None, overlap_seconds: float | None, tail: int = 0
    ) -> WindowPlan:
        """The windows for an input of `total_steps` steps (samples or mel frames)."""
        spec, unit = self.spec, self.unit
        steps_per_second = spec.sample_rate / spec.samples_per_step
        min_units, max_units = -(-spec.min_length // unit), spec.max_length // unit
        span = f"{spec.seconds(spec.min_length):g}-{spec.seconds(spec.max_length):g} s"
        if window_seconds is None:
            window = max_units
        else:
            if not (math.isfinite(window_seconds) and window_seconds > 0):
                raise WindowOptionError(f"a window of {window_seconds} s is not a duration; give positive seconds")
            window = _whole_units(window_seconds * steps_per_second / unit, math.floor)
            if not min_units <= window <= max_units:
                raise WindowOptionError(
                    f"a window of {window_seconds:g} s does not fit this program, which takes {span}: "
                    "give a window in that range"
                )
        # A carried state leaves windows to overlap by no more than the method's lead: what its convolutions reach.
        lead = None if self.carried is None else self.carried.lead
        least = tail if lead is None else max(tail, lead)
        why = None if lead is None else "what the program's convolutions reach back before it carries its state"
        if overlap_seconds is None and lead is not None:
            overlap = least
        elif overlap_seconds is None:
            share = self.description.window_overlap
            overlap = max(tail, math.floor(window * (DEFAULT_OVERLAP_FRACTION if share is None else share)))
        else:
            if not (math.isfinite(overlap_seconds) and overlap_seconds >= 0):
                raise WindowOptionError(f"an overlap of {overlap_seconds} s is not a duration; give seconds >= 0")
            overlap = _whole_units(overlap_seconds * steps_per_second / unit, math.ceil)
        if not least <= overlap < window:
            asked = overlap * unit / steps_per_second if overlap_seconds is None else overlap_seconds
            raise WindowOptionError(_overlap_problem(asked, overlap, window, least, unit / steps_per_second, why))
        return plan_windows(-(-total_steps // unit), window, overlap, min_units, tail, lead)

    def _each_window(self, plan: WindowPlan, progress: bool, what: str) -> Iterator[Window]:
        return _with_progress(plan.windows, progress, what, "windows")

    def _run_window(
        self, batch: np.ndarray, after: tuple[np.ndarray, ...] = (), state: tuple[np.ndarray, ...] | None = None
    ) -> list[np.ndarray]:
        """The method's outputs on one window, `after` its further inputs (a speaker's index), then the `state` it
        carries in (a first window's when None)."""
        import torch

        if self.carried is not None and state is None:
            state = tuple(np.zeros(shape, dtype=np.float32) for shape in self.carried.input_shapes)
        inputs = (batch, *after, *(state or ()))
        outputs = [
            o.detach().numpy() for o in self.program.run(tuple(torch.from_numpy(a) for a in inputs), self.method)
        ]
        if not all(np.isfinite(o).all() for o in outputs):
            raise AudioInputError(
                f"{self.program.origin}: the program's output is not finite on this input; "
                "check the input's scale (a vocoder takes the mel its recipe computes)"
            )
        return outputs

    def _window_runs(self, after: tuple[np.ndarray, ...] = ()) -> Callable[[Window, np.ndarray], np.ndarray]:
        """A function that runs the method on each window of a plan in turn, `after` its further inputs, and gives
        its main output; it carries the state from each window to the next when the method carries one."""
        carried = self.carried
        if carried is None:
            return lambda window, batch: self._run_window(batch, after)[0]
        before: tuple[int, list[np.ndarray]] | None = None  # the window before: its start, its states at each step

        def run(window: Window, batch: np.ndarray) -> np.ndarray:
            nonlocal before
            state = None
            if before is not None:
                # The state the window before had after the step just before this window's resume step.
                start, states = before
                step = window.start + carried.resume_step - 1 - start
                resume = np.ones((1, 1), dtype=np.float32)
                state = (*(np.ascontiguousarray(s[:, step : step + 1]) for s in states), resume)
            outputs = self._run_window(batch, after, state)
            before = (window.start, outputs[len(outputs) - len(carried.shapes) :])
            return outputs[0]

        return run


class _WaveformEncoder(_Windowed):
    """A program that encodes audio (speech recognizers, classifiers, feature extractors): what they share is
    cutting audio into windows of whole frames and running each. The program takes the waveform itself, or (input
    kind 'fbank') the filterbank rows the description's front end computes from it, window by window."""

    def __init__(self, program: Program, description: ProgramDescription, path: Path | None = None) -> None:
        super().__init__(program, description, path)
        self.unit = description.input.length_multiple
        self._tail: int | None = None

    @property
    def tail(self) -> int:
        """How many fewer frames than `unit`-sample steps the program gives (its receptive field), measured once on
        the shortest input; 0 for a program with one output for the whole input."""
        if self._tail is None:
            spec = self.spec
            if len(self.description.output.layout) < 3:  # no frames axis
                self._tail = 0
            else:
                frames = self._run_window(np.zeros(spec.shape(spec.min_length), dtype=np.float32))[0].shape[1]
                self._tail = max(0, spec.min_length // self.unit - frames)
        return self._tail

    def _encode(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        sample_rate: int | None,
        window_seconds: float | None,
        overlap_seconds: float | None,
        progress: bool,
        what: str,
        emit: Callable[[Window, np.ndarray], None],
    ) -> tuple[float, int]:
        """Run the program over `audio` window by window, handing `emit` each window and its output (batch axis
        dropped) in order; the audio's duration in seconds and the window count."""
        spec, unit = self.spec, self.unit
        source = open_audio(audio, spec.sample_rate, sample_rate)
        try:
            total = source.total if spec.kind != "fbank" else self._fbank_rows(source.total, source.origin)
            plan = self.plan(total, window_seconds, overlap_seconds, self.tail)
            run = self._window_runs()
            for window in self._each_window(plan, progress, what):
                first = window.start * unit
                stop = min(first + window.units * unit, total)
                batch = np.zeros(spec.shape(window.units * unit), dtype=np.float32)
                if spec.kind == "fbank":
                    assert self.description.fbank is not None  # checked when the description was read
                    rows = self.description.fbank.frames(source.read, source.total, first, stop)
                    # Rows past the input (an input shorter than the program's minimum, or not a whole number of
                    # output frames) repeat the mean row: the program normalizes each window over its rows, and
                    # a mean row leaves the window's mean unchanged where zeros (or silence, far below speech in
                    # log-mel) would shift it.
                    batch[0, : rows.shape[0]] = rows
                    batch[0, rows.shape[0] :] = rows.mean(axis=0)
                else:
                    batch[0, : stop - first] = source.read(first, stop)
                emit(window, run(window, batch)[0])
        finally:
            if isinstance(source, AudioFile):
                source.close()
        return source.total / spec.sample_rate, len(plan.windows)

    def _fbank_rows(self, samples: int, origin: str) -> int:
        """How many filterbank rows the description's front end computes from `samples` samples."""
        fbank = self.description.fbank
        assert fbank is not None  # checked when the description was read
        if samples < fbank.min_samples:
            raise AudioInputError(
                f"{origin}: too short for one filterbank row; give at least {fbank.min_samples} samples "
                f"({fbank.min_samples / fbank.sample_rate:.3f} s)"
            )
        return fbank.frame_count(samples)

    def _frames(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        sample_rate: int | None,
        window_seconds: float | None,
        overlap_seconds: float | None,
        progress: bool,
        what: str,
        reduce: Callable[[np.ndarray], np.ndarray],
    ) -> tuple[np.ndarray, float, int]:
        """Every output frame of `audio`, each from one window away from its edges, through `reduce` (applied to
        each window's kept frames); with the seconds and the window count."""
        pieces: list[np.ndarray] = []

        def keep(window: Window, output: np.ndarray) -> None:
            pieces.append(reduce(output[window.keep_start : window.keep_stop]))

        seconds, windows = self._encode(audio, sample_rate, window_seconds, overlap_seconds, progress, what, keep)
        return np.concatenate(pieces), seconds, windows

    def _pooled(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        sample_rate: int | None,
        window_seconds: float | None,
        overlap_seconds: float | None,
        progress: bool,
        what: str,
        transform: Callable[[np.ndarray], np.ndarray],
    ) -> tuple[np.ndarray, float, int]:
        """The one output of the whole of `audio`: for audio longer than the program takes, the mean of its
        windows' outputs (through `transform` first), each weighted by the audio it alone covers."""
        weighted: list[np.ndarray] = []
        weights: list[int] = []

        def add(window: Window, output: np.ndarray) -> None:
            weighted.append(transform(output).astype(np.float64) * window.kept)
            weights.append(window.kept)

        seconds, windows = self._encode(audio, sample_rate, window_seconds, overlap_seconds, progress, what, add)
        return np.asarray(sum(weighted) / sum(weights), dtype=np.float32), seconds, windows


class SpeechRecognizer(_WaveformEncoder):
    """A CTC program: waveform in, one label distribution per frame out."""

    def transcribe(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> Transcript:
        """Greedy CTC transcript of `audio`: a file path (any soundfile format, any rate and channel count), or
        mono samples as an array at `sample_rate` (default: the program's). Audio longer than the program takes
        runs in windows of `window_seconds` (default: the longest input the program takes) overlapping by
        `overlap_seconds` (default: a fifth of a window); every frame comes from one window, away from its edges.
        `progress` shows a progress bar on stderr when there are more than three windows."""
        best, seconds, windows = self._frames(
            audio, sample_rate, window_seconds, overlap_seconds, progress, "transcribing", lambda x: x.argmax(-1)
        )
        labels = best.tolist()
        vocabulary = self.description.vocabulary
        assert vocabulary is not None  # checked when the description was read
        return Transcript(vocabulary.decode_ids(labels), tuple(labels), seconds, windows)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
    return probabilities


@dataclass(frozen=True)
class Segment:
    """A stretch of frames whose best label is the same."""

    start_seconds: float
    end_seconds: float
    label: str
    score: float
    """The label's mean probability over the stretch."""


@dataclass(frozen=True)
class Classification:
    """What an audio classifier says: a probability per label, for the whole input or for each frame."""

    labels: tuple[str, ...]
    """Every label, in the program's output order."""
    scores: np.ndarray
    """Probabilities (softmax of the logits): `(labels,)` for the whole input, `(frames, labels)` per frame."""
    seconds: float
    windows: int
    frame_seconds: float | None = None
    """Seconds per frame of a frame classifier; None for a classifier of the whole input."""

    def top(self, count: int = 5) -> list[tuple[str, float]]:
        """The `count` most probable labels with their probabilities, best first (per frame: averaged over the
        frames)."""
        scores = self.scores if self.scores.ndim == 1 else self.scores.mean(axis=0)
        order = np.argsort(-scores, kind="stable")[:count]
        return [(self.labels[index], float(scores[index])) for index in order]

    def segments(self) -> list[Segment]:
        """A frame classifier's output as stretches of one best label each, in order."""
        if self.frame_seconds is None:
            raise ValueError("segments() is for a frame classifier; top() gives the labels of the whole input")
        best = self.scores.argmax(axis=-1)
        segments: list[Segment] = []
        start = 0
        for stop in range(1, len(best) + 1):
            if stop == len(best) or best[stop] != best[start]:
                label = int(best[start])
                score = float(self.scores[start:stop, label].mean())
                segments.append(
                    Segment(start * self.frame_seconds, stop * self.frame_seconds, self.labels[label], score)
                )
                start = stop
        return segments


class AudioClassifier(_WaveformEncoder):
    """An audio classifier: waveform in, label scores out, for the whole input or (a frame classifier) per frame."""

    def classify(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> Classification:
        """The label probabilities of `audio` (a file path, or mono samples at `sample_rate`). Audio longer than the
        program takes runs in windows as in `SpeechRecognizer.transcribe`: a frame classifier keeps each frame
        from one window; a classifier of the whole input averages its windows' probabilities, each weighted by the
        audio it alone covers."""
        labels = self.description.labels
        assert labels is not None  # checked when the description was read
        arguments = (audio, sample_rate, window_seconds, overlap_seconds, progress, "classifying", _softmax)
        if self.task == "audio-frame-classification":
            scores, seconds, windows = self._frames(*arguments)
            return Classification(labels, scores, seconds, windows, frame_seconds=self.unit / self.spec.sample_rate)
        scores, seconds, windows = self._pooled(*arguments)
        return Classification(labels, scores, seconds, windows)


class FeatureExtractor(_WaveformEncoder):
    """A program whose output is features: the encoder's hidden states per frame, or one embedding (an x-vector)."""

    def features(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        """The features of `audio` (a file path, or mono samples at `sample_rate`): `(frames, features)` hidden
        states, each frame from one window away from its edges; or one `(features,)` embedding, the mean of its
        windows' embeddings (weighted by the audio each alone covers) when the audio is longer than the program
        takes."""
        arguments = (audio, sample_rate, window_seconds, overlap_seconds, progress, "encoding", lambda x: x)
        if self.task == "features":
            return self._frames(*arguments)[0]
        return self._pooled(*arguments)[0]


class _MelSource:
    """Mel frames to vocode, read by ranges of frames: from an array (a .npy is memory-mapped, not read whole) or
    computed from audio by the description's front end, block by block."""

    def __init__(self, total: int, read: Callable[[int, int], np.ndarray]) -> None:
        self.total = total
        self.read = read


class Vocoder(_Windowed):
    """A vocoder program: mel frames in, `hop` waveform samples per frame out."""

    frame_dtype: type[np.generic] = np.float32
    """What the program takes its frames as."""
    clipping_cause: str = VOCODER_CLIPPING_CAUSE
    """What most likely made a written waveform clip (a codec's decode says codes, not a mel)."""

    def __init__(self, program: Program, description: ProgramDescription, path: Path | None = None) -> None:
        super().__init__(program, description, path)
        self.unit = 1

    def _mel_source(self, source: object, sample_rate: int | None) -> tuple[_MelSource, Callable[[], None]]:
        bins = self.spec.feature_size
        is_path = isinstance(source, (str, os.PathLike))
        if is_path and Path(source).suffix.lower() == ".npy":  # type: ignore[arg-type]
            return self._mel_array(load_npy(Path(source)), display(source)), lambda: None  # type: ignore[arg-type]
        if not is_path:
            array = np.asarray(source.detach().cpu().numpy() if hasattr(source, "detach") else source)
            # Mono samples are (samples,) or (1, samples); anything else is a mel, checked as one.
            if not (array.ndim == 1 or (array.ndim == 2 and array.shape[0] == 1 and array.shape[1] != bins)):
                return self._mel_array(array, "the mel spectrogram"), lambda: None
        mel = self.description.mel
        if mel is None:
            raise AudioInputError(
                f"{self.program.origin}: this vocoder's description has no mel front end; give a mel spectrogram .npy"
            )
        audio = open_audio(source, mel.sample_rate, sample_rate)
        origin = audio.origin
        total = mel.frame_count(audio.total)
        if total < 1:
            raise AudioInputError(f"{origin}: too short for one mel frame; give at least {mel.win_length} samples")

        def read(start: int, stop: int) -> np.ndarray:
            return mel.frames(audio.read, audio.total, start, stop)

        return _MelSource(total, read), (audio.close if isinstance(audio, AudioFile) else lambda: None)

    def _mel_array(self, array: np.ndarray, origin: str) -> _MelSource:
        bins = self.spec.feature_size
        _check_mel_dtype(array.dtype, origin)
        if array.ndim == 3 and array.shape[0] == 1:
            array = array[0]
        if array.ndim != 2 or array.shape[1] != bins or array.shape[0] == 0:
            raise AudioInputError(
                f"{origin}: mel spectrogram of shape {tuple(array.shape)}; this vocoder takes (frames, {bins}) "
                f"or (1, frames, {bins})"
            )

        def read(start: int, stop: int) -> np.ndarray:
            block = np.asarray(array[start:stop], dtype=np.float32)
            finite = np.isfinite(block)
            if not finite.all():
                frame = start + int(np.argmin(finite.all(axis=1)))
                raise AudioInputError(
                    f"{origin}: the mel holds NaN or infinite values (the first in frame {frame}); give finite values"
                )
            return block

        return _MelSource(int(array.shape[0]), read)

    def _vocode(
        self,
        source: object,
        sample_rate: int | None,
        window_seconds: float | None,
        overlap_seconds: float | None,
        progress: bool,
        emit: Callable[[np.ndarray], None],
        after: tuple[np.ndarray, ...] = (),
    ) -> int:
        """Vocode `source` window by window, handing the kept samples to `emit` in order; the window count. `after`:
        the method's further inputs, the same for every window."""
        spec = self.spec
        hop = spec.samples_per_step
        mel, close = self._mel_source(source, sample_rate)
        try:
            plan = self.plan(mel.total, window_seconds, overlap_seconds)
            run = self._window_runs(after)
            for window in self._each_window(plan, progress, "vocoding"):
                batch = np.zeros(spec.shape(window.units), dtype=self.frame_dtype)
                frames = mel.read(window.start, window.start + window.valid)
                batch[0, : frames.shape[0]] = frames
                waveform = run(window, batch).reshape(-1)
                if waveform.size < window.keep_stop * hop:
                    raise AudioInputError(
                        f"{self.program.origin}: the program gave {waveform.size} samples for {window.units} frames, "
                        f"not {window.units * hop}: its description does not fit it; export it again"
                    )
                emit(waveform[window.keep_start * hop : window.keep_stop * hop])
        finally:
            close()
        return len(plan.windows)

    def vocode(
        self,
        source: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> Waveform:
        """The waveform of `source`: a mel spectrogram (a .npy path, or an array shaped `(frames, mel_bins)` or
        `(1, frames, mel_bins)`) or audio (a file path, or mono samples at `sample_rate`) that the description's
        front end turns into mel frames first. Exactly `frames * hop` samples. Long inputs run in windows as in
        `SpeechRecognizer.transcribe`; for long inputs prefer `vocode_to_file`, which keeps memory flat."""
        import torch

        pieces: list[np.ndarray] = []
        windows = self._vocode(source, sample_rate, window_seconds, overlap_seconds, progress, pieces.append)
        samples = torch.from_numpy(np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32))
        return Waveform(samples, self.spec.sample_rate, windows)

    def vocode_to_file(
        self,
        source: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        path: str | os.PathLike[str],
        *,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> WrittenAudio:
        """`vocode`, written to `path` as a 16-bit wav window by window; the file appears whole when done, and
        nothing is left behind when anything fails."""
        with WavWriter(path, self.spec.sample_rate) as writer:
            windows = self._vocode(source, sample_rate, window_seconds, overlap_seconds, progress, writer.write)
        return WrittenAudio(
            Path(path), writer.samples, self.spec.sample_rate, windows, writer.clipped, self.clipping_cause
        )


class Codec(_WaveformEncoder):
    """A codec program: ``encode`` turns a waveform into codes, ``decode`` turns codes back into a waveform.

    Codes are int64 codebook indices shaped `(codebooks, frames)`, as transformers gives them, one frame every
    `hop` samples. Long inputs run in windows both ways, as `SpeechRecognizer.transcribe` and `Vocoder.vocode` do:
    each frame of codes (each sample of the waveform) comes from one window, away from its edges.
    """

    method = ENCODE_METHOD

    def __init__(self, program: Program, description: ProgramDescription, path: Path | None = None) -> None:
        super().__init__(program, description, path)
        self._decoder = _CodesDecoder(program, description, path)

    @property
    def codebooks(self) -> int:
        return self._decoder.decoder.codebooks

    @property
    def codebook_size(self) -> int:
        return self._decoder.decoder.codebook_size

    @property
    def hop(self) -> int:
        """Waveform samples per frame of codes."""
        return self.spec.length_multiple

    def encode(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        """The codes of `audio` (a file path, or mono samples at `sample_rate`): `(codebooks, frames)` int64, a frame
        for every `hop` samples begun."""
        arguments = (audio, sample_rate, window_seconds, overlap_seconds, progress, "encoding", lambda x: x)
        frames = self._frames(*arguments)[0]
        return np.ascontiguousarray(frames.T, dtype=np.int64)

    def decode(
        self,
        codes: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> Waveform:
        """The waveform of `codes` (a .npy path, or an array shaped `(codebooks, frames)` or `(1, codebooks,
        frames)`): `frames * hop` samples. For long inputs prefer `decode_to_file`, which keeps memory flat."""
        return self._decoder.vocode(
            codes, window_seconds=window_seconds, overlap_seconds=overlap_seconds, progress=progress
        )

    def decode_to_file(
        self,
        codes: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        path: str | os.PathLike[str],
        *,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> WrittenAudio:
        """`decode`, written to `path` as a 16-bit wav window by window; the file appears whole when done, and
        nothing is left behind when anything fails."""
        return self._decoder.vocode_to_file(
            codes, path, window_seconds=window_seconds, overlap_seconds=overlap_seconds, progress=progress
        )


class _CodesDecoder(Vocoder):
    """A codec's ``decode`` method, cut into windows as a vocoder's mel is: frames of codes in, `hop` samples per
    frame out."""

    method = DECODE_METHOD
    frame_dtype = np.int64
    clipping_cause = CODEC_CLIPPING_CAUSE

    @property
    def decoder(self) -> CodecDecoder:
        assert self.description.decoder is not None  # a codec's description has one (checked when read)
        return self.description.decoder

    @property
    def spec(self) -> InputSpec:
        return self.decoder.input

    @property
    def carried(self) -> CarriedState | None:
        return self.decoder.carried

    def _mel_source(self, source: object, sample_rate: int | None) -> tuple[_MelSource, Callable[[], None]]:
        if isinstance(source, (str, os.PathLike)):
            array, origin = load_npy(Path(source), "codes", "int64"), display(source)
        else:
            array = np.asarray(source.detach().cpu().numpy() if hasattr(source, "detach") else source)
            origin = "the codes"
        codebooks, size = self.decoder.codebooks, self.decoder.codebook_size
        if array.ndim == 3 and array.shape[0] == 1:
            array = array[0]
        if array.ndim != 2 or array.shape[0] != codebooks or array.shape[1] == 0:
            raise AudioInputError(
                f"{origin}: codes of shape {tuple(array.shape)}; this codec takes ({codebooks}, frames) or "
                f"(1, {codebooks}, frames), as its encode gives them"
            )
        if array.dtype.kind not in "iu":
            raise AudioInputError(
                f"{origin}: the codes are {array.dtype} values; give the int64 codebook indices its encode gives"
            )

        def read(start: int, stop: int) -> np.ndarray:
            block = np.asarray(array[:, start:stop], dtype=np.int64).T
            outside = (block < 0) | (block >= size)
            if outside.any():
                frame = start + int(np.argmax(outside.any(axis=1)))
                raise AudioInputError(
                    f"{origin}: a code outside the codebooks' {size} entries (the first in frame {frame}); give "
                    f"indices from 0 to {size - 1}, as its encode gives them"
                )
            return block

        return _MelSource(int(array.shape[1]), read), lambda: None


class ChunkedCodec(Model):
    """A codec program that runs on its model's own chunks (EnCodec at 48 kHz: stereo, 1 s chunks overlapping by
    10 ms, each normalized by its loudness), as transformers' feature extractor and model do: the audio is
    zero-padded to whole chunks, each chunk is encoded on its own (with its scale), and decoded chunks are joined
    by a linear overlap-add. The codes are transformers' `audio_codes` and `audio_scales` less the chunks that
    start after the audio ends (transformers also encodes the sliver of padding past the last whole chunk, whose
    decoded samples it cuts).
    """

    description: ProgramDescription

    def __init__(self, program: Program, description: ProgramDescription, path: Path | None = None) -> None:
        super().__init__(program, description, path)
        assert description.decoder is not None and description.decoder.chunks is not None  # how load chose it
        self.decoder = description.decoder
        self.chunks = description.decoder.chunks

    @property
    def sample_rate(self) -> int:
        return self.description.sample_rate

    @property
    def channels(self) -> int:
        return self.description.input.channels

    @property
    def chunk_samples(self) -> int:
        """Samples (of each channel) in a chunk: what ``encode`` takes."""
        return self.description.input.max_length

    @property
    def codebooks(self) -> int:
        return self.decoder.codebooks

    @property
    def codebook_size(self) -> int:
        return self.decoder.codebook_size

    def encode(
        self,
        audio: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        sample_rate: int | None = None,
        progress: bool = False,
    ) -> ChunkedCodes:
        """The codes of `audio`: a file path (any format and rate; mono plays on both channels of a stereo codec), or
        samples at `sample_rate` shaped `(samples,)` or `(channels, samples)`."""
        import torch

        length, stride = self.chunk_samples, self.chunks.stride
        source = open_audio(audio, self.sample_rate, sample_rate, self.channels)
        codes: list[np.ndarray] = []
        scales: list[float] = []
        try:
            count = -(-source.total // stride)
            for chunk in _with_progress(range(count), progress, "encoding", "chunks"):
                start = chunk * stride
                block = source.read(start, min(start + length, source.total)).reshape(self.channels, -1)
                batch = np.zeros((self.channels, length), dtype=np.float32)
                batch[:, : block.shape[1]] = block
                inputs = (torch.from_numpy(batch.reshape(self.description.input.shape(length))),)
                outputs = self.program.run(inputs, ENCODE_METHOD)
                codes.append(outputs[0].numpy()[0].T)
                if self.chunks.scaled:
                    scales.append(float(outputs[1].reshape(())))
        finally:
            if isinstance(source, AudioFile):
                source.close()
        array = np.ascontiguousarray(np.stack(codes), dtype=np.int64)
        return ChunkedCodes(array, np.array(scales, dtype=np.float32) if self.chunks.scaled else None, source.total)

    def _decode(
        self, codes: ChunkedCodes | str | os.PathLike[str], progress: bool, emit: Callable[[np.ndarray], None]
    ) -> int:
        """Decode `codes` chunk by chunk, handing the final samples to `emit` in order; the chunk count."""
        import torch

        if not isinstance(codes, ChunkedCodes):
            origin = display(codes)
            codes = ChunkedCodes.load(codes)
        else:
            origin = "the codes"
        codes.check(self.decoder, origin)
        chunk_samples = self.decoder.input.max_length * self.decoder.input.samples_per_step
        joined = LinearOverlapAdd(chunk_samples, self.chunks.stride, self.channels)
        remaining = codes.samples
        for chunk in _with_progress(range(codes.chunks), progress, "decoding", "chunks"):
            inputs = [torch.from_numpy(np.ascontiguousarray(codes.codes[chunk].T, dtype=np.int64)[None])]
            if codes.scales is not None:
                inputs.append(torch.tensor([[codes.scales[chunk]]], dtype=torch.float32))
            waveform = self.program.run(tuple(inputs), DECODE_METHOD)[0].numpy().reshape(self.channels, -1)
            if not np.isfinite(waveform).all():
                raise AudioInputError(f"{self.program.origin}: the program's output is not finite on these codes")
            final = joined.add(waveform, last=chunk == codes.chunks - 1)[:, :remaining]
            remaining -= final.shape[1]
            emit(final if self.channels > 1 else final[0])
        return codes.chunks

    def decode(self, codes: ChunkedCodes | str | os.PathLike[str], *, progress: bool = False) -> Waveform:
        """The waveform of `codes` (what `encode` gave, or the .npz it was saved to): exactly the samples encoded,
        `(samples,)` mono or `(channels, samples)`. For long inputs prefer `decode_to_file`, which keeps memory
        flat."""
        import torch

        pieces: list[np.ndarray] = []
        chunks = self._decode(codes, progress, pieces.append)
        return Waveform(torch.from_numpy(np.concatenate(pieces, axis=-1)), self.sample_rate, chunks)

    def decode_to_file(
        self, codes: ChunkedCodes | str | os.PathLike[str], path: str | os.PathLike[str], *, progress: bool = False
    ) -> WrittenAudio:
        """`decode`, written to `path` as a 16-bit wav chunk by chunk; the file appears whole when done, and nothing
        is left behind when anything fails."""
        with WavWriter(path, self.sample_rate, self.channels) as writer:
            chunks = self._decode(codes, progress, writer.write)
        return WrittenAudio(Path(path), writer.samples, self.sample_rate, chunks, writer.clipped, CODEC_CLIPPING_CAUSE)


@dataclass(frozen=True)
class Voice:
    """How a `Synthesizer` speaks: the seed of its noise, and the scales it draws with (None: the checkpoint's)."""

    seed: int = 0
    noise_scale: float | None = None
    """The latents' noise, times the prior's deviation; 0 speaks the prior's means."""
    noise_scale_duration: float | None = None
    """The durations' noise; 0 gives each token its most likely duration."""
    speaking_rate: float | None = None
    """Durations are divided by it: 1.25 speaks a quarter faster."""
    speaker: int | None = None
    """Which of a voice's speakers speaks (from 0); None: the first. A voice of one speaker takes none or 0."""

    def __post_init__(self) -> None:
        rate = self.speaking_rate
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise TextError(f"a speaking rate of {rate} is not a speed; give a positive number (1 is the voice's own)")
        for name in ("noise_scale", "noise_scale_duration"):
            scale = getattr(self, name)
            if scale is not None and not (math.isfinite(scale) and scale >= 0):
                raise TextError(f"a {name.replace('_', ' ')} of {scale} is not a scale; give a number of at least 0")
        if not 0 <= self.seed < 2**32:
            raise TextError(f"seed {self.seed} is outside 0 .. 4294967295; give a seed in that range")
        if self.speaker is not None and self.speaker < 0:
            raise TextError(f"speaker {self.speaker} is not a speaker's index; give 0 or more")

    def speaker_inputs(self, text: TextToSpeech) -> tuple[np.ndarray, ...]:
        """What each method takes after its own inputs: the speaker's index for a voice of several speakers."""
        speaker = self.speaker or 0
        if speaker >= text.speakers:
            voices = (
                "one speaker: leave the speaker out" if text.speakers == 1 else f"speakers 0 to {text.speakers - 1}"
            )
            raise TextError(f"speaker {speaker} is not in this voice, which has {voices}")
        return (np.array([speaker], dtype=np.int64),) * text.speaker_inputs

    def settings(self, text: TextToSpeech) -> tuple[float, ...]:
        """The noise scale, the durations' noise scale and the speaking rate: the voice's, else the checkpoint's."""
        chosen = (self.noise_scale, self.noise_scale_duration, self.speaking_rate)
        own = (text.noise_scale, text.noise_scale_duration, text.speaking_rate)
        return tuple(default if setting is None else setting for setting, default in zip(chosen, own, strict=True))


class Synthesizer(Vocoder):
    """A text-to-speech program (VITS): text in, speech out.

    Each sentence runs the ``encode`` method once (its token ids and duration noise to the prior and durations);
    the host repeats each token's prior for its frames and draws the latents (`audiodeploy.program.tts`); the
    ``decode`` method turns them into speech, in windows when a sentence is longer than the program takes. The noise
    is torch's for the voice's seed: one sentence and eager transformers `VitsModel` after ``torch.manual_seed(seed)``
    give the same samples; the sentences of a text draw from one stream, as consecutive calls of the model would.
    """

    method = DECODE_METHOD

    @property
    def text(self) -> TextToSpeech:
        assert self.description.text is not None  # a tts description has one (checked when read)
        return self.description.text

    def token_ids(self, sentence: str) -> np.ndarray:
        """The ``(tokens,)`` int64 ids ``encode`` takes for `sentence`; `TextError` when it is too long or has
        nothing the voice can say."""
        text = self.text
        ids = text.front_end.token_ids(sentence)
        if not text.min_tokens <= ids.size <= text.max_tokens:
            raise TextError(
                f"the sentence {_quoted(sentence)} is {ids.size} tokens, this program takes {text.min_tokens} to "
                f"{text.max_tokens}: split it with punctuation (. ! ? ;)"
            )
        return ids

    def _fits(self, text: str) -> bool:
        """Whether `text` is no more tokens than ``encode`` takes (or has nothing the voice can say)."""
        try:
            return self.text.front_end.token_ids(text).size <= self.text.max_tokens
        except TextError:
            return True

    def latents(self, sentence: str, voice: Voice, normal: TorchNormal) -> np.ndarray:
        """The ``(frames, flow_size)`` latents of `sentence`, its noise drawn from `normal`."""
        import torch

        text = self.text
        ids = self.token_ids(sentence)
        noise_scale, scale_duration, rate = voice.settings(text)
        duration_noise = normal.randn(2 * ids.size).reshape(1, 2, ids.size) * np.float32(scale_duration)
        speaker = voice.speaker_inputs(text)
        inputs = tuple(torch.from_numpy(a) for a in (ids[None], duration_noise, *speaker))
        means, log_variances, log_durations = (o.detach().numpy() for o in self.program.run(inputs, ENCODE_METHOD))
        durations = frame_durations(log_durations[0], rate)
        frames = int(durations.sum())
        if frames < 1:  # as VitsModel: one frame, of the prior's noise alone
            means, log_variances = np.zeros_like(means[:, :1]), np.zeros_like(log_variances[:, :1])
            durations, frames = np.ones(1, dtype=np.int64), 1
        # torch draws VitsModel's latent noise with randn_like of a transposed tensor: strided, unless one frame.
        noise = normal.randn(frames * text.flow_size, contiguous=frames == 1).reshape(frames, text.flow_size)
        return prior_latents(means[0], log_variances[0], durations, noise, noise_scale)[0]

    def _speak(
        self,
        text: str,
        voice: Voice,
        window_seconds: float | None,
        overlap_seconds: float | None,
        progress: bool,
        emit: Callable[[np.ndarray], None],
    ) -> int:
        """Speak `text` sentence by sentence, handing the samples to `emit` in order; the window count."""
        if not text.strip():
            raise TextError("the text is empty: give the words to speak")
        normal = TorchNormal(voice.seed)
        after = voice.speaker_inputs(self.text)  # checked before any sentence is spoken
        windows = spoken = 0
        for sentence in sentences(text):
            # A sentence longer than `encode` takes is spoken in pieces, cut after clauses, else between words.
            for piece in pieces_within(sentence, self._fits):
                try:
                    latents = self.latents(piece, voice, normal)
                except TextError:
                    if self.text.front_end.normalized(piece):
                        raise
                    continue  # nothing the voice can say (punctuation, another script): as the tokenizer, silence
                windows += self._vocode(latents, None, window_seconds, overlap_seconds, progress, emit, after)
                spoken += 1
        if not spoken:
            raise TextError(
                f"nothing in {_quoted(text)} is in the voice's vocabulary ({self.text.front_end.origin}): give text "
                "in its language"
            )
        return windows

    def synthesize(
        self,
        text: str,
        voice: Voice = Voice(),
        *,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> Waveform:
        """The speech of `text`, sentence after sentence. For long texts prefer `synthesize_to_file`, which keeps
        memory flat."""
        import torch

        pieces: list[np.ndarray] = []
        windows = self._speak(text, voice, window_seconds, overlap_seconds, progress, pieces.append)
        return Waveform(torch.from_numpy(np.concatenate(pieces)), self.spec.sample_rate, windows)

    def synthesize_to_file(
        self,
        text: str,
        path: str | os.PathLike[str],
        voice: Voice = Voice(),
        *,
        window_seconds: float | None = None,
        overlap_seconds: float | None = None,
        progress: bool = False,
    ) -> WrittenAudio:
        """`synthesize`, written to `path` as a 16-bit wav sentence by sentence; the file appears whole when done,
        and nothing is left behind when anything fails."""
        with WavWriter(path, self.spec.sample_rate) as writer:
            windows = self._speak(text, voice, window_seconds, overlap_seconds, progress, writer.write)
        cause = "a voice with synthetic weights, or a large --noise-scale, speaks out of range"
        return WrittenAudio(Path(path), writer.samples, self.spec.sample_rate, windows, writer.clipped, cause)


def _quoted(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def _check_mel_dtype(dtype: np.dtype, origin: str) -> None:
    """A mel is floating point (log magnitudes); integers are a quantized or mislabelled array, and text or
    records are not a mel at all."""
    if dtype.kind == "f":
        return
    if dtype.kind in "iub":
        raise AudioInputError(
            f"{origin}: the mel holds {dtype} values, not floating point; give the float mel its recipe computes "
            "(e.g. mel.astype('float32') if the integers are the real values)"
        )
    raise AudioInputError(
        f"{origin}: not a numeric mel array (its values are {dtype}); give a float32 array shaped (frames, mel_bins)"
    )


def load(path: str | os.PathLike[str], data_path: str | os.PathLike[str] | None = None) -> Model:
    """Load a .pte and its description (the sidecar beside it), checked against each other.

    Returns a `SpeechRecognizer` for a CTC program, a `Vocoder` for a vocoder, an `AudioClassifier` for a
    classifier (of the whole input or per frame), a `FeatureExtractor` for hidden states or speaker embeddings, a
    `Codec` for a codec, a `Synthesizer` for text to speech, and
    a plain `Model` (which can only `run`) when there is no sidecar. Raises `ProgramLoadError` for a file that is not a loadable program
    and `DescriptionError` for a sidecar that is malformed or describes another program; both say what to do.
    """
    path = Path(path)
    program = Program.load(path, data_path)
    if not sidecar_path(path).exists():
        return Model(program, None, path)
    sidecar = read_sidecar(path)
    sidecar.check_digest(program.sha256, display(path))
    description = sidecar.description
    description.check_program(program, display(path))
    if description.decoder is not None and description.decoder.chunks is not None:
        return ChunkedCodec(program, description, path)
    return _MODEL_OF_TASK[description.task](program, description, path)


_MODEL_OF_TASK: dict[Task, type[_Windowed]] = {
    "ctc-asr": SpeechRecognizer,
    "vocoder": Vocoder,
    "audio-classification": AudioClassifier,
    "audio-frame-classification": AudioClassifier,
    "speaker-embedding": FeatureExtractor,
    "features": FeatureExtractor,
    "codec": Codec,
    "tts": Synthesizer,
}

__all__ = [
    "AudioClassifier",
    "ChunkedCodec",
    "Classification",
    "Codec",
    "DescriptionError",
    "FeatureExtractor",
    "Model",
    "Segment",
    "SpeechRecognizer",
    "Synthesizer",
    "TextError",
    "Transcript",
    "Vocoder",
    "Voice",
    "Waveform",
    "WindowOptionError",
    "WrittenAudio",
    "load",
]

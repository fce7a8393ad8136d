"""Log-mel spectrograms of the vocoders' front ends and Kaldi-style filterbanks (`Fbank`), computed with numpy alone.

A vocoder only sounds right on the features its checkpoint was trained on, so each flavor reproduces one
published front end, frame for frame:

- `speecht5`: transformers' `SpeechT5FeatureExtractor(audio_target=...)`
  (`models/speecht5/feature_extraction_speecht5.py` `_extract_mel_features` → `audio_utils.spectrogram`):
  reflect-pad `win_length // 2` on both sides (`center=True`), frames of `win_length` samples times a periodic
  Hann window, FFT of `n_fft` points (default: the next power of two, `audio_utils.optimal_fft_length`), the
  magnitude `|X|`, slaney mel filters, `log10(max(1e-10, mel))`. The extractor takes its hop and window in
  whole milliseconds; here they are samples, and the two agree whenever the samples are whole milliseconds.
- `univnet`: transformers' `UnivNetFeatureExtractor(pad_end=False)` (`models/univnet/feature_extraction_univnet.py`
  `mel_spectrogram`): reflect-pad `int((n_fft - hop_length) / 2)` on both sides, frames of `n_fft` samples without
  centering, the magnitude `sqrt(re² + im² + 1e-9)`, slaney mel filters, `log(max(mel, 1e-5))`. (The extractor
  also cuts its input at `max_length_s`, 10 s by default, before the spectrogram; nothing is cut here.)
- `hifigan`: `mel_spectrogram` of the original HiFi-GAN repository (jik876/hifi-gan `meldataset.py`): the same
  formula as `univnet` written with `torch.stft(center=False)`, whose window of `win_length` is centred in the
  `n_fft` frame, and librosa's float32 filter bank (`librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax)`).
- `vocos`: Vocos' `MelSpectrogramFeatures(padding="center")` (gemelo-ai/vocos `feature_extractors.py`), which is
  torchaudio's `MelSpectrogram(sample_rate, n_fft, hop_length, n_mels, center=True, power=1)` with its defaults
  then `log(clip(mel, 1e-7))`: `torch.stft(center=True)` reflect-pads `n_fft // 2` on both sides, frames of
  `n_fft` samples (the window is `n_fft` long: Vocos passes no `win_length`) times a periodic Hann window, the
  magnitude `|X|`, HTK mel filters without normalization (`melscale_fbanks(norm=None, mel_scale="htk")`).
  torchaudio computes in float32 (its FFT and its filters' edges); here in float64, as for the others.

All four compute in float64 (transformers promotes to float64 before its FFT) and return float32. A frame's
values depend only on the samples under its window, so `MelSpectrogram.frames` computes any run of frames
from the samples that run needs; `__call__` is that same code over the whole signal.

`Fbank` is the other kind of front end: the input of speech encoders that take filterbank features instead of a
waveform (wav2vec2-bert), transformers' `SeamlessM4TFeatureExtractor` without its per-utterance normalization.

Importing this module imports neither torch nor any model library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np

from ._fields import float_field, int_field, optional_float_field, optional_int_field, str_field

if TYPE_CHECKING:
    import torch

MelFlavor = Literal["speecht5", "univnet", "hifigan", "vocos"]

SampleReader = Callable[[int, int], np.ndarray]
"""`read(a, b)`: samples `a` to `b` (exclusive) of the mono float32 signal, as a 1-D array."""

# Frames per FFT batch. Bounds the float64 temporaries (about 3 × frames × n_fft × 8 bytes, 6 MiB at
# n_fft 1024) however long the block a caller asks for.
_CHUNK_FRAMES = 256


@dataclass(frozen=True)
class _FlavorMath:
    """What distinguishes one published front end from another; the rest of the pipeline is shared."""

    centered: bool
    """Frames of `win_length` centred on `frame × hop` by a `win_length // 2` pad (`audio_utils.spectrogram`
    with `center=True`), rather than frames of `n_fft` after a `(n_fft - hop) // 2` pad (HiFi-GAN)."""
    power_floor: float
    """Added to `re² + im²` before the square root."""
    mel_floor: float
    log: Callable[[np.ndarray], np.ndarray]
    filter_dtype: type[np.floating]
    """dtype the triangular filters are rounded to before slaney normalization."""
    mel_scale: Literal["slaney", "htk"] = "slaney"
    """Slaney's scale with slaney (area) normalization, or HTK's scale without normalization (torchaudio's defaults)."""
    fft_is_window: bool = False
    """The FFT is as long as the window (`n_fft` is the window length), rather than the next power of two."""


_FLAVORS: dict[str, _FlavorMath] = {
    # `spectrogram(power=1.0, mel_floor=1e-10, log_mel="log10")`; mel_filter_bank's default float64 filters.
    "speecht5": _FlavorMath(centered=True, power_floor=0.0, mel_floor=1e-10, log=np.log10, filter_dtype=np.float64),
    # UnivNetFeatureExtractor's defaults: mel_floor=1e-9 inside the root, compression_clip_val=1e-5,
    # compression_factor=1.0; float64 filters.
    "univnet": _FlavorMath(centered=False, power_floor=1e-9, mel_floor=1e-5, log=np.log, filter_dtype=np.float64),
    # meldataset.py: `sqrt(spec.pow(2).sum(-1) + 1e-9)`, `log(clamp(x, min=1e-5) * 1)`; librosa's filters are float32.
    "hifigan": _FlavorMath(centered=False, power_floor=1e-9, mel_floor=1e-5, log=np.log, filter_dtype=np.float32),
    # torchaudio's MelSpectrogram(power=1): `spec.abs()`, htk filters, no norm; vocos' safe_log clips at 1e-7.
    "vocos": _FlavorMath(
        centered=True,
        power_floor=0.0,
        mel_floor=1e-7,
        log=np.log,
        filter_dtype=np.float64,
        mel_scale="htk",
        fft_is_window=True,
    ),
}
_FLAVOR_NAMES = ", ".join(map(repr, _FLAVORS))


@dataclass(frozen=True)
class MelSpectrogram:
    """A vocoder's mel-spectrogram front end (see the module docstring for each flavor's formula).

    `n_fft` is the FFT length; `None` keeps each flavor's own choice: the next power of two at or above
    `win_length` for `speecht5` (what SpeechT5's extractor computes, `win_length` itself for the usual 1024),
    `win_length` for `univnet`, `hifigan` and `vocos` (which takes no other). The original HiFi-GAN V1 front end is
    `MelSpectrogram("hifigan", 22050, 80, 256, 1024, 0.0, 8000.0, n_fft=1024)`, Vocos' mel-24khz one
    `MelSpectrogram("vocos", 24000, 100, 256, 1024, 0.0, None)`.

    `__call__` gives `(1, frames, mel_bins)` float32, one frame every `hop_length` samples.
    """

    flavor: MelFlavor
    sample_rate: int
    mel_bins: int
    hop_length: int
    win_length: int
    fmin: float
    fmax: float | None
    """`None`: the Nyquist frequency, `sample_rate / 2`."""
    n_fft: int | None = None

    def __post_init__(self) -> None:
        if self.flavor not in _FLAVORS:
            raise ValueError(f"mel flavor should be one of {_FLAVOR_NAMES}, not {self.flavor!r}")
        for name in ("sample_rate", "mel_bins", "hop_length", "win_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"mel {name} should be positive, not {getattr(self, name)}")
        if self.n_fft is not None and self.n_fft < self.win_length:
            raise ValueError(f"mel n_fft ({self.n_fft}) should be at least win_length ({self.win_length})")
        if self._math.fft_is_window and self.n_fft not in (None, self.win_length):
            # torchaudio's window would then be centred in a longer frame, with padding n_fft // 2, not
            # win_length // 2: not what the framing below computes, and not a front end Vocos builds.
            raise ValueError(
                f"a {self.flavor} front end's n_fft is its win_length ({self.win_length}), not {self.n_fft}"
            )
        if not self._math.centered and self.fft_length < self.hop_length:
            # The pad `(n_fft - hop) // 2` would be negative.
            raise ValueError(
                f"a {self.flavor} front end needs n_fft ({self.fft_length}) >= hop_length ({self.hop_length})"
            )
        if not 0 <= self.fmin < self.max_frequency <= self.sample_rate / 2:
            raise ValueError(
                f"mel frequencies should satisfy 0 <= fmin < fmax <= sample_rate / 2, "
                f"not fmin={self.fmin}, fmax={self.max_frequency} at {self.sample_rate} Hz"
            )

    @property
    def fft_length(self) -> int:
        """The FFT length actually used (`n_fft`, or the flavor's default when it is `None`)."""
        if self.n_fft is not None:
            return self.n_fft
        # audio_utils.optimal_fft_length: 2 ** ceil(log2(window_length)).
        if self._math.centered and not self._math.fft_is_window:
            return 1 << (self.win_length - 1).bit_length()
        return self.win_length

    @property
    def max_frequency(self) -> float:
        return self.fmax if self.fmax is not None else self.sample_rate / 2

    @property
    def padding(self) -> int:
        """Samples reflected onto each end of the signal before framing."""
        if self._math.centered:
            return self.win_length // 2
        return (self.fft_length - self.hop_length) // 2

    @property
    def min_samples(self) -> int:
        """The shortest signal with one frame: reflect padding needs more samples than the pad (as `torch`'s
        does; numpy would reflect again), and the padded signal must hold one frame."""
        return max(self.padding + 1, self._frame_span - 2 * self.padding, 1)

    def frame_count(self, samples: int) -> int:
        """How many frames `__call__` gives for `samples` samples; ValueError below `min_samples`.

        `audio_utils.spectrogram` and `torch.stft(center=False)` both count `1 + (padded - span) // hop`.
        """
        if samples < self.min_samples:
            raise ValueError(
                f"audio is too short for the {self.flavor} mel front end: {samples} samples, it needs at least "
                f"{self.min_samples} ({self.min_samples / self.sample_rate:.3f} s at {self.sample_rate} Hz)"
            )
        return 1 + (samples + 2 * self.padding - self._frame_span) // self.hop_length

    def frames(self, read: SampleReader, total_samples: int, start_frame: int, stop_frame: int) -> np.ndarray:
        """Rows `start_frame:stop_frame` of the spectrogram of a `total_samples`-long signal, `(frames, mel_bins)`
        float32, the same values as those rows of `__call__` on the whole signal.

        `read` is called once, for the samples under those frames' windows and, at the ends of the signal, the
        samples the reflect padding mirrors; never outside `[0, total_samples]`.
        """
        count = self.frame_count(total_samples)
        if not 0 <= start_frame <= stop_frame <= count:
            raise ValueError(
                f"frames {start_frame}:{stop_frame} are outside the {count} frames of {total_samples} samples"
            )
        result = np.empty((stop_frame - start_frame, self.mel_bins), dtype=np.float32)
        if start_frame == stop_frame:
            return result
        first, stop = self._sample_range(start_frame, stop_frame)
        # Reflection is monotone between its folds, so the samples [first, stop) reflect onto lie between the
        # reflections of its ends and of the folds 0 and N - 1 it contains.
        extremes = [first, stop - 1] + [fold for fold in (0, total_samples - 1) if first <= fold < stop]
        reflected = _reflect(np.array(extremes), total_samples)
        low, high = int(reflected.min()), int(reflected.max()) + 1
        samples = np.asarray(read(low, high))
        if samples.shape != (high - low,):
            raise ValueError(f"read({low}, {high}) gave an array of shape {samples.shape}, not ({high - low},)")
        for chunk_start in range(start_frame, stop_frame, _CHUNK_FRAMES):
            chunk_stop = min(chunk_start + _CHUNK_FRAMES, stop_frame)
            chunk_first, chunk_end = self._sample_range(chunk_start, chunk_stop)
            positions = _reflect(np.arange(chunk_first, chunk_end), total_samples) - low
            result[chunk_start - start_frame : chunk_stop - start_frame] = self._log_mel(
                samples[positions].astype(np.float64)
            )
        return result

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Mel spectrogram of a mono waveform (1-D, or `(1, samples)`) at `sample_rate`: `(1, frames, mel_bins)`."""
        import torch

        if isinstance(waveform, torch.Tensor):
            waveform = waveform.detach().cpu().numpy()
        # float32 first, as the extractors convert their input, so that float64 callers get the same frames.
        audio = np.asarray(waveform, dtype=np.float32)
        if audio.ndim == 2 and audio.shape[0] == 1:
            audio = audio[0]
        if audio.ndim != 1:
            raise ValueError(f"a mel front end takes a mono waveform, (samples,) or (1, samples), not {audio.shape}")
        mel = self.frames(lambda a, b: audio[a:b], audio.size, 0, self.frame_count(audio.size))
        return torch.from_numpy(mel[np.newaxis])

    def to_dict(self) -> dict[str, object]:
        return {
            "flavor": self.flavor,
            "sample_rate": self.sample_rate,
            "mel_bins": self.mel_bins,
            "hop_length": self.hop_length,
            "win_length": self.win_length,
            "fmin": self.fmin,
            "fmax": self.fmax,
            "n_fft": self.n_fft,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> MelSpectrogram:
        """The front end `to_dict` wrote (`n_fft` may be absent, as in sidecars written before it existed);
        ValueError for a malformed dictionary."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a mel front end should be a dictionary, not {data!r}")
        flavor = str_field(data, "flavor")
        if flavor not in _FLAVORS:
            raise ValueError(f"field 'flavor' should be one of {_FLAVOR_NAMES}, not {flavor!r}")
        return cls(
            flavor=flavor,  # type: ignore[arg-type]  # checked against _FLAVORS above
            sample_rate=int_field(data, "sample_rate"),
            mel_bins=int_field(data, "mel_bins"),
            hop_length=int_field(data, "hop_length"),
            win_length=int_field(data, "win_length"),
            fmin=float_field(data, "fmin"),
            fmax=optional_float_field(data, "fmax"),
            n_fft=optional_int_field(data, "n_fft") if "n_fft" in data else None,
        )

    @property
    def _math(self) -> _FlavorMath:
        return _FLAVORS[self.flavor]

    @property
    def _frame_span(self) -> int:
        """Padded samples one frame spans when counting frames: the window for `center=True` framing, `n_fft`
        for `torch.stft`."""
        return self.win_length if self._math.centered else self.fft_length

    def _sample_range(self, start_frame: int, stop_frame: int) -> tuple[int, int]:
        """Signal positions (negative or past the end inside the padding) under the windows of those frames.

        Only the window's `win_length` samples matter: in `torch.stft` a shorter window is centred in the
        `n_fft` frame with zeros around it, and where the windowed samples sit in the FFT buffer changes only
        the phase, not the magnitude every flavor keeps.
        """
        offset = 0 if self._math.centered else (self.fft_length - self.win_length) // 2
        first = start_frame * self.hop_length + offset - self.padding
        return first, first + (stop_frame - start_frame - 1) * self.hop_length + self.win_length

    def _log_mel(self, segment: np.ndarray) -> np.ndarray:
        """Log-mel rows of the frames of `segment` (float64 samples from the first frame's window start)."""
        windows = np.lib.stride_tricks.sliding_window_view(segment, self.win_length)[:: self.hop_length]
        spectrum = np.fft.rfft(windows * self._window, n=self.fft_length, axis=-1)
        magnitude = np.sqrt(spectrum.real**2 + spectrum.imag**2 + self._math.power_floor)
        mel = np.maximum(magnitude @ self._filters, self._math.mel_floor)
        return self._math.log(mel).astype(np.float32)

    @cached_property
    def _window(self) -> np.ndarray:
        # window_function(periodic=True) and torch.hann_window(periodic=True): a Hann window of length + 1,
        # last sample dropped.
        return np.hanning(self.win_length + 1)[:-1]

    @cached_property
    def _filters(self) -> np.ndarray:
        if self._math.mel_scale == "htk":
            return htk_mel_filters(self.fft_length, self.mel_bins, self.fmin, self.max_frequency, self.sample_rate)
        return slaney_mel_filters(
            self.fft_length,
            self.mel_bins,
            self.fmin,
            self.max_frequency,
            self.sample_rate,
            dtype=self._math.filter_dtype,
        ).astype(np.float64)


def slaney_mel_filters(
    n_fft: int,
    mel_bins: int,
    fmin: float,
    fmax: float,
    sample_rate: int,
    dtype: type[np.floating] = np.float64,
) -> np.ndarray:
    """`(n_fft // 2 + 1, mel_bins)` triangular filters on the slaney mel scale with slaney (area) normalization.

    transformers' `audio_utils.mel_filter_bank(norm="slaney", mel_scale="slaney", dtype=dtype)`, which with
    `dtype=np.float32` is librosa's default `librosa.filters.mel(sr=..., n_fft=..., n_mels=..., fmin=..., fmax=...)`
    transposed: the triangles are rounded to `dtype` before the normalization multiplies them. The FFT bins sit
    at `linspace(0, sample_rate / 2, n_fft // 2 + 1)`; transformers writes `sample_rate // 2` and librosa
    `rfftfreq(n_fft, 1 / sample_rate)`, which agree for an even rate and an even `n_fft`.
    """
    edges = _slaney_mel_to_hertz(np.linspace(_hertz_to_slaney_mel(fmin), _hertz_to_slaney_mel(fmax), mel_bins + 2))
    bins = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    triangles = _triangles(edges, bins).astype(dtype)
    # Slaney normalization: each filter scaled by 2 / (its width in Hz), for about constant energy per filter.
    return (triangles * (2.0 / (edges[2:] - edges[:-2]))).astype(dtype)


def htk_mel_filters(n_fft: int, mel_bins: int, fmin: float, fmax: float, sample_rate: int) -> np.ndarray:
    """`(n_fft // 2 + 1, mel_bins)` triangular filters on the HTK mel scale, unnormalized, in float64.

    torchaudio's `melscale_fbanks(n_fft // 2 + 1, fmin, fmax, mel_bins, sample_rate)` (its defaults `norm=None`,
    `mel_scale="htk"`), which computes the same formula in float32: mel `2595 log10(1 + f / 700)`, `mel_bins + 2`
    edges evenly spaced in mels, FFT bins at `linspace(0, sample_rate // 2, n_fft // 2 + 1)`.
    """
    mels = np.linspace(2595.0 * np.log10(1.0 + fmin / 700.0), 2595.0 * np.log10(1.0 + fmax / 700.0), mel_bins + 2)
    edges = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    return _triangles(edges, np.linspace(0, sample_rate // 2, n_fft // 2 + 1))


def _triangles(edges: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """`(bins, len(edges) - 2)` triangular filters, each the lower of its rising and falling edges, at least 0
    (transformers' `_create_triangular_filter_bank`, torchaudio's `_create_triangular_filterbank`)."""
    widths = np.diff(edges)
    slopes = edges[np.newaxis, :] - bins[:, np.newaxis]
    return np.maximum(0.0, np.minimum(-slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]))


# The slaney mel scale (Slaney's Auditory Toolbox), with audio_utils.hertz_to_mel / mel_to_hertz's constants and
# operation order: linear below 1 kHz at 3 mels per 200 Hz, logarithmic above with 27 mels per factor of 6.4.
_LOG_REGION_HERTZ = 1000.0
_LOG_REGION_MEL = 15.0
_MELS_PER_LOG_HERTZ = 27.0 / np.log(6.4)
_LOG_HERTZ_PER_MEL = np.log(6.4) / 27.0


def _hertz_to_slaney_mel(hertz: float) -> float:
    if hertz < _LOG_REGION_HERTZ:
        return 3.0 * hertz / 200.0
    return _LOG_REGION_MEL + float(np.log(hertz / _LOG_REGION_HERTZ)) * _MELS_PER_LOG_HERTZ


def _slaney_mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    linear = 200.0 * mels / 3.0
    logarithmic = _LOG_REGION_HERTZ * np.exp(_LOG_HERTZ_PER_MEL * (np.maximum(mels, _LOG_REGION_MEL) - _LOG_REGION_MEL))
    return np.where(mels < _LOG_REGION_MEL, linear, logarithmic)


def _reflect(positions: np.ndarray, samples: int) -> np.ndarray:
    """Where positions in the reflect-padded signal read from, numpy's and torch's `reflect` (the edge sample is
    not repeated): `-p` before the start, `2 (N - 1) - p` past the end. One fold only, which is all a pad shorter
    than the signal needs (`min_samples`)."""
    last = samples - 1
    return last - np.abs(last - np.abs(positions))


@dataclass(frozen=True)
class Fbank:
    """Kaldi-style log-mel filterbanks stacked in pairs: transformers' `SeamlessM4TFeatureExtractor`
    (`models/seamless_m4t/feature_extraction_seamless_m4t.py`), the input of wav2vec2-bert (w2v-BERT 2.0).

    Per frame of `frame_length` samples every `hop_length` (25 ms every 10 ms at 16 kHz; no padding, Kaldi's
    `snip_edges`): samples scaled to 16-bit integers (× 2¹⁵), the frame's mean removed, pre-emphasis
    `x[n] - 0.97 x[n - 1]` (the first sample `× (1 - 0.97)`), a Povey window (a symmetric Hann window to the power
    0.85), the power spectrum of an `n_fft`-point FFT, `mel_bins` triangular filters spaced evenly on Kaldi's mel
    scale (`1127 ln(1 + f / 700)`) from `fmin` to the Nyquist frequency and triangular in mels, no normalization,
    then `log(max(mel, mel_floor))`; no dither. `stride` consecutive frames are then concatenated into one row of
    `stride × mel_bins` features (160 for 2 × 80): one row every `stride × hop_length` samples (20 ms).

    What is left out is the extractor's normalization of each mel bin over the utterance (mean and variance,
    `ddof=1`, epsilon 1e-7): the program does it on its input (see `normalize`, and the recipe's wrapper), so
    that each window of a long recording is normalized over itself. An odd last frame is dropped here, where the
    extractor pads it with zeros after normalizing (10 ms at the very end).
    """

    sample_rate: int
    mel_bins: int
    frame_length: int
    hop_length: int
    n_fft: int
    stride: int
    preemphasis: float
    fmin: float
    mel_floor: float

    @classmethod
    def seamless_m4t(cls) -> Fbank:
        """`SeamlessM4TFeatureExtractor()`'s front end: 16 kHz, 80 bins, 25 ms windows every 10 ms, a 512-point
        FFT, frames stacked in pairs, pre-emphasis 0.97, filters from 20 Hz, floor `1.192092955078125e-07`."""
        return cls(16_000, 80, 400, 160, 512, 2, 0.97, 20.0, 1.192092955078125e-07)

    def __post_init__(self) -> None:
        for name in ("sample_rate", "mel_bins", "frame_length", "hop_length", "n_fft", "stride"):
            if getattr(self, name) <= 0:
                raise ValueError(f"fbank {name} should be positive, not {getattr(self, name)}")
        if self.n_fft < self.frame_length:
            raise ValueError(f"fbank n_fft ({self.n_fft}) should be at least frame_length ({self.frame_length})")
        if not 0 <= self.fmin < self.sample_rate / 2:
            raise ValueError(f"fbank fmin should be in [0, {self.sample_rate / 2}), not {self.fmin}")
        if not 0 <= self.preemphasis < 1 or not self.mel_floor > 0:
            raise ValueError("fbank preemphasis should be in [0, 1) and mel_floor positive")

    @property
    def feature_size(self) -> int:
        """Features per row: `stride × mel_bins`."""
        return self.stride * self.mel_bins

    @property
    def samples_per_row(self) -> int:
        return self.stride * self.hop_length

    @property
    def min_samples(self) -> int:
        """The shortest signal with one row: `stride` frames."""
        return self.frame_length + (self.stride - 1) * self.hop_length

    def frame_count(self, samples: int) -> int:
        """How many rows (of `stride` frames) `__call__` gives for `samples` samples; ValueError below
        `min_samples`."""
        if samples < self.min_samples:
            raise ValueError(
                f"audio is too short for the fbank front end: {samples} samples, it needs at least {self.min_samples} "
                f"({self.min_samples / self.sample_rate:.3f} s at {self.sample_rate} Hz)"
            )
        return (1 + (samples - self.frame_length) // self.hop_length) // self.stride

    def frames(self, read: SampleReader, total_samples: int, start_row: int, stop_row: int) -> np.ndarray:
        """Rows `start_row:stop_row` of the stacked filterbank of a `total_samples`-long signal,
        `(rows, feature_size)` float32, the same values as those rows of `__call__` on the whole signal; `read` is
        called once, for the samples under those rows' frames."""
        count = self.frame_count(total_samples)
        if not 0 <= start_row <= stop_row <= count:
            raise ValueError(f"rows {start_row}:{stop_row} are outside the {count} rows of {total_samples} samples")
        result = np.empty((stop_row - start_row, self.feature_size), dtype=np.float32)
        if start_row == stop_row:
            return result
        first_frame, stop_frame = start_row * self.stride, stop_row * self.stride
        low = first_frame * self.hop_length
        high = (stop_frame - 1) * self.hop_length + self.frame_length
        samples = np.asarray(read(low, high))
        if samples.shape != (high - low,):
            raise ValueError(f"read({low}, {high}) gave an array of shape {samples.shape}, not ({high - low},)")
        # float32 × 2¹⁵ first, as the extractor scales its float32 input, then float64.
        scaled = (samples.astype(np.float32) * np.float32(2**15)).astype(np.float64)
        rows_per_chunk = max(1, _CHUNK_FRAMES // self.stride)
        for chunk in range(start_row, stop_row, rows_per_chunk):
            chunk_stop = min(chunk + rows_per_chunk, stop_row)
            offset = (chunk - start_row) * self.stride * self.hop_length
            span = ((chunk_stop - chunk) * self.stride - 1) * self.hop_length + self.frame_length
            frames = self._log_mel(scaled[offset : offset + span])
            result[chunk - start_row : chunk_stop - start_row] = frames.reshape(chunk_stop - chunk, -1)
        return result

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Stacked filterbank of a mono waveform (1-D, or `(1, samples)`) at `sample_rate`:
        `(1, rows, feature_size)`, unnormalized (what the program takes)."""
        import torch

        if isinstance(waveform, torch.Tensor):
            waveform = waveform.detach().cpu().numpy()
        audio = np.asarray(waveform, dtype=np.float32)
        if audio.ndim == 2 and audio.shape[0] == 1:
            audio = audio[0]
        if audio.ndim != 1:
            raise ValueError(f"a fbank front end takes a mono waveform, (samples,) or (1, samples), not {audio.shape}")
        rows = self.frames(lambda a, b: audio[a:b], audio.size, 0, self.frame_count(audio.size))
        return torch.from_numpy(rows[np.newaxis])

    def normalize(self, rows: np.ndarray) -> np.ndarray:
        """`rows` (`(rows, feature_size)`) with each mel bin normalized over all their frames as the extractor does
        (mean 0, variance 1 with `ddof=1`, epsilon 1e-7): what the recipe's wrapper computes inside the program."""
        frames = np.asarray(rows, dtype=np.float32).reshape(-1, self.mel_bins)
        mean = frames.mean(axis=0, keepdims=True)
        variance = frames.var(axis=0, ddof=1, keepdims=True)
        normalized: np.ndarray = ((frames - mean) / np.sqrt(variance + 1e-7)).reshape(-1, self.feature_size)
        return normalized

    def to_dict(self) -> dict[str, object]:
        return {
            "sample_rate": self.sample_rate,
            "mel_bins": self.mel_bins,
            "frame_length": self.frame_length,
            "hop_length": self.hop_length,
            "n_fft": self.n_fft,
            "stride": self.stride,
            "preemphasis": self.preemphasis,
            "fmin": self.fmin,
            "mel_floor": self.mel_floor,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Fbank:
        """The front end `to_dict` wrote; ValueError for a malformed dictionary."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a fbank front end should be a dictionary, not {data!r}")
        return cls(
            sample_rate=int_field(data, "sample_rate"),
            mel_bins=int_field(data, "mel_bins"),
            frame_length=int_field(data, "frame_length"),
            hop_length=int_field(data, "hop_length"),
            n_fft=int_field(data, "n_fft"),
            stride=int_field(data, "stride"),
            preemphasis=float_field(data, "preemphasis"),
            fmin=float_field(data, "fmin"),
            mel_floor=float_field(data, "mel_floor"),
        )

    def _log_mel(self, segment: np.ndarray) -> np.ndarray:
        """Log-mel frames `(frames, mel_bins)` of `segment` (float64 scaled samples from the first frame's start)."""
        frames = np.lib.stride_tricks.sliding_window_view(segment, self.frame_length)[:: self.hop_length]
        frames = frames - frames.mean(axis=-1, keepdims=True)
        emphasized = np.concatenate(
            [frames[:, :1] * (1 - self.preemphasis), frames[:, 1:] - self.preemphasis * frames[:, :-1]], axis=-1
        )
        spectrum = np.fft.rfft(emphasized * self._window, n=self.n_fft, axis=-1)
        power = spectrum.real**2 + spectrum.imag**2
        mel = np.maximum(power @ self._filters, self.mel_floor)
        return np.log(mel).astype(np.float32)

    @cached_property
    def _window(self) -> np.ndarray:
        # window_function(frame_length, "povey", periodic=False): a symmetric Hann window to the power 0.85.
        return np.power(np.hanning(self.frame_length), 0.85)

    @cached_property
    def _filters(self) -> np.ndarray:
        return kaldi_mel_filters(self.n_fft, self.mel_bins, self.fmin, self.sample_rate // 2, self.sample_rate)


def kaldi_mel_filters(n_fft: int, mel_bins: int, fmin: float, fmax: float, sample_rate: int) -> np.ndarray:
    """`(n_fft // 2 + 1, mel_bins)` triangular filters evenly spaced on Kaldi's mel scale (`1127 ln(1 + f / 700)`)
    and triangular in mels, unnormalized, in float64: transformers' `mel_filter_bank(norm=None, mel_scale="kaldi",
    triangularize_in_mel_space=True)`, Kaldi's and `torchaudio.compliance.kaldi`'s filters."""
    edges = np.linspace(1127.0 * np.log(1.0 + fmin / 700.0), 1127.0 * np.log(1.0 + fmax / 700.0), mel_bins + 2)
    bin_width = sample_rate / n_fft
    bins = 1127.0 * np.log(1.0 + bin_width * np.arange(n_fft // 2 + 1) / 700.0)
    return _triangles(edges, bins)

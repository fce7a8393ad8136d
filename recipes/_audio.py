"""Mel spectrograms for the vocoders, computed exactly as the vocoder's checkpoints were trained on.

The computation itself is transformers' feature extractor of each vocoder's model family, so that a mel made
here matches what the published checkpoint saw in training; this module only records the parameters, so that
a sidecar can carry them and the runtime can rebuild the same front end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from ._fields import float_field, int_field, optional_float_field, str_field

MelFlavor = Literal["speecht5", "univnet"]


@dataclass(frozen=True)
class MelSpectrogram:
    """A vocoder's mel-spectrogram front end.

    - `speecht5`: `transformers.SpeechT5FeatureExtractor` (the `audio_target` features SpeechT5's HiFi-GAN is
      trained on): log10 mel power, Hann window, `fmin`-`fmax` Hz.
    - `univnet`: `transformers.UnivNetFeatureExtractor`: natural log of mel magnitude, clipped below at 1e-5.

    The result is `(1, frames, mel_bins)` float32, one frame every `hop_length` samples.
    """

    flavor: MelFlavor
    sample_rate: int
    mel_bins: int
    hop_length: int
    win_length: int
    fmin: float
    fmax: float | None

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Mel spectrogram of a mono waveform (1-D, or `(1, samples)`) at `sample_rate`."""
        audio = waveform.detach().cpu().numpy() if isinstance(waveform, torch.Tensor) else np.asarray(waveform)
        audio = audio.astype(np.float32).reshape(-1)
        if self.flavor == "speecht5":
            from transformers import SpeechT5FeatureExtractor

            speecht5 = SpeechT5FeatureExtractor(
                sampling_rate=self.sample_rate,
                num_mel_bins=self.mel_bins,
                # SpeechT5's extractor takes its hop and window in milliseconds.
                # Whole milliseconds: the extractor converts them back to samples with `//`, and a float
                # would reach its slicing as a float index.
                hop_length=_whole_milliseconds(self.hop_length, self.sample_rate),
                win_length=_whole_milliseconds(self.win_length, self.sample_rate),
                fmin=self.fmin,
                fmax=self.fmax if self.fmax is not None else self.sample_rate / 2,
            )
            features = speecht5(audio_target=audio, sampling_rate=self.sample_rate, return_tensors="pt")
            return features["input_values"].to(torch.float32)
        from transformers import UnivNetFeatureExtractor

        univnet = UnivNetFeatureExtractor(
            sampling_rate=self.sample_rate,
            num_mel_bins=self.mel_bins,
            hop_length=self.hop_length,
            win_length=self.win_length,
            filter_length=self.win_length,
            fmin=self.fmin,
            fmax=self.fmax,
        )
        features = univnet(
            audio, sampling_rate=self.sample_rate, return_tensors="pt", pad_end=False, return_noise=False
        )
        return features["input_features"].to(torch.float32)

    def to_dict(self) -> dict[str, object]:
        return {
            "flavor": self.flavor,
            "sample_rate": self.sample_rate,
            "mel_bins": self.mel_bins,
            "hop_length": self.hop_length,
            "win_length": self.win_length,
            "fmin": self.fmin,
            "fmax": self.fmax,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> MelSpectrogram:
        """The front end `to_dict` wrote; raises ValueError for a malformed dictionary."""
        flavor = str_field(data, "flavor")
        if flavor not in ("speecht5", "univnet"):
            raise ValueError(f"field 'flavor' should be 'speecht5' or 'univnet', not {flavor!r}")
        return cls(
            flavor="speecht5" if flavor == "speecht5" else "univnet",
            sample_rate=int_field(data, "sample_rate"),
            mel_bins=int_field(data, "mel_bins"),
            hop_length=int_field(data, "hop_length"),
            win_length=int_field(data, "win_length"),
            fmin=float_field(data, "fmin"),
            fmax=optional_float_field(data, "fmax"),
        )


def _whole_milliseconds(samples: int, sample_rate: int) -> int:
    """`samples` at `sample_rate` as an integer number of milliseconds; ValueError when it is not whole."""
    milliseconds, remainder = divmod(samples * 1000, sample_rate)
    if remainder:
        raise ValueError(
            f"{samples} samples at {sample_rate} Hz is not a whole number of milliseconds, "
            "which SpeechT5's feature extractor needs"
        )
    return milliseconds

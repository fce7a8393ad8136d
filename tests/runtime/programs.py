"""Small real programs with a description, for runtime tests: purely convolutional, so that an input of any length
run in windows must give exactly what the module gives on the whole input."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import audiodeploy
from audiodeploy._files import atomic_write_files
from audiodeploy.program.description import sidecar_content, sidecar_path
from audiodeploy.program.mel import MelSpectrogram
from audiodeploy.program.spec import CTC_LOGITS_OUTPUT, WAVEFORM_OUTPUT, InputSpec
from audiodeploy.program.vocabulary import STANDARD_ENGLISH

RATE = 16_000
STRIDE = 20
"""Samples per output frame of the CTC stand-in."""
HOP = 32
"""Samples per mel frame of the vocoder stand-in."""

CTC_SPEC = InputSpec("waveform", ("batch", "samples"), RATE, 1, STRIDE, 4_000, 8_000)
VOCODER_SPEC = InputSpec("mel", ("batch", "frames", "mel_bins"), RATE, HOP, 1, 2, 200, 16)
MEL = MelSpectrogram("univnet", RATE, 16, HOP, 128, 0.0, 8000.0)


class ConvCtc(nn.Module):
    """Waveform `(1, samples)` to logits `(1, samples / 20 - 1, 32)`: a 25-sample receptive field, stride 20."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 8, 10, stride=5), nn.GELU(), nn.Conv1d(8, 16, 4, stride=4), nn.GELU()
        )
        self.head = nn.Conv1d(16, len(STANDARD_ENGLISH), 1)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(waveform.unsqueeze(1))).transpose(1, 2)


class ConvVocoder(nn.Module):
    """Mel `(1, frames, 16)` to waveform `(1, frames * 32)`: a few frames of receptive field."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(16, 16, 3, padding=1),
            nn.GELU(),
            nn.ConvTranspose1d(16, 8, 16, stride=8, padding=4),
            nn.GELU(),
            nn.ConvTranspose1d(8, 1, 8, stride=4, padding=2),
            nn.Tanh(),
        )

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.net(mel.transpose(1, 2)).squeeze(1)


def description(kind: str) -> dict:
    ctc = kind == "ctc"
    spec = CTC_SPEC if ctc else VOCODER_SPEC
    return {
        "recipe": f"test-{kind}",
        "variant": "conv",
        "source": "tests",
        "weights": "synthetic (seed 0)",
        "sample_rate": RATE,
        "input": spec.to_dict(),
        "output": (CTC_LOGITS_OUTPUT if ctc else WAVEFORM_OUTPUT).to_dict(),
        "length_range_seconds": [spec.seconds(spec.min_length), spec.seconds(spec.max_length)],
        "atol": 1e-5,
        "vocabulary": STANDARD_ENGLISH.to_dict() if ctc else None,
        "mel": None if ctc else MEL.to_dict(),
        "notes": [],
    }


def export(kind: str, directory: Path) -> tuple[Path, nn.Module]:
    """Lower the stand-in of `kind` ("ctc" or "vocoder") and write it with its sidecar; the path and the module."""
    torch.manual_seed(0)
    module = (ConvCtc() if kind == "ctc" else ConvVocoder()).eval()
    spec = CTC_SPEC if kind == "ctc" else VOCODER_SPEC
    lowered = audiodeploy.lower(module, spec.random_inputs(spec.max_length), dynamic_shapes=spec.dynamic_shapes())
    path = directory / f"{kind}.pte"
    atomic_write_files(
        {
            path: lowered.buffer,
            sidecar_path(path): sidecar_content(path, lowered.buffer, description(kind), lowered.report.to_dict()),
        }
    )
    return path, module

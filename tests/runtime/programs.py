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
from audiodeploy.program.spec import (
    CLASS_LOGITS_OUTPUT,
    CTC_LOGITS_OUTPUT,
    EMBEDDING_OUTPUT,
    FRAME_CLASS_LOGITS_OUTPUT,
    HIDDEN_STATES_OUTPUT,
    WAVEFORM_OUTPUT,
    InputSpec,
    OutputSpec,
)
from audiodeploy.program.vocabulary import STANDARD_ENGLISH

RATE = 16_000
STRIDE = 20
"""Samples per output frame of the CTC stand-in."""
HOP = 32
"""Samples per mel frame of the vocoder stand-in."""

CTC_SPEC = InputSpec("waveform", ("batch", "samples"), RATE, 1, STRIDE, 4_000, 8_000)
VOCODER_SPEC = InputSpec("mel", ("batch", "frames", "mel_bins"), RATE, HOP, 1, 2, 200, 16)
MEL = MelSpectrogram("univnet", RATE, 16, HOP, 128, 0.0, 8000.0)


LABELS = ("angry", "happy", "neutral", "sad")
"""The classifier stand-ins' labels."""


class ConvCtc(nn.Module):
    """Waveform `(1, samples)` to logits `(1, samples / 20 - 1, 32)`: a 25-sample receptive field, stride 20.

    With `outputs`, the same frames score that many labels (a frame classifier, or per-frame features); with
    `pooled`, their mean over time is the one output of the whole input (a classifier, or an embedding)."""

    def __init__(self, outputs: int = len(STANDARD_ENGLISH), pooled: bool = False) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 8, 10, stride=5), nn.GELU(), nn.Conv1d(8, 16, 4, stride=4), nn.GELU()
        )
        self.head = nn.Conv1d(16, outputs, 1)
        self.pooled = pooled

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        frames = self.head(self.features(waveform.unsqueeze(1)))
        return frames.mean(dim=2) if self.pooled else frames.transpose(1, 2)


_WAVEFORM_KINDS: dict[str, tuple[OutputSpec, int, bool]] = {
    "ctc": (CTC_LOGITS_OUTPUT, len(STANDARD_ENGLISH), False),
    "frame-classifier": (FRAME_CLASS_LOGITS_OUTPUT, len(LABELS), False),
    "classifier": (CLASS_LOGITS_OUTPUT, len(LABELS), True),
    "features": (HIDDEN_STATES_OUTPUT, 12, False),
    "embedding": (EMBEDDING_OUTPUT, 12, True),
}
"""The waveform stand-ins: their output, its size, and whether it is pooled over time."""


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
    waveform = kind in _WAVEFORM_KINDS
    spec = CTC_SPEC if waveform else VOCODER_SPEC
    output = _WAVEFORM_KINDS[kind][0] if waveform else WAVEFORM_OUTPUT
    return {
        "recipe": f"test-{kind}",
        "variant": "conv",
        "source": "tests",
        "weights": "synthetic (seed 0)",
        "sample_rate": RATE,
        "input": spec.to_dict(),
        "output": output.to_dict(),
        "length_range_seconds": [spec.seconds(spec.min_length), spec.seconds(spec.max_length)],
        "atol": 1e-5,
        "vocabulary": STANDARD_ENGLISH.to_dict() if kind == "ctc" else None,
        "labels": list(LABELS) if "classifier" in kind else None,
        "mel": None if waveform else MEL.to_dict(),
        "notes": [],
    }


def export(kind: str, directory: Path) -> tuple[Path, nn.Module]:
    """Lower the stand-in of `kind` ("vocoder", or a waveform encoder of `_WAVEFORM_KINDS`) and write it with its
    sidecar; the path and the module."""
    torch.manual_seed(0)
    waveform = kind in _WAVEFORM_KINDS
    if waveform:
        _, outputs, pooled = _WAVEFORM_KINDS[kind]
        module: nn.Module = ConvCtc(outputs, pooled).eval()
    else:
        module = ConvVocoder().eval()
    spec = CTC_SPEC if waveform else VOCODER_SPEC
    lowered = audiodeploy.lower(module, spec.random_inputs(spec.max_length), dynamic_shapes=spec.dynamic_shapes())
    path = directory / f"{kind}.pte"
    atomic_write_files(
        {
            path: lowered.buffer,
            sidecar_path(path): sidecar_content(path, lowered.buffer, description(kind), lowered.report.to_dict()),
        }
    )
    return path, module

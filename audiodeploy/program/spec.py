"""What a program takes and gives: its input and output specifications.

These types are the contract between a recipe, the lowering core and the runtime. A recipe builds a module and
declares its `InputSpec` and `OutputSpec`; the exporter writes them into the program's description (the sidecar);
the runtime reads them back to prepare inputs and read outputs without any model code. Importing this module
imports neither torch nor any model library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from audiodeploy.errors import AudiodeployError

from ._fields import int_field, optional_int_field, str_field, str_tuple_field

if TYPE_CHECKING:
    import torch

Task = Literal[
    "ctc-asr",
    "vocoder",
    "audio-classification",
    "audio-frame-classification",
    "speaker-embedding",
    "features",
    "codec",
    "tts",
]
InputKind = Literal["waveform", "mel", "fbank", "codes", "latents"]
OutputKind = Literal[
    "ctc-logits", "waveform", "class-logits", "frame-class-logits", "embedding", "hidden-states", "codes", "speech"
]
PostProcess = Literal[
    "ctc-greedy-decode", "write-waveform", "classify", "classify-frames", "write-features", "write-codes"
]


class InputLengthError(AudiodeployError, ValueError):
    """An input is longer than the range a program was exported for."""


@dataclass(frozen=True)
class InputSpec:
    """The single input tensor of a built model's method: batch of one, one axis of variable length; float32 but
    for codes.

    A waveform is `(1, samples)` at `sample_rate`, raw (the module normalizes it itself when the checkpoint was
    trained on normalized audio). A mel spectrogram is `(1, frames, mel_bins)`, one frame every `samples_per_step`
    samples, as `mel` of the built model computes it. Filterbank features are `(1, rows, features)`, one row every
    `samples_per_step` samples, as `fbank` of the built model computes them (`audiodeploy.program.mel.Fbank`).
    Codes are `(1, frames, codebooks)` int64 codebook indices, one frame every `samples_per_step` samples: what a
    codec's `encode` method gives and its `decode` method takes. Latents are `(1, frames, channels)`, one frame every
    `samples_per_step` samples: what a text-to-speech program's `decode` method turns into speech (the host draws
    them from the prior its `encode` method gives, `audiodeploy.program.tts`).
    """

    kind: InputKind
    layout: tuple[str, ...]
    sample_rate: int
    samples_per_step: int
    """Audio samples per step of the length axis: 1 for a waveform, the hop length for mel frames."""
    length_multiple: int
    """Valid lengths are multiples of this: the feature encoder's total stride for waveform encoders, else 1."""
    min_length: int
    max_length: int
    feature_size: int | None = None
    """Size of the last axis (mel bins, filterbank features, codebooks); None for waveforms."""
    length_axis: int = 1
    channels: int = 1
    """Audio channels of a waveform: 1 is `(1, samples)`; 2 (a stereo codec) is `(1, 2, samples)`, length axis 2."""

    def __post_init__(self) -> None:
        if self.channels not in (1, 2) or (self.channels == 2 and (self.kind, self.length_axis) != ("waveform", 2)):
            raise ValueError("field 'channels' should be 1, or 2 for a 'waveform' input whose length axis is 2")

    @property
    def is_static(self) -> bool:
        return self.min_length == self.max_length

    def shape(self, length: int) -> tuple[int, ...]:
        """The tensor shape for an input of `length` steps."""
        if self.feature_size is None:
            return (1, length) if self.channels == 1 else (1, self.channels, length)
        return (1, length, self.feature_size)

    def seconds(self, length: int) -> float:
        """The audio duration that `length` steps cover."""
        return length * self.samples_per_step / self.sample_rate

    def length_for_seconds(self, seconds: float) -> int:
        """The shortest valid length that covers `seconds` of audio (not clamped to the exported range)."""
        steps = math.ceil(seconds * self.sample_rate / self.samples_per_step - 1e-9)
        return max(self.length_multiple, math.ceil(steps / self.length_multiple) * self.length_multiple)

    def padded_length(self, length: int) -> int:
        """The valid length to zero-pad an input of `length` steps to.

        Raises `InputLengthError` when the input is longer than the exported range (the runtime cuts longer
        inputs into windows instead); shorter inputs pad up to the minimum.
        """
        if length > self.max_length:
            raise InputLengthError(
                f"input of {self.seconds(length):.2f} s is longer than the {self.seconds(self.max_length):.2f} s "
                "this model was exported for: trim it, or export again with a larger --max-seconds"
            )
        target = math.ceil(length / self.length_multiple) * self.length_multiple
        return max(self.min_length, target)

    @property
    def example_length(self) -> int:
        """The length of example inputs: one second of audio, kept inside the exported range."""
        return min(max(self.length_for_seconds(1.0), self.min_length), self.max_length)

    def random_inputs(self, length: int, seed: int = 0, codebook_size: int | None = None) -> tuple[torch.Tensor, ...]:
        """Seeded random inputs of `length` steps: quiet noise for waveforms, unit noise for mel frames, indices
        below `codebook_size` for codes."""
        import torch

        generator = torch.Generator().manual_seed(seed)
        if self.kind == "codes":
            if codebook_size is None:
                raise ValueError("random codes need the codebook size")
            return (torch.randint(0, codebook_size, self.shape(length), generator=generator),)
        scale = 0.1 if self.kind == "waveform" else 1.0
        return (scale * torch.randn(self.shape(length), generator=generator),)

    def dynamic_shapes(self) -> tuple[dict[int, object], ...]:
        """`torch.export` dynamic shapes for the input tuple: the length axis ranges over the valid lengths.

        Waveform encoders only export for multiples of their total stride (320 samples for wav2vec2): for other
        sample counts torch.export cannot prove the shape guards of the strided convolutions, so the length is
        declared as `stride * Dim(...)`.
        """
        from torch.export import Dim

        if self.is_static:
            return ({},)
        if self.length_multiple == 1:
            length = Dim(f"{self.layout[self.length_axis]}", min=self.min_length, max=self.max_length)
            return ({self.length_axis: length},)
        steps = Dim(
            f"{self.layout[self.length_axis]}_div_{self.length_multiple}",
            min=self.min_length // self.length_multiple,
            max=self.max_length // self.length_multiple,
        )
        return ({self.length_axis: self.length_multiple * steps},)

    def to_dict(self) -> dict[str, object]:
        written: dict[str, object] = {
            "kind": self.kind,
            "layout": list(self.layout),
            "sample_rate": self.sample_rate,
            "samples_per_step": self.samples_per_step,
            "length_multiple": self.length_multiple,
            "min_length": self.min_length,
            "max_length": self.max_length,
            "feature_size": self.feature_size,
            "length_axis": self.length_axis,
        }
        if self.channels != 1:  # written only for a stereo input: sidecars of mono ones read as they always did
            written["channels"] = self.channels
        return written

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> InputSpec:
        """The spec `to_dict` wrote; raises ValueError for a malformed dictionary."""
        kind = str_field(data, "kind")
        kinds: dict[str, InputKind] = {
            "waveform": "waveform",
            "mel": "mel",
            "fbank": "fbank",
            "codes": "codes",
            "latents": "latents",
        }
        if kind not in kinds:
            raise ValueError(f"field 'kind' should be one of {', '.join(map(repr, kinds))}, not {kind!r}")
        channels = int_field(data, "channels") if "channels" in data else 1  # written only when not 1
        return cls(
            kind=kinds[kind],
            layout=str_tuple_field(data, "layout"),
            sample_rate=int_field(data, "sample_rate"),
            samples_per_step=int_field(data, "samples_per_step"),
            length_multiple=int_field(data, "length_multiple"),
            min_length=int_field(data, "min_length"),
            max_length=int_field(data, "max_length"),
            feature_size=optional_int_field(data, "feature_size"),
            length_axis=int_field(data, "length_axis"),
            channels=channels,
        )


@dataclass(frozen=True)
class OutputSpec:
    """The single output tensor of a built model and what to do with it."""

    kind: OutputKind
    layout: tuple[str, ...]
    postprocess: PostProcess
    description: str

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "layout": list(self.layout),
            "postprocess": self.postprocess,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> OutputSpec:
        """The spec `to_dict` wrote; raises ValueError for a malformed dictionary."""
        kind, postprocess = str_field(data, "kind"), str_field(data, "postprocess")
        layout, description = str_tuple_field(data, "layout"), str_field(data, "description")
        for known in OUTPUTS:
            if (kind, postprocess) == (known.kind, known.postprocess):
                return cls(known.kind, layout, known.postprocess, description)
        raise ValueError(f"unknown output kind {kind!r} with post-processing {postprocess!r}")

    @property
    def task(self) -> Task:
        """What a program with this output does."""
        return _TASK_OF_OUTPUT[self.kind]


CTC_LOGITS_OUTPUT = OutputSpec(
    kind="ctc-logits",
    layout=("batch", "frames", "vocabulary"),
    postprocess="ctc-greedy-decode",
    description="CTC logits; greedy decode: argmax per frame, merge repeats, drop the blank, word delimiter to space",
)

WAVEFORM_OUTPUT = OutputSpec(
    kind="waveform",
    layout=("batch", "samples"),
    postprocess="write-waveform",
    description="mono waveform in [-1, 1] at the recipe's sample rate; write it as is",
)

CLASS_LOGITS_OUTPUT = OutputSpec(
    kind="class-logits",
    layout=("batch", "labels"),
    postprocess="classify",
    description="one score (logit) per label for the whole input; softmax gives the label probabilities",
)

FRAME_CLASS_LOGITS_OUTPUT = OutputSpec(
    kind="frame-class-logits",
    layout=("batch", "frames", "labels"),
    postprocess="classify-frames",
    description="one score (logit) per label for each frame; softmax per frame gives the label probabilities",
)

EMBEDDING_OUTPUT = OutputSpec(
    kind="embedding",
    layout=("batch", "features"),
    postprocess="write-features",
    description="one embedding of the whole input (an x-vector: compare two by cosine similarity)",
)

HIDDEN_STATES_OUTPUT = OutputSpec(
    kind="hidden-states",
    layout=("batch", "frames", "features"),
    postprocess="write-features",
    description="the encoder's last hidden state, one feature vector per frame",
)

CODES_OUTPUT = OutputSpec(
    kind="codes",
    layout=("batch", "frames", "codebooks"),
    postprocess="write-codes",
    description="a codec's codes: one codebook index per codebook and frame (int64); its decode method gives the "
    "waveform back",
)

SPEECH_OUTPUT = OutputSpec(
    kind="speech",
    layout=("batch", "samples"),
    postprocess="write-waveform",
    description="speech synthesized from text: the decode method's waveform from the latents the host draws from "
    "the encode method's prior and durations",
)

OUTPUTS = (
    CTC_LOGITS_OUTPUT,
    WAVEFORM_OUTPUT,
    CLASS_LOGITS_OUTPUT,
    FRAME_CLASS_LOGITS_OUTPUT,
    EMBEDDING_OUTPUT,
    HIDDEN_STATES_OUTPUT,
    CODES_OUTPUT,
    SPEECH_OUTPUT,
)
"""Every output a program can have: its kind, layout and post-processing go together."""

_TASK_OF_OUTPUT: dict[OutputKind, Task] = {
    "ctc-logits": "ctc-asr",
    "waveform": "vocoder",
    "class-logits": "audio-classification",
    "frame-class-logits": "audio-frame-classification",
    "embedding": "speaker-embedding",
    "hidden-states": "features",
    "codes": "codec",
    "speech": "tts",
}

"""What a recipe declares and what it builds: variants, input and output specifications, the built model.

These types are the contract between a recipe, the lowering core and the runtime: the lowering core reads
`BuiltModel.module`, `.example_inputs` and `.dynamic_shapes`; the command line writes `BuiltModel.describe()`
into the sidecar, and the runtime reads it back (`InputSpec.from_dict`, `CtcVocabulary.from_dict`,
`MelSpectrogram.from_dict`) to prepare inputs and decode outputs without rebuilding the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, Self, TypeVar

import torch
from torch.export import Dim

from ._audio import MelSpectrogram
from ._ctc import CtcVocabulary
from ._fields import int_field, optional_int_field, str_field, str_tuple_field
from .errors import InputLengthError, LengthRangeError

Task = Literal["ctc-asr", "vocoder"]
InputKind = Literal["waveform", "mel"]
OutputKind = Literal["ctc-logits", "waveform"]
PostProcess = Literal["ctc-greedy-decode", "write-waveform"]

ArchitectureT = TypeVar("ArchitectureT")


@dataclass(frozen=True)
class LengthRange:
    """A range of audio durations in seconds that an exported program accepts.

    For speech recognizers the duration is that of the input audio; for vocoders, that of the audio they
    synthesize (the mel spectrogram covers the same duration). `min_seconds == max_seconds` exports one fixed
    length.
    """

    min_seconds: float
    max_seconds: float

    def __post_init__(self) -> None:
        if not (self.min_seconds > 0 and math.isfinite(self.max_seconds)):
            raise LengthRangeError(
                f"length range {self.min_seconds}-{self.max_seconds} s is not valid: give positive, finite seconds"
            )
        if self.min_seconds > self.max_seconds:
            raise LengthRangeError(
                f"length range {self.min_seconds}-{self.max_seconds} s is inverted: "
                "the minimum must not exceed the maximum"
            )

    @classmethod
    def fixed(cls, seconds: float) -> LengthRange:
        """One fixed duration (a static-shape export)."""
        return cls(seconds, seconds)

    def __str__(self) -> str:
        if self.min_seconds == self.max_seconds:
            return f"{self.min_seconds:g} s"
        return f"{self.min_seconds:g}-{self.max_seconds:g} s"


@dataclass(frozen=True)
class InputSpec:
    """The single input tensor of a built model: float32, batch of one, one axis of variable length.

    A waveform is `(1, samples)` at `sample_rate`, raw (the module normalizes it itself when the checkpoint was
    trained on normalized audio). A mel spectrogram is `(1, frames, mel_bins)`, one frame every `samples_per_step`
    samples, as `mel` of the built model computes it.
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
    """Size of the last axis (mel bins) for mel inputs; None for waveforms."""
    length_axis: int = 1

    @property
    def is_static(self) -> bool:
        return self.min_length == self.max_length

    def shape(self, length: int) -> tuple[int, ...]:
        """The tensor shape for an input of `length` steps."""
        if self.feature_size is None:
            return (1, length)
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

        Raises `InputLengthError` when the input is longer than the exported range; shorter inputs pad up to
        the minimum.
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

    def random_inputs(self, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Seeded random inputs of `length` steps: quiet noise for waveforms, unit noise for mel frames."""
        generator = torch.Generator().manual_seed(seed)
        scale = 0.1 if self.kind == "waveform" else 1.0
        return (scale * torch.randn(self.shape(length), generator=generator),)

    def dynamic_shapes(self) -> tuple[dict[int, object], ...]:
        """`torch.export` dynamic shapes for the input tuple: the length axis ranges over the valid lengths.

        Waveform encoders only export for multiples of their total stride (320 samples for wav2vec2): for other
        sample counts torch.export cannot prove the shape guards of the strided convolutions, so the length is
        declared as `stride * Dim(...)`.
        """
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
        return {
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

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> InputSpec:
        """The spec `to_dict` wrote; raises ValueError for a malformed dictionary."""
        kind = str_field(data, "kind")
        if kind not in ("waveform", "mel"):
            raise ValueError(f"field 'kind' should be 'waveform' or 'mel', not {kind!r}")
        return cls(
            kind="waveform" if kind == "waveform" else "mel",
            layout=str_tuple_field(data, "layout"),
            sample_rate=int_field(data, "sample_rate"),
            samples_per_step=int_field(data, "samples_per_step"),
            length_multiple=int_field(data, "length_multiple"),
            min_length=int_field(data, "min_length"),
            max_length=int_field(data, "max_length"),
            feature_size=optional_int_field(data, "feature_size"),
            length_axis=int_field(data, "length_axis"),
        )


# The fewest steps an input may have: torch.export specializes a dimension of size 0 or 1, so a dynamic
# range must start at 2.
_MIN_STEPS = 2


def waveform_input(sample_rate: int, stride: int, length_range: LengthRange) -> InputSpec:
    """The input of a waveform encoder whose convolutions stride `stride` samples in total, over `length_range`."""
    probe = InputSpec("waveform", ("batch", "samples"), sample_rate, 1, stride, stride, stride)
    min_length = probe.length_for_seconds(length_range.min_seconds)
    # The maximum rounds down so that the exported program never accepts more audio than was asked for,
    # unless that would drop below the minimum.
    max_length = max(min_length, math.floor(length_range.max_seconds * sample_rate / stride) * stride)
    if min_length < _MIN_STEPS * stride:
        raise LengthRangeError(
            f"length range {length_range} is too short: this model needs at least "
            f"{_MIN_STEPS * stride / sample_rate:.3f} s of audio"
        )
    return InputSpec("waveform", ("batch", "samples"), sample_rate, 1, stride, min_length, max_length)


def mel_input(sample_rate: int, hop_length: int, mel_bins: int, length_range: LengthRange) -> InputSpec:
    """The mel-spectrogram input of a vocoder with `hop_length` samples per frame, over `length_range` of audio."""
    probe = InputSpec("mel", ("batch", "frames", "mel_bins"), sample_rate, hop_length, 1, 1, 1, mel_bins)
    min_length = probe.length_for_seconds(length_range.min_seconds)
    max_length = max(min_length, probe.length_for_seconds(length_range.max_seconds))
    if min_length < _MIN_STEPS:
        raise LengthRangeError(
            f"length range {length_range} is too short: this vocoder needs at least "
            f"{_MIN_STEPS * hop_length / sample_rate:.3f} s ({_MIN_STEPS} frames)"
        )
    layout = ("batch", "frames", "mel_bins")
    return InputSpec("mel", layout, sample_rate, hop_length, 1, min_length, max_length, mel_bins)


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
        if (kind, postprocess) == ("ctc-logits", "ctc-greedy-decode"):
            return cls("ctc-logits", layout, "ctc-greedy-decode", description)
        if (kind, postprocess) == ("waveform", "write-waveform"):
            return cls("waveform", layout, "write-waveform", description)
        raise ValueError(f"unknown output kind {kind!r} with post-processing {postprocess!r}")


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


@dataclass(frozen=True)
class Variant(Generic[ArchitectureT]):
    """One named configuration of a recipe's model family.

    `architecture` holds every hyperparameter, typed per family. `checkpoint` names the published checkpoint
    whose configuration it copies; None for the test-size configurations, which are `hidden` from listings.
    """

    name: str
    description: str
    architecture: ArchitectureT
    checkpoint: str | None
    hidden: bool = False
    atol: float | None = None
    """Tolerance against eager when it differs from the recipe's (an output of another scale)."""


class _Shrinkable(Protocol):
    def tiny(self) -> Self:
        """The same layout at test size."""
        ...


ShrinkableT = TypeVar("ShrinkableT", bound=_Shrinkable)


def tiny_variant(name: str, of: Variant[ShrinkableT], description: str) -> Variant[ShrinkableT]:
    """A hidden variant with the layout of the published variant `of` at test size (`architecture.tiny()`),
    with no checkpoint and the tolerance of `of`."""
    return Variant(
        name=name,
        description=description,
        architecture=of.architecture.tiny(),
        checkpoint=None,
        hidden=True,
        atol=of.atol,
    )


def synthetic_provenance(variant: Variant[Any], seed: int) -> str:
    """The plain statement that weights are random: which seed, and which configuration they fill."""
    if variant.checkpoint is None:
        return f"synthetic (seed {seed}) from the test-size '{variant.name}' configuration"
    return f"synthetic (seed {seed}) from the published {variant.checkpoint} configuration"


@dataclass(frozen=True)
class BuildRequest(Generic[ArchitectureT]):
    """A validated request to build a model: what `Recipe.build` hands to the family's builder."""

    variant: Variant[ArchitectureT]
    source: str
    weights: str | None
    seed: int
    length_range: LengthRange


@dataclass(frozen=True)
class BuiltModel:
    """An eval-mode module ready for `torch.export`, with everything needed to feed and read it.

    `module(*example_inputs)` runs eagerly; `torch.export.export(module, example_inputs,
    dynamic_shapes=dynamic_shapes)` exports it for every valid length in `input`.
    """

    recipe: str
    variant: str
    source: str
    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: tuple[dict[int, object], ...]
    input: InputSpec
    output: OutputSpec
    length_range: LengthRange
    weights_provenance: str
    """Plainly where the weights come from: synthetic from a published configuration, or the path loaded."""
    atol: float
    """Absolute tolerance of the lowered program's output against this eager module."""
    vocabulary: CtcVocabulary | None = None
    """CTC vocabulary (speech recognizers): the tokenizer's when the weights bring one, else standard English."""
    mel: MelSpectrogram | None = None
    """How to compute the input mel spectrogram from a waveform (vocoders)."""
    notes: tuple[str, ...] = field(default=())
    """Facts a user should know about this build, e.g. a CTC head that the checkpoint did not contain."""

    @property
    def sample_rate(self) -> int:
        return self.input.sample_rate

    def random_inputs(self, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Seeded random inputs of `length` steps (samples or frames), for tests and benchmarks."""
        return self.input.random_inputs(length, seed)

    def describe(self) -> dict[str, object]:
        """A JSON-serializable summary for sidecars and reports."""
        return {
            "recipe": self.recipe,
            "variant": self.variant,
            "source": self.source,
            "weights": self.weights_provenance,
            "sample_rate": self.sample_rate,
            "input": self.input.to_dict(),
            "output": self.output.to_dict(),
            "length_range_seconds": [self.length_range.min_seconds, self.length_range.max_seconds],
            "atol": self.atol,
            "vocabulary": None if self.vocabulary is None else self.vocabulary.to_dict(),
            "mel": None if self.mel is None else self.mel.to_dict(),
            "notes": list(self.notes),
        }

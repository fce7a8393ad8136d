"""What a recipe declares and what it builds: variants, length ranges, the built model.

The lowering core reads `BuiltModel.module`, `.example_inputs` and `.dynamic_shapes`; the exporter writes
`BuiltModel.describe()`, a `ProgramDescription`, into the program's sidecar. What the description holds
(`InputSpec`, `OutputSpec`, `CtcVocabulary`, `MelSpectrogram`) is defined by the model-free `audiodeploy.program`,
which the runtime reads without importing any recipe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

from audiodeploy.program.description import (
    DECODE_METHOD,
    ENCODE_METHOD,
    CarriedState,
    CodecChunks,
    CodecDecoder,
    ProgramDescription,
    main_method,
)
from audiodeploy.program.mel import Fbank, MelSpectrogram
from audiodeploy.program.spec import (
    CODES_OUTPUT,
    CTC_LOGITS_OUTPUT,
    SPEECH_OUTPUT,
    WAVEFORM_OUTPUT,
    InputKind,
    InputSpec,
    OutputSpec,
    Task,
)
from audiodeploy.program.tts import TextToSpeech
from audiodeploy.program.vocabulary import CtcVocabulary

from .errors import LengthRangeError

if TYPE_CHECKING:
    import torch

__all__ = [
    "CODES_OUTPUT",
    "CTC_LOGITS_OUTPUT",
    "SPEECH_OUTPUT",
    "WAVEFORM_OUTPUT",
    "ArchitectureT",
    "BuildRequest",
    "BuiltDecoder",
    "BuiltHead",
    "BuiltModel",
    "BuiltTextEncoder",
    "InputKind",
    "InputSpec",
    "LengthRange",
    "OutputSpec",
    "Task",
    "Variant",
    "fbank_input",
    "latents_input",
    "mel_input",
    "synthetic_provenance",
    "tiny_variant",
    "waveform_input",
]

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


# The fewest steps an input may have: torch.export specializes a dimension of size 0 or 1, so a dynamic
# range must start at 2.
_MIN_STEPS = 2


def waveform_input(sample_rate: int, stride: int, length_range: LengthRange, channels: int = 1) -> InputSpec:
    """The input of a waveform encoder whose convolutions stride `stride` samples in total, over `length_range`;
    `(1, samples)`, or `(1, channels, samples)` for a stereo model."""
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
    if channels == 1:
        return InputSpec("waveform", ("batch", "samples"), sample_rate, 1, stride, min_length, max_length)
    layout = ("batch", "channels", "samples")
    return InputSpec(
        "waveform", layout, sample_rate, 1, stride, min_length, max_length, length_axis=2, channels=channels
    )


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


def latents_input(sample_rate: int, hop_length: int, channels: int, length_range: LengthRange) -> InputSpec:
    """The latents input of a text-to-speech ``decode`` method (`channels` per frame, `hop_length` samples per frame),
    over `length_range` of speech: frames counted as a vocoder's mel frames are."""
    mel = mel_input(sample_rate, hop_length, channels, length_range)
    return replace(mel, kind="latents", layout=("batch", "frames", "channels"))


def fbank_input(fbank: Fbank, length_multiple: int, length_range: LengthRange) -> InputSpec:
    """The filterbank input of a speech encoder that takes `fbank`'s rows (one every `fbank.samples_per_row`
    samples), in multiples of `length_multiple` rows (the encoder's output stride in rows), over `length_range`."""
    layout = ("batch", "rows", "features")
    step = fbank.samples_per_row
    probe = InputSpec("fbank", layout, fbank.sample_rate, step, length_multiple, 1, 1, fbank.feature_size)
    min_length = probe.length_for_seconds(length_range.min_seconds)
    max_length = max(
        min_length,
        math.floor(length_range.max_seconds * fbank.sample_rate / step / length_multiple) * length_multiple,
    )
    if min_length < _MIN_STEPS * length_multiple:
        raise LengthRangeError(
            f"length range {length_range} is too short: this model needs at least "
            f"{_MIN_STEPS * length_multiple * step / fbank.sample_rate:.3f} s of audio"
        )
    return InputSpec(
        "fbank", layout, fbank.sample_rate, step, length_multiple, min_length, max_length, fbank.feature_size
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
    int8_keep_fp32: Mapping[str, tuple[str, ...]] | None = None
    """Per source, the patterns kept fp32 by default when quantized, when they differ from the recipe's
    `int8_keep_fp32` (a variant measured to be more sensitive)."""


class _Shrinkable(Protocol):
    def tiny(self) -> Self:
        """The same layout at test size."""
        ...


ShrinkableT = TypeVar("ShrinkableT", bound=_Shrinkable)


def tiny_variant(name: str, of: Variant[ShrinkableT], description: str) -> Variant[ShrinkableT]:
    """A hidden variant with the layout of the published variant `of` at test size (`architecture.tiny()`),
    with no checkpoint, and the tolerance and int8 defaults of `of`."""
    return Variant(
        name=name,
        description=description,
        architecture=of.architecture.tiny(),
        checkpoint=None,
        hidden=True,
        atol=of.atol,
        int8_keep_fp32=of.int8_keep_fp32,
    )


def synthetic_provenance(variant: Variant[Any], seed: int) -> str:
    """The plain statement that weights are random: which seed, and which configuration they fill."""
    if variant.hidden:
        return f"synthetic (seed {seed}) from the test-size '{variant.name}' configuration"
    if variant.checkpoint is None:  # a published size without a published checkpoint (Piper's voices are many)
        return f"synthetic (seed {seed}) from the '{variant.name}' configuration"
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
class BuiltHead:
    """What a model outputs when it is built with another head than its recipe declares (a checkpoint's own
    classifier, say), and what goes with that output."""

    output: OutputSpec
    labels: tuple[str, ...] | None
    """Label names by output index, for a classifier; None otherwise."""
    keep_fp32: tuple[str, ...]
    """The patterns kept fp32 by default when quantized (see `BuiltModel.keep_fp32`)."""


@dataclass(frozen=True)
class BuiltDecoder:
    """A codec's ``decode`` method, beside its ``encode`` (the built model's `module`): codes in, waveform out."""

    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: tuple[dict[int, object], ...]
    input: InputSpec
    """Kind 'codes': ``(1, frames, codebooks)`` int64, one frame per `input.samples_per_step` samples."""
    codebook_size: int
    chunks: CodecChunks | None = None
    """The model's own chunks, when it runs on them (EnCodec at 48 kHz); None: windows."""
    carried: CarriedState | None = None
    """The state the method carries from window to window (its last inputs and outputs), when it does."""
    long_run: torch.nn.Module | None = None
    """The model's own decode over all the codes at once, where `module` takes one window or chunk of them (the
    eager reference of the runtime's windows or chunks); None where `module` is that."""

    def inputs_for(self, encoded: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """The method's inputs for what the codec's encode module gave: the codes (and a chunk's scale), as `run`
        reads them from a file, and a first window's carried state."""
        outputs = encoded if isinstance(encoded, tuple) else (encoded,)
        codes = outputs[: 2 if self.chunks is not None and self.chunks.scaled else 1]
        return (*(t.contiguous() for t in codes), *fresh_state(self.carried))


@dataclass(frozen=True)
class BuiltTextEncoder:
    """A text-to-speech model's ``encode`` method, beside its ``decode`` (the built model's `module`): token ids and
    duration noise in, the prior and the log-durations out (`audiodeploy.program.tts`)."""

    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: tuple[dict[int, object], ...]
    text: TextToSpeech


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
    labels: tuple[str, ...] | None = None
    """Label names by output index (classifiers): the checkpoint's ``id2label``."""
    mel: MelSpectrogram | None = None
    """How to compute the input mel spectrogram from a waveform (vocoders)."""
    fbank: Fbank | None = None
    """How to compute the input filterbank features from a waveform (a 'fbank' input)."""
    notes: tuple[str, ...] = field(default=())
    """Facts a user should know about this build, e.g. a CTC head that the checkpoint did not contain."""
    keep_fp32: tuple[str, ...] = ()
    """The module-name patterns whose GEMMs stay fp32 when this model is quantized and the user names none: the
    recipe's (`Recipe.default_keep_fp32`), or the built head's."""
    decoder: BuiltDecoder | None = None
    """A codec's ``decode`` method; `module` is then its ``encode`` (see `methods`)."""
    window_overlap: float | None = None
    """The share of a window the runtime overlaps windows by, by default (`Recipe.window_overlap`)."""
    text_encoder: BuiltTextEncoder | None = None
    """A text-to-speech model's ``encode`` method; `module` is then its ``decode`` (see `methods`)."""
    carried: CarriedState | None = None
    """The state `module` carries from window to window (its last inputs and outputs), when it does."""
    long_run: torch.nn.Module | None = None
    """The model's own forward over a whole input, where `module` takes one window that carries its state to the
    next or one of the model's chunks (the eager reference of the runtime's windows or chunks); None where
    `module` is that."""

    @property
    def method(self) -> str:
        """The method that `module` becomes (`main_method` of the output's task)."""
        return main_method(self.output.task)

    @property
    def methods(self) -> dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...], tuple[dict[int, object], ...]]]:
        """Each method of the program to export: its module, example inputs and dynamic shapes. ``forward``, a
        codec's ``encode`` and ``decode``, or a text-to-speech model's ``encode`` and ``decode``."""
        methods = {}
        if self.text_encoder is not None:
            encoder = self.text_encoder
            methods[ENCODE_METHOD] = (encoder.module, encoder.example_inputs, encoder.dynamic_shapes)
        methods[self.method] = (self.module, self.example_inputs, self.dynamic_shapes)
        if self.decoder is not None:
            methods[DECODE_METHOD] = (self.decoder.module, self.decoder.example_inputs, self.decoder.dynamic_shapes)
        return methods

    @property
    def sample_rate(self) -> int:
        return self.input.sample_rate

    def random_inputs(self, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Seeded random inputs of `length` steps (samples or frames), for tests and benchmarks; a first window's
        carried state after them, when the method carries one."""
        return (*self.input.random_inputs(length, seed), *fresh_state(self.carried))

    def describe(self, max_abs_diff_vs_eager: Mapping[str, float] | None = None) -> ProgramDescription:
        """The program's description, as its sidecar holds it; `max_abs_diff_vs_eager` is each method's largest
        difference from its eager module (None before a program was checked against them)."""
        differences = max_abs_diff_vs_eager or {}
        decoder = None
        if self.decoder is not None:
            decoder = CodecDecoder(
                input=self.decoder.input,
                codebook_size=self.decoder.codebook_size,
                max_abs_diff_vs_eager=differences.get(DECODE_METHOD),
                chunks=self.decoder.chunks,
                carried=self.decoder.carried,
            )
        return ProgramDescription(
            recipe=self.recipe,
            variant=self.variant,
            source=self.source,
            weights=self.weights_provenance,
            sample_rate=self.sample_rate,
            input=self.input,
            output=self.output,
            length_range_seconds=(self.length_range.min_seconds, self.length_range.max_seconds),
            atol=self.atol,
            vocabulary=self.vocabulary,
            labels=self.labels,
            mel=self.mel,
            fbank=self.fbank,
            notes=self.notes,
            max_abs_diff_vs_eager=differences.get(self.method),
            decoder=decoder,
            window_overlap=self.window_overlap,
            carried=self.carried,
            text=None
            if self.text_encoder is None
            else replace(self.text_encoder.text, max_abs_diff_vs_eager=differences.get(ENCODE_METHOD)),
        )


def fresh_state(carried: CarriedState | None) -> tuple[torch.Tensor, ...]:
    """A first window's carried state (`CarriedState`): zeros, and a resume flag of 0; nothing without one."""
    import torch

    if carried is None:
        return ()
    return tuple(torch.zeros(shape) for shape in carried.input_shapes)

"""A program's description: the JSON sidecar beside every exported .pte, written and read by its record.

The sidecar says what the program is (recipe, variant, weights), what it takes and gives (`InputSpec`,
`OutputSpec`), how to read its output (`CtcVocabulary`) or make its input (`MelSpectrogram`, `Fbank`), how it was lowered,
and the SHA-256 of the program it describes. Nothing in it is trusted: `read_sidecar` checks every field, and
`ProgramDescription.check_program` checks it against the method the program itself declares, so a sidecar of
another model, an edited one, or an old one beside a new program is one clear error instead of a runtime failure.

This package owns the sidecar both ways: the exporter writes a `Sidecar` (`sidecar_content`), made of the
`ProgramDescription` a recipe's built model gives, and `read_sidecar` reads one back through the same record
(`audiodeploy.program.records`). Its JSON Schema is checked in as ``schemas/sidecar.schema.json``.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from audiodeploy.errors import AudiodeployError

from .mel import Fbank, MelSpectrogram
from .records import NOT_IN_JSON, OMITTED_WHEN_NONE, Record, json_key
from .spec import InputSpec, OutputSpec, Task
from .tts import TextToSpeech
from .vocabulary import CtcVocabulary

SCHEMA: Final = "audiodeploy.sidecar/1"

_LABELLED_TASKS: tuple[Task, ...] = ("audio-classification", "audio-frame-classification")

ENCODE_METHOD: Final = "encode"
DECODE_METHOD: Final = "decode"
"""The two methods of a codec program, and of a text-to-speech one; every other program has one, ``forward``."""

_METHOD_OF_TASK: Mapping[Task, str] = {"codec": ENCODE_METHOD, "tts": DECODE_METHOD}
_METHODS_OF_TASK: Mapping[Task, tuple[str, ...]] = {
    "codec": (ENCODE_METHOD, DECODE_METHOD),
    "tts": (ENCODE_METHOD, DECODE_METHOD),
}


def main_method(task: Task) -> str:
    """The method that takes a description's `input` and gives its `output`: a codec's ``encode`` (audio to codes),
    a text-to-speech program's ``decode`` (latents to speech), else ``forward``."""
    return _METHOD_OF_TASK.get(task, "forward")


def methods_of_task(task: Task) -> tuple[str, ...]:
    """Every method a program of `task` has: a codec's ``encode`` and ``decode``, a text-to-speech program's
    ``encode`` (text to latents) and ``decode`` (latents to speech), else ``forward`` alone."""
    return _METHODS_OF_TASK.get(task, (main_method(task),))


class DescriptionError(AudiodeployError, ValueError):
    """A sidecar that is missing, malformed, or does not describe its program; the message says what to do."""


class TensorShape(Protocol):
    """What a program declares of one input or output: its dtype and its sizes (upper bounds when dynamic)."""

    @property
    def dtype(self) -> object: ...

    @property
    def sizes(self) -> tuple[int, ...]: ...


def sidecar_path(pte: str | os.PathLike[str]) -> Path:
    """``model.pte`` -> ``model.json``."""
    return Path(pte).with_suffix(".json")


def program_digest(buffer: bytes) -> str:
    """The SHA-256 of a program's bytes, as the sidecar records it."""
    return hashlib.sha256(buffer).hexdigest()


@dataclass(frozen=True, kw_only=True)
class CodecChunks(Record):
    """A codec that runs on its own chunks of audio (EnCodec at 48 kHz), as its model does, not on windows.

    ``encode`` takes one chunk (the description's fixed-length `input`) and each chunk starts `stride` samples
    after the one before; the audio is zero-padded to whole chunks. The chunks' decoded audio is overlap-added with
    linear fades, as transformers' `EncodecModel._linear_overlap_add` does. When `scaled`, ``encode`` also gives the
    chunk's loudness (its RMS, the model's normalization) as a float32 `(1, 1)` second output, and ``decode``
    takes it back as its second input."""

    stride: int
    scaled: bool

    def __post_init__(self) -> None:
        if self.stride < 1:
            raise ValueError("field 'decoder.chunks.stride' should be at least 1")


@dataclass(frozen=True, kw_only=True)
class CarriedState(Record):
    """A method that carries a recurrent state from one window to the next (EnCodec's LSTM), so that windows
    overlap only by what its convolutions reach back, and give what one long run of the input gives.

    Beside its other inputs, the method takes each state (float32 `(layers, 1, size)`, one per `shapes` entry) and a
    float32 `(1, 1)` resume flag; beside its main output it gives each state after every step of the window, float32
    `(layers, steps, size)`, a step being one unit of the window (a frame). Resumed (flag 1), it replaces its own
    state by the one given at step `resume_step`: when that is the state one long run has there (the previous
    window's, after the step before), the window's outputs from step `lead` on are the long run's. Not resumed
    (flag 0, the first window), it starts afresh at the window's start, as the long run does at the input's.
    Every model carried so far is causal: a window's outputs are exact up to its end."""

    shapes: tuple[tuple[int, int], ...]
    """`(layers, size)` of each state, in the order the method takes them (an LSTM's `h`, then `c`)."""
    resume_step: int
    lead: int

    def __post_init__(self) -> None:
        if not self.shapes or any(len(s) != 2 or min(s) < 1 for s in self.shapes):
            raise ValueError("field 'carried.shapes' should list each state's (layers, size), both at least 1")
        if not 0 <= self.resume_step <= self.lead:
            raise ValueError("field 'carried.resume_step' should be at least 0 and at most 'carried.lead'")

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        """The shapes of the inputs the carried state adds: the states, then the resume flag. The first window
        gives zeros for all of them."""
        return [(layers, 1, size) for layers, size in self.shapes] + [(1, 1)]

    def checked_inputs(
        self, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape], method: str, origin: str
    ) -> Sequence[TensorShape]:
        """`inputs` less the carried state's, after raising `DescriptionError` unless `method` ends its inputs with
        the states and the flag and its outputs with the states at every step."""
        expected = self.input_shapes
        carried = inputs[max(0, len(inputs) - len(expected)) :]
        declared = [tuple(i.sizes) for i in carried]
        if declared != expected or any("float32" not in str(i.dtype) for i in carried):
            raise _mismatch(
                origin, f"its {method} method ends with inputs {declared}, the sidecar describes {expected}"
            )
        gives = [tuple(o.sizes) for o in outputs[max(0, len(outputs) - len(self.shapes)) :]]
        if [(sizes[0], sizes[-1]) for sizes in gives if len(sizes) == 3] != list(self.shapes):
            raise _mismatch(origin, f"its {method} method does not give the states {list(self.shapes)} at each step")
        return inputs[: len(inputs) - len(carried)]


@dataclass(frozen=True, kw_only=True)
class CodecDecoder(Record):
    """A codec program's ``decode`` method: its codes in (`input`, kind 'codes'), a waveform at the description's
    sample rate out, `input.samples_per_step` samples per frame of codes."""

    input: InputSpec
    codebook_size: int
    """Codes are indices below this, in every codebook."""
    max_abs_diff_vs_eager: float | None = None
    """The method's largest absolute difference from the eager decoder on the example codes; None where nothing
    was compared."""
    chunks: CodecChunks | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """The model's own chunks (`CodecChunks`); None: the runtime cuts long inputs into overlapping windows."""
    carried: CarriedState | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """The state ``decode`` carries from window to window (`CarriedState`); None: each window starts afresh."""

    def __post_init__(self) -> None:
        if self.input.kind != "codes" or self.input.feature_size is None:
            raise ValueError("field 'decoder.input' should be a 'codes' input with its codebooks as feature_size")
        if self.codebook_size < 1:
            raise ValueError("field 'decoder.codebook_size' should be at least 1")
        if self.chunks is not None and not self.input.is_static:
            raise ValueError("field 'decoder.chunks' is for a decoder of one chunk's codes, a fixed length")
        if self.chunks is not None and self.carried is not None:
            raise ValueError("a codec's 'decoder' runs on its model's chunks or carries a state, not both")

    @property
    def codebooks(self) -> int:
        assert self.input.feature_size is not None  # checked above
        return self.input.feature_size

    @property
    def scaled(self) -> bool:
        """Whether encode gives a scale per chunk and decode takes it (`CodecChunks.scaled`)."""
        return self.chunks is not None and self.chunks.scaled


@dataclass(frozen=True, kw_only=True)
class ProgramDescription(Record):
    """What the sidecar's ``model`` object says about the program: what it is, takes and gives, and how it was
    checked against eager PyTorch (`BuiltModel.describe` in the recipes makes it)."""

    recipe: str
    variant: str
    source: str
    weights: str
    """Plainly where the weights come from: synthetic from a published configuration, or the path loaded."""
    sample_rate: int
    """The input's, repeated for a reader of the file."""
    input: InputSpec
    output: OutputSpec
    length_range_seconds: tuple[float, float]
    atol: float
    """Absolute tolerance of the lowered program's output against the eager module (fp32)."""
    vocabulary: CtcVocabulary | None = None
    labels: tuple[str, ...] | None = None
    """The classifier's label names, by output index (a checkpoint's ``id2label``); None for other tasks."""
    mel: MelSpectrogram | None = None
    fbank: Fbank | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """How to compute a 'fbank' input from audio (wav2vec2-bert); None for other inputs."""
    notes: tuple[str, ...] = ()
    max_abs_diff_vs_eager: float | None = None
    """The exported program's largest absolute difference from the eager module on the example input; None where
    nothing was compared."""
    decoder: CodecDecoder | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """A codec's ``decode`` method (its ``encode`` method is `input` to `output`); None for other programs."""
    window_overlap: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """The share of a window that neighbouring windows overlap by when the user gives no overlap: a recurrent
    model's warm-up (EnCodec's LSTM); None: the runtime's default, a fifth."""
    text: TextToSpeech | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """A text-to-speech program's ``encode`` method and front end (its ``decode`` method is `input` to `output`);
    None for other programs."""
    carried: CarriedState | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """The state `method` carries from window to window (`CarriedState`); None: each window starts afresh."""

    def __post_init__(self) -> None:
        if self.sample_rate != self.input.sample_rate:
            raise ValueError(f"field 'sample_rate' is {self.sample_rate}, the input's is {self.input.sample_rate}")
        if self.task == "ctc-asr" and self.vocabulary is None:
            raise ValueError("a CTC program's description needs its 'vocabulary'")
        if (self.task in _LABELLED_TASKS) != (self.labels is not None):
            raise ValueError(f"field 'labels' is for {' and '.join(_LABELLED_TASKS)} programs, and they need it")
        if self.task == "vocoder" and self.input.kind != "mel":
            raise ValueError("a vocoder's description should take a 'mel' input")
        if (self.task == "codec") != (self.decoder is not None):
            raise ValueError("field 'decoder' is for codec programs, and they need it")
        if self.decoder is not None and (
            self.input.kind != "waveform"
            or self.decoder.input.sample_rate != self.sample_rate
            or self.decoder.input.samples_per_step != self.input.length_multiple
        ):
            raise ValueError("a codec's 'decoder' should take a frame of codes per frame of its waveform 'input'")
        if self.input.kind == "codes":
            raise ValueError("field 'input' takes codes only in a codec's 'decoder'")
        chunks = self.decoder.chunks if self.decoder is not None else None
        if chunks is not None and not (self.input.is_static and chunks.stride <= self.input.max_length):
            raise ValueError(
                "a codec's 'decoder.chunks' needs a fixed-length 'input' of one chunk, its stride at most that"
            )
        if (self.task == "tts") != (self.text is not None):
            raise ValueError("field 'text' is for text-to-speech programs, and they need it")
        if (self.task == "tts") != (self.input.kind == "latents"):
            raise ValueError("a text-to-speech program's 'input' is the latents its decode method takes, and only its")
        if self.text is not None and self.text.flow_size != self.input.feature_size:
            raise ValueError("field 'text.flow_size' should be the channels of the latents 'input' takes")
        if self.window_overlap is not None and not 0 <= self.window_overlap < 1:
            raise ValueError("field 'window_overlap' should be a share of a window, at least 0 and below 1")
        if self.carried is not None and (self.window_overlap is not None or not self.input.is_static):
            raise ValueError(
                "field 'carried' is for a fixed-length 'input' whose windows overlap by its 'lead', not by "
                "'window_overlap'"
            )
        if (self.input.kind == "fbank") != (self.fbank is not None):
            raise ValueError("field 'fbank' is for programs with a 'fbank' input, and they need it")
        if self.fbank is not None and (
            self.fbank.feature_size != self.input.feature_size
            or self.fbank.samples_per_row != self.input.samples_per_step
            or self.fbank.sample_rate != self.input.sample_rate
        ):
            raise ValueError("field 'fbank' does not give the rows, features or sample rate of field 'input'")
        if self.input.min_length > self.input.max_length or self.input.min_length < 1:
            raise ValueError("field 'input' has an empty length range")

    @property
    def task(self) -> Task:
        return self.output.task

    @property
    def method(self) -> str:
        """The method that takes `input` and gives `output` (`main_method`)."""
        return main_method(self.task)

    @property
    def method_names(self) -> tuple[str, ...]:
        """Every method the description describes: `method`, and a codec's ``decode`` or a text-to-speech program's
        ``encode`` (a codec's description has its `decoder`, a text-to-speech one its `text`: checked)."""
        return methods_of_task(self.task)

    def check_program(self, program: DeclaredProgram, origin: str) -> None:
        """Raise `DescriptionError` unless the program's methods take and give what this description says: its
        `method`, and a codec's ``decode`` or a text-to-speech program's ``encode``."""
        wanted = self.method_names
        missing = [name for name in wanted if name not in program.method_names]
        if missing:
            has = ", ".join(program.method_names) or "none"
            raise _mismatch(origin, f"the sidecar describes method {missing[0]!r}; the program has {has}")
        self._check_method(program.input_specs(self.method), program.output_specs(self.method), origin)
        if self.decoder is not None:
            self._check_decoder(program.input_specs(DECODE_METHOD), program.output_specs(DECODE_METHOD), origin)
        if self.text is not None:
            self._check_text_encoder(program.input_specs(ENCODE_METHOD), program.output_specs(ENCODE_METHOD), origin)

    def _check_text_encoder(self, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape], origin: str) -> None:
        assert self.text is not None
        tokens, flow = self.text.max_tokens, self.text.flow_size
        expected = [("int64", (1, tokens)), ("float32", (1, 2, tokens))] + [("int64", (1,))] * self.text.speaker_inputs
        declared = [(str(i.dtype), tuple(i.sizes)) for i in inputs]
        if len(declared) != len(expected) or any(
            dtype not in shown or sizes != shape for (dtype, sizes), (shown, shape) in zip(expected, declared)
        ):
            shown = ", ".join(f"{dtype} at most {list(sizes)}" for dtype, sizes in declared)
            speaker = " and an int64 [1] speaker index" if self.text.speaker_inputs else ""
            raise _mismatch(
                origin,
                f"its encode method takes {shown}, the sidecar describes int64 [1, {tokens}] token ids, float32 "
                f"[1, 2, {tokens}] duration noise{speaker}",
            )
        gives = [tuple(o.sizes) for o in outputs]
        if gives != [(1, tokens, flow), (1, tokens, flow), (1, tokens)]:
            raise _mismatch(
                origin,
                f"its encode method gives {gives}, the sidecar describes the prior's means and log-variances "
                f"[1, {tokens}, {flow}] and log-durations [1, {tokens}]",
            )

    def _check_decoder(self, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape], origin: str) -> None:
        assert self.decoder is not None
        spec, scaled, carried = self.decoder.input, self.decoder.scaled, self.decoder.carried
        expected = spec.shape(spec.max_length)
        if carried is not None:
            inputs = carried.checked_inputs(inputs, outputs, DECODE_METHOD, origin)
        if (
            len(inputs) != 1 + scaled
            or "int64" not in str(inputs[0].dtype)
            or tuple(inputs[0].sizes) != expected
            or (scaled and not _is_scale(inputs[1]))
        ):
            shown = ", ".join(f"{i.dtype} at most {list(i.sizes)}" for i in inputs)
            scale = " and a float32 [1, 1] scale" if scaled else ""
            raise _mismatch(
                origin, f"its decode method takes {shown}, the sidecar describes int64 {list(expected)}{scale}"
            )
        if len(outputs) < 1 or "float32" not in str(outputs[0].dtype):
            raise _mismatch(origin, "its decode method gives no float32 waveform")

    def _check_method(self, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape], origin: str) -> None:
        spec = self.input
        expected = spec.shape(spec.max_length)

        def mismatch(what: str) -> DescriptionError:
            return _mismatch(origin, what)

        if self.carried is not None:
            inputs = self.carried.checked_inputs(inputs, outputs, self.method, origin)
        speaker_inputs = self.text.speaker_inputs if self.text is not None else 0
        if len(inputs) != 1 + speaker_inputs:
            raise mismatch(f"the program takes {len(inputs)} inputs, the sidecar describes {1 + speaker_inputs}")
        if speaker_inputs and ("int64" not in str(inputs[1].dtype) or tuple(inputs[1].sizes) != (1,)):
            raise mismatch(
                f"the program's second input is {inputs[1].dtype} {list(inputs[1].sizes)}, the sidecar "
                "describes an int64 [1] speaker index"
            )
        declared = inputs[0]
        if "float32" not in str(declared.dtype):
            raise mismatch(f"the program's input is {declared.dtype}, the sidecar describes float32")
        if tuple(declared.sizes) != expected:
            raise mismatch(
                f"the program's input is at most {list(declared.sizes)}, the sidecar describes {list(expected)}"
            )
        if len(outputs) < 1:
            raise mismatch("the program has no output")
        output_sizes = tuple(outputs[0].sizes)
        if len(output_sizes) != len(self.output.layout):
            raise mismatch(
                f"the program's output has {len(output_sizes)} axes, the sidecar describes {self.output.layout}"
            )
        if self.vocabulary is not None and output_sizes[-1] != len(self.vocabulary):
            raise mismatch(
                f"the program scores {output_sizes[-1]} labels, the sidecar's vocabulary has {len(self.vocabulary)}"
            )
        if self.labels is not None and output_sizes[-1] != len(self.labels):
            raise mismatch(f"the program scores {output_sizes[-1]} labels, the sidecar names {len(self.labels)}")
        if self.decoder is not None and self.decoder.scaled and (len(outputs) < 2 or not _is_scale(outputs[1])):
            raise mismatch("the program gives no float32 [1, 1] scale beside its codes, which the sidecar describes")


def _is_scale(declared: TensorShape) -> bool:
    """A chunk's loudness scale: float32 `(1, 1)`."""
    return "float32" in str(declared.dtype) and tuple(declared.sizes) == (1, 1)


def _mismatch(origin: str, what: str) -> DescriptionError:
    return DescriptionError(
        f"{origin}: the sidecar does not describe this program ({what}); "
        "export the model again so that the .pte and its .json belong together"
    )


class DeclaredProgram(Protocol):
    """What a loaded program declares of each method's inputs and outputs (the runtime's `Program`)."""

    @property
    def method_names(self) -> list[str]: ...

    def input_specs(self, method: str = "forward") -> Sequence[TensorShape]: ...

    def output_specs(self, method: str = "forward") -> Sequence[TensorShape]: ...


@dataclass(frozen=True, kw_only=True)
class Sidecar(Record):
    """The JSON file beside every exported .pte (schema ``audiodeploy.sidecar/1``): the program it was written
    for, its description, the lowering report, and the versions it was made with."""

    schema: Literal["audiodeploy.sidecar/1"] = SCHEMA
    created: str
    """When it was written, ISO 8601 in UTC to the second."""
    program: str
    """The file name of the program it was written beside."""
    program_sha256: str | None = None
    """The SHA-256 of that program; None in sidecars written before it was recorded."""
    program_bytes: int
    description: ProgramDescription = field(metadata=json_key("model"))
    lowering: dict[str, Any]
    """The lowering report (`audiodeploy.program.report.LoweringReport.to_dict`), which the lowering core writes."""
    versions: dict[str, str]
    path: Path | None = field(default=None, compare=False, metadata=NOT_IN_JSON)
    """Where it was read from (`read_sidecar`); None for one made in this process."""

    def __post_init__(self) -> None:
        digest = self.program_sha256
        if digest is not None and not (len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise ValueError("field 'program_sha256' should be a SHA-256 in hex")

    @classmethod
    def for_program(
        cls,
        pte: str | os.PathLike[str],
        buffer: bytes,
        description: ProgramDescription,
        lowering: Mapping[str, Any],
    ) -> Sidecar:
        """The sidecar of the program `buffer`, to be written at `sidecar_path(pte)`, made now."""
        return cls(
            created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            program=Path(pte).name,
            program_sha256=program_digest(buffer),
            program_bytes=len(buffer),
            description=description,
            lowering=dict(lowering),
            versions=package_versions(),
        )

    def check_digest(self, program_sha256: str, origin: str) -> None:
        """Raise `DescriptionError` when the sidecar was written for another program than the one whose SHA-256
        (`program_digest`, or a loaded runtime Program's `sha256`) is given."""
        if self.program_sha256 is not None and self.program_sha256 != program_sha256:
            raise DescriptionError(
                f"{self.path or 'the sidecar'} was written for another program than {origin} (the programs' SHA-256 "
                "differ); export the model again so that the .pte and its .json belong together"
            )


def package_versions() -> dict[str, str]:
    versions = {}
    for name in ("audiodeploy", "torch", "executorch", "torchaudio", "transformers", "numpy", "soundfile"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def sidecar_content(
    pte: str | os.PathLike[str],
    buffer: bytes,
    description: ProgramDescription | Mapping[str, Any],
    lowering: Mapping[str, Any],
) -> bytes:
    """The bytes of the sidecar of the program `buffer`, to be written at `sidecar_path(pte)`.

    A description given as a dictionary is read through `ProgramDescription` first: what is written is what a
    reader accepts."""
    if not isinstance(description, ProgramDescription):
        description = ProgramDescription.from_dict(description)
    return Sidecar.for_program(pte, buffer, description, lowering).to_json().encode("utf-8")


def read_sidecar(pte: str | os.PathLike[str]) -> Sidecar:
    """The sidecar beside `pte`, checked field by field; `DescriptionError` (one line) when it cannot be used."""
    path = sidecar_path(pte)
    remedy = "export the model again with `audiodeploy export`, which writes both"
    if not path.exists():
        raise DescriptionError(f"{path}: no sidecar beside {Path(pte).name}; it says what the model expects: {remedy}")
    try:
        text = path.read_bytes().decode("utf-8")
        content = json.loads(text)
    except IsADirectoryError:
        raise DescriptionError(f"{path}: is a directory, not a sidecar; {remedy}") from None
    except OSError as error:
        raise DescriptionError(f"{path}: cannot read the sidecar ({error.strerror or error}); {remedy}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise DescriptionError(f"{path}: not a valid sidecar ({_one_line(error)}); {remedy}") from None
    if not isinstance(content, dict) or content.get("schema") != SCHEMA:
        raise DescriptionError(f"{path}: not an audiodeploy sidecar; {remedy}")
    try:
        sidecar = Sidecar.from_dict(content)
    except ValueError as error:
        raise DescriptionError(f"{path}: not a valid sidecar ({_one_line(error)}); {remedy}") from None
    return dataclasses.replace(sidecar, path=path)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())

"""A program's description: the JSON sidecar beside every exported .pte, read and checked.

The sidecar says what the program is (recipe, variant, weights), what it takes and gives (`InputSpec`,
`OutputSpec`), how to read its output (`CtcVocabulary`) or make its input (`MelSpectrogram`), how it was lowered,
and the SHA-256 of the program it describes. Nothing in it is trusted: `read_sidecar` checks every field, and
`ProgramDescription.check_program` checks it against the method the program itself declares, so a sidecar of
another model, an edited one, or an old one beside a new program is one clear error instead of a runtime failure.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from audiodeploy.errors import AudiodeployError

from ._fields import float_field, str_field, str_tuple_field
from .mel import MelSpectrogram
from .spec import InputSpec, OutputSpec, Task
from .vocabulary import CtcVocabulary

SCHEMA = "audiodeploy.sidecar/1"

_TASKS: dict[str, Task] = {"ctc-logits": "ctc-asr", "waveform": "vocoder"}


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


@dataclass(frozen=True)
class ProgramDescription:
    """What the sidecar's ``model`` object says about the program."""

    recipe: str
    variant: str
    source: str
    weights: str
    input: InputSpec
    output: OutputSpec
    length_range_seconds: tuple[float, float]
    vocabulary: CtcVocabulary | None
    mel: MelSpectrogram | None
    notes: tuple[str, ...]
    raw: Mapping[str, Any]
    """The ``model`` object as written, for fields added after this reader (``max_abs_diff_vs_eager``...)."""

    @property
    def task(self) -> Task:
        return _TASKS[self.output.kind]

    @property
    def sample_rate(self) -> int:
        return self.input.sample_rate

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProgramDescription:
        """The description `BuiltModel.describe()` wrote; raises ValueError naming the malformed field."""
        if not isinstance(data, Mapping):
            raise ValueError("'model' should be an object")
        input_spec = InputSpec.from_dict(_object_field(data, "input"))
        output_spec = OutputSpec.from_dict(_object_field(data, "output"))
        vocabulary = _optional_object_field(data, "vocabulary")
        mel = _optional_object_field(data, "mel")
        length_range = data.get("length_range_seconds")
        if not (isinstance(length_range, list) and len(length_range) == 2):
            raise ValueError("field 'length_range_seconds' should be [min, max]")
        description = cls(
            recipe=str_field(data, "recipe"),
            variant=str_field(data, "variant"),
            source=str_field(data, "source"),
            weights=str_field(data, "weights"),
            input=input_spec,
            output=output_spec,
            length_range_seconds=(
                float_field({"min": length_range[0]}, "min"),
                float_field({"max": length_range[1]}, "max"),
            ),
            vocabulary=None if vocabulary is None else CtcVocabulary.from_dict(vocabulary),
            mel=None if mel is None else MelSpectrogram.from_dict(mel),
            notes=str_tuple_field(data, "notes") if "notes" in data else (),
            raw=dict(data),
        )
        if description.task == "ctc-asr" and description.vocabulary is None:
            raise ValueError("a CTC program's description needs its 'vocabulary'")
        if description.task == "vocoder" and input_spec.kind != "mel":
            raise ValueError("a vocoder's description should take a 'mel' input")
        if input_spec.min_length > input_spec.max_length or input_spec.min_length < 1:
            raise ValueError("field 'input' has an empty length range")
        return description

    def check_program(self, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape], origin: str) -> None:
        """Raise `DescriptionError` unless the program's ``forward`` takes and gives what this description says.

        `inputs` and `outputs` are what the program declares (sizes are upper bounds for dynamic axes).
        """
        spec = self.input
        expected = spec.shape(spec.max_length)

        def mismatch(what: str) -> DescriptionError:
            return DescriptionError(
                f"{origin}: the sidecar does not describe this program ({what}); "
                "export the model again so that the .pte and its .json belong together"
            )

        if len(inputs) != 1:
            raise mismatch(f"the program takes {len(inputs)} inputs, the sidecar describes 1")
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


@dataclass(frozen=True)
class Sidecar:
    """A sidecar as read from disk: the description, the lowering report, and what it was made with."""

    path: Path
    description: ProgramDescription
    lowering: Mapping[str, Any]
    versions: Mapping[str, str]
    program_sha256: str | None
    """The SHA-256 of the program it was written beside; None in sidecars written before it was recorded."""

    def check_digest(self, program_sha256: str, origin: str) -> None:
        """Raise `DescriptionError` when the sidecar was written for another program than the one whose SHA-256
        (`program_digest`, or a loaded runtime Program's `sha256`) is given."""
        if self.program_sha256 is not None and self.program_sha256 != program_sha256:
            raise DescriptionError(
                f"{self.path} was written for another program than {origin} (the programs' SHA-256 differ); "
                "export the model again so that the .pte and its .json belong together"
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
    pte: str | os.PathLike[str], buffer: bytes, model: Mapping[str, Any], lowering: Mapping[str, Any]
) -> bytes:
    """The bytes of the sidecar of the program `buffer`, to be written at `sidecar_path(pte)`."""
    content = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "program": Path(pte).name,
        "program_sha256": program_digest(buffer),
        "program_bytes": len(buffer),
        "model": dict(model),
        "lowering": dict(lowering),
        "versions": package_versions(),
    }
    return (json.dumps(content, indent=2) + "\n").encode("utf-8")


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
        description = ProgramDescription.from_dict(_object_field(content, "model"))
        lowering = _object_field(content, "lowering")
        versions = _object_field(content, "versions")
        digest = content.get("program_sha256")
        if digest is not None and not (isinstance(digest, str) and len(digest) == 64):
            raise ValueError("field 'program_sha256' should be a SHA-256 in hex")
    except (ValueError, TypeError, KeyError) as error:
        raise DescriptionError(f"{path}: not a valid sidecar ({_one_line(error)}); {remedy}") from None
    return Sidecar(path, description, lowering, {str(k): str(v) for k, v in versions.items()}, digest)


def _object_field(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise ValueError(f"field '{key}' should be an object")
    return value


def _optional_object_field(data: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    return None if data.get(key) is None else _object_field(data, key)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())

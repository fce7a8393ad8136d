"""What a program is, apart from its bytes: the contract between recipe, lowering core and runtime.

A `.pte` written by `audiodeploy export` comes with a JSON sidecar, its description: the input and output
specifications (`InputSpec`, `OutputSpec`), the CTC vocabulary of a speech recognizer (`CtcVocabulary`), the mel
front end of a vocoder (`MelSpectrogram`), the lowering report and the versions it was made with. Recipes import
these types to declare what they build; the runtime reads them back to run a program without any model code.
Nothing here imports torch at import time, nor any model library.

The sidecar is a `Sidecar` record, written and read through the same type. `audiodeploy.program.records` makes
such records of plain frozen dataclasses (the bench record and the native runner's report are records too) and
derives their JSON Schemas, checked in under ``audiodeploy/program/schemas/``.

Two model-free modules beside them are imported where they are used, since they bring numpy, soundfile or torch:
`audiodeploy.program.audio` reads and writes audio as a program takes it (the runtime's input, and calibration's
through the recipes), and `audiodeploy.program.fidelity` holds the metrics of a program's output against eager
PyTorch (the int8 report, the recipes' measures, the bench).
"""

from audiodeploy.program.description import (
    SCHEMA,
    DescriptionError,
    ProgramDescription,
    Sidecar,
    read_sidecar,
    sidecar_content,
    sidecar_path,
)
from audiodeploy.program.mel import MelSpectrogram
from audiodeploy.program.records import Record
from audiodeploy.program.spec import (
    CTC_LOGITS_OUTPUT,
    WAVEFORM_OUTPUT,
    InputLengthError,
    InputSpec,
    OutputSpec,
    Task,
)
from audiodeploy.program.vocabulary import STANDARD_ENGLISH, TORCHAUDIO_ENGLISH, CtcVocabulary

__all__ = [
    "CTC_LOGITS_OUTPUT",
    "SCHEMA",
    "STANDARD_ENGLISH",
    "TORCHAUDIO_ENGLISH",
    "WAVEFORM_OUTPUT",
    "CtcVocabulary",
    "DescriptionError",
    "InputLengthError",
    "InputSpec",
    "MelSpectrogram",
    "OutputSpec",
    "ProgramDescription",
    "Record",
    "Sidecar",
    "Task",
    "read_sidecar",
    "sidecar_content",
    "sidecar_path",
]

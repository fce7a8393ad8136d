"""What a program is, apart from its bytes: the contract between recipe, lowering core and runtime.

A `.pte` written by `audiodeploy export` comes with a JSON sidecar, its description: the input and output
specifications (`InputSpec`, `OutputSpec`), the CTC vocabulary of a speech recognizer (`CtcVocabulary`), the mel
front end of a vocoder (`MelSpectrogram`), the lowering report and the versions it was made with. Recipes import
these types to declare what they build; the runtime reads them back to run a program without any model code.
Nothing here imports torch at import time, nor any model library.
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
    "Sidecar",
    "Task",
    "read_sidecar",
    "sidecar_content",
    "sidecar_path",
]

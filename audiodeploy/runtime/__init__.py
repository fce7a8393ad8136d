"""Running programs: `load(path)` gives a model that knows its task.

    import audiodeploy.runtime as runtime
    runtime.load("wav2vec2.pte").transcribe("speech.wav").text
    runtime.load("hifigan.pte").vocode_to_file("speech.wav", "resynthesized.wav")
    runtime.load("my-emotion-model.pte").classify("speech.wav").top(3)
    runtime.load("vits.pte").synthesize_to_file("Hello world.", "hello.wav")
    runtime.load("any.pte").run([tensor])

Inputs of any length run in overlapping windows that fit the program. Nothing here imports a recipe or a model
library: a program and its description (the sidecar) are all it needs. Names are imported on first use, so that
the submodules (audio, windows) can be used without loading the ExecuTorch runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AudioClassifier": "audiodeploy.runtime.model",
    "AudioInputError": "audiodeploy.program.audio",
    "Classification": "audiodeploy.runtime.model",
    "DescriptionError": "audiodeploy.program.description",
    "FeatureExtractor": "audiodeploy.runtime.model",
    "Model": "audiodeploy.runtime.model",
    "Segment": "audiodeploy.runtime.model",
    "SpeechRecognizer": "audiodeploy.runtime.model",
    "Synthesizer": "audiodeploy.runtime.model",
    "TextError": "audiodeploy.program.tts",
    "Voice": "audiodeploy.runtime.model",
    "Transcript": "audiodeploy.runtime.model",
    "Vocoder": "audiodeploy.runtime.model",
    "Waveform": "audiodeploy.runtime.model",
    "Codec": "audiodeploy.runtime.model",
    "ChunkedCodec": "audiodeploy.runtime.model",
    "ChunkedCodes": "audiodeploy.program.codes",
    "WindowOptionError": "audiodeploy.runtime.model",
    "WrittenAudio": "audiodeploy.runtime.model",
    "load": "audiodeploy.runtime.model",
    "Program": "audiodeploy.runtime.program",
    "ProgramInputError": "audiodeploy.runtime.program",
    "ProgramLoadError": "audiodeploy.runtime.program",
    "ProgramRunError": "audiodeploy.runtime.program",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from audiodeploy.program.audio import AudioInputError
    from audiodeploy.program.codes import ChunkedCodes
    from audiodeploy.program.description import DescriptionError
    from audiodeploy.program.tts import TextError
    from audiodeploy.runtime.model import (
        AudioClassifier,
        ChunkedCodec,
        Classification,
        Codec,
        FeatureExtractor,
        Model,
        Segment,
        SpeechRecognizer,
        Synthesizer,
        Transcript,
        Vocoder,
        Voice,
        Waveform,
        WindowOptionError,
        WrittenAudio,
        load,
    )
    from audiodeploy.runtime.program import Program, ProgramInputError, ProgramLoadError, ProgramRunError


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'audiodeploy.runtime' has no attribute {name!r}")

"""Recipes: how each audio model family reaches the lowering core, as a library.

    from audiodeploy import recipes
    recipes.available()  # ('bigvgan', 'data2vec-audio', 'hifigan', 'hubert', 'sew', 'sew-d', ...)
    built = recipes.get("wav2vec2").build()  # synthetic weights from facebook/wav2vec2-base-960h's configuration
    torch.export.export(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes)

Each family module declares one recipe and registers it on import, and is named after it: `wav2vec2`, `hubert`,
`wavlm`, `unispeech`, `unispeech_sat` (recipe `unispeech-sat`), `data2vec_audio` (recipe `data2vec-audio`), `sew`,
`sew_d` (recipe `sew-d`), `wav2vec2_conformer` (recipe `wav2vec2-conformer`), `univnet`, `hifigan` (the original HiFi-GAN), `speecht5_hifigan` (recipe
`speecht5-hifigan`), `bigvgan`, `vocos`, `wav2vec2_bert` (recipe `wav2vec2-bert`, which takes filterbanks), the codecs `dac`, `encodec` and `mimi`
(a program with an encode and a decode method), and the text-to-speech `vits` (an encode and a decode method, with
the host's part between them in `audiodeploy.program.tts`). Register your own with the same `@register` decorator (see `registry`). Declaring, listing and
describing recipes imports neither torch, torchaudio nor transformers (`audiodeploy list` answers at once):
`build()` imports them, and the export wrappers from `_modules`.
"""

from audiodeploy.program.mel import MelSpectrogram
from audiodeploy.program.vocabulary import STANDARD_ENGLISH, TORCHAUDIO_ENGLISH, CtcVocabulary, greedy_decode

from . import (
    bigvgan,
    dac,
    data2vec_audio,
    encodec,
    hifigan,
    hubert,
    mimi,
    sew,
    sew_d,
    speecht5_hifigan,
    unispeech,
    unispeech_sat,
    univnet,
    vits,
    vocos,
    wav2vec2,
    wav2vec2_bert,
    wav2vec2_conformer,
    wavlm,
)
from .calibration import calibration_files, calibration_inputs
from .errors import (
    CalibrationError,
    InputLengthError,
    LengthRangeError,
    QuantizationSchemeError,
    RecipeError,
    RegistrationError,
    UnknownRecipeError,
    UnknownSourceError,
    UnknownVariantError,
    WeightsError,
    WeightsMismatchError,
)
from .registry import Recipe, available, for_checkpoint, get, register, unregister
from .spec import (
    CTC_LOGITS_OUTPUT,
    WAVEFORM_OUTPUT,
    BuildRequest,
    BuiltHead,
    BuiltModel,
    InputSpec,
    LengthRange,
    OutputSpec,
    Variant,
    mel_input,
    synthetic_provenance,
    waveform_input,
)

__all__ = [
    "CTC_LOGITS_OUTPUT",
    "STANDARD_ENGLISH",
    "TORCHAUDIO_ENGLISH",
    "BuildRequest",
    "BuiltHead",
    "BuiltModel",
    "CalibrationError",
    "CtcVocabulary",
    "InputLengthError",
    "InputSpec",
    "LengthRange",
    "LengthRangeError",
    "MelSpectrogram",
    "OutputSpec",
    "QuantizationSchemeError",
    "Recipe",
    "RecipeError",
    "RegistrationError",
    "UnknownRecipeError",
    "UnknownSourceError",
    "UnknownVariantError",
    "Variant",
    "WAVEFORM_OUTPUT",
    "WeightsError",
    "WeightsMismatchError",
    "available",
    "calibration_files",
    "calibration_inputs",
    "dac",
    "data2vec_audio",
    "encodec",
    "for_checkpoint",
    "get",
    "greedy_decode",
    "hifigan",
    "hubert",
    "mel_input",
    "mimi",
    "register",
    "sew",
    "sew_d",
    "speecht5_hifigan",
    "synthetic_provenance",
    "unispeech",
    "unispeech_sat",
    "univnet",
    "unregister",
    "waveform_input",
    "wav2vec2",
    "wav2vec2_bert",
    "wav2vec2_conformer",
    "wavlm",
]

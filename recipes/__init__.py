"""Recipes: how each audio model family reaches the lowering core, as a library.

    from audiodeploy import recipes
    recipes.available()                      # ('hifigan', 'hubert', 'univnet', 'wav2vec2', 'wavlm')
    built = recipes.get("wav2vec2").build()  # synthetic weights from facebook/wav2vec2-base-960h's configuration
    torch.export.export(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes)

Each family module (`wav2vec2`, `hubert`, `wavlm`, `hifigan`, `univnet`) declares one recipe and registers
it on import; register your own with the same `@register` decorator (see `registry`).
"""

from . import hifigan, hubert, univnet, wav2vec2, wavlm
from ._audio import MelSpectrogram
from ._ctc import STANDARD_ENGLISH, TORCHAUDIO_ENGLISH, CtcVocabulary, greedy_decode
from .errors import (
    InputLengthError,
    LengthRangeError,
    RecipeError,
    RegistrationError,
    UnknownRecipeError,
    UnknownSourceError,
    UnknownVariantError,
    WeightsError,
    WeightsMismatchError,
)
from .registry import Recipe, available, get, register, unregister
from .spec import (
    CTC_LOGITS_OUTPUT,
    WAVEFORM_OUTPUT,
    BuildRequest,
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
    "BuiltModel",
    "CtcVocabulary",
    "InputLengthError",
    "InputSpec",
    "LengthRange",
    "LengthRangeError",
    "MelSpectrogram",
    "OutputSpec",
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
    "get",
    "greedy_decode",
    "hifigan",
    "hubert",
    "mel_input",
    "register",
    "synthetic_provenance",
    "univnet",
    "unregister",
    "waveform_input",
    "wav2vec2",
    "wavlm",
]

"""UniSpeech-SAT speech recognition (CTC, English characters), from transformers.

Variants copy the config.json of the published microsoft/ checkpoints, which keep HuBERT's two layouts (the
framework UniSpeech-SAT extends; WavLM later kept them too). Both are pre-trained only: their CTC head (standard
English vocabulary) is synthetic unless the weights bring a fine-tuned one. torchaudio does not build UniSpeech-SAT.
"""

from __future__ import annotations

from dataclasses import replace

from ._speech_encoder import (
    BASE_ENCODER,
    LARGE_ENCODER,
    TRANSFORMERS_ONLY_KEEP_FP32,
    SpeechEncoderRecipe,
    tiny_encoder_variant,
)
from ._transformers import UNPADDED_EAGER_ATTENTION
from .registry import register
from .spec import Variant

BASE_PLUS = Variant(
    name="base-plus",
    description="UniSpeech-SAT base+, 94 M parameters, pre-trained on 94 k h (no published CTC fine-tune); the "
    "configuration of microsoft/unispeech-sat-base-plus",
    checkpoint="microsoft/unispeech-sat-base-plus",
    # As for HuBERT base and WavLM base+, the preprocessor_config.json leaves the waveform unnormalized.
    architecture=replace(BASE_ENCODER, normalize_waveform=False),
)

LARGE = Variant(
    name="large",
    description="UniSpeech-SAT large, 315 M parameters, pre-trained on 94 k h (no published CTC fine-tune); the "
    "configuration of microsoft/unispeech-sat-large",
    checkpoint="microsoft/unispeech-sat-large",
    architecture=LARGE_ENCODER,
)


@register
class UniSpeechSat(SpeechEncoderRecipe):
    name = "unispeech-sat"
    description = "UniSpeech-SAT speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers",)
    variants = (
        BASE_PLUS,
        LARGE,
        tiny_encoder_variant("tiny", of=BASE_PLUS),
        tiny_encoder_variant("tiny-large", of=LARGE),
    )
    # Not measured quantized end to end (tests/recipes/test_quantized.py): fp32 only.
    int8_schemes = ()
    int8_keep_fp32 = TRANSFORMERS_ONLY_KEEP_FP32
    transformers_model_type = "unispeech-sat"
    transformers_model_class_name = "UniSpeechSatForCTC"
    transformers_attention = UNPADDED_EAGER_ATTENTION

"""wav2vec 2.0 speech recognition (CTC, English characters), from transformers or torchaudio.

Variants copy the config.json of the published facebook/ CTC checkpoints; the same architecture is built by
torchaudio's `wav2vec2_model`, whose presets (`wav2vec2_base`, `wav2vec2_large`, `wav2vec2_large_lv60k`)
agree with these values.
"""

from __future__ import annotations

from dataclasses import replace

from ._speech_encoder import BASE_ENCODER, LARGE_ENCODER, SpeechEncoderRecipe, tiny_encoder_variant
from ._transformers import UNPADDED_EAGER_ATTENTION
from .registry import register
from .spec import Variant

BASE = Variant(
    name="base",
    description="wav2vec 2.0 base, 94 M parameters, fine-tuned on LibriSpeech 960 h",
    checkpoint="facebook/wav2vec2-base-960h",
    architecture=BASE_ENCODER,
)

LARGE = Variant(
    name="large",
    description="wav2vec 2.0 large, 315 M parameters, pre-trained and fine-tuned on LibriSpeech 960 h",
    checkpoint="facebook/wav2vec2-large-960h",
    # The first large model keeps the base layout: post-norm, group-normalized feature encoder.
    architecture=replace(LARGE_ENCODER, feature_encoder_norm="group", layer_norm_first=False),
)

LARGE_LV60 = Variant(
    name="large-lv60",
    description="wav2vec 2.0 large pre-trained on Libri-Light 60 k h, self-trained, fine-tuned on LibriSpeech 960 h",
    checkpoint="facebook/wav2vec2-large-960h-lv60-self",
    architecture=replace(LARGE_ENCODER, feature_encoder_bias=True),
)


@register
class Wav2Vec2(SpeechEncoderRecipe):
    name = "wav2vec2"
    description = "wav2vec 2.0 speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers", "torchaudio")
    variants = (
        BASE,
        LARGE,
        LARGE_LV60,
        tiny_encoder_variant("tiny", of=BASE),
        tiny_encoder_variant("tiny-lv60", of=LARGE_LV60),
    )
    transformers_model_type = "wav2vec2"
    transformers_model_class_name = "Wav2Vec2ForCTC"
    transformers_attention = UNPADDED_EAGER_ATTENTION

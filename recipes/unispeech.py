"""UniSpeech speech recognition (CTC, English characters), from transformers.

The variant copies the config.json of microsoft/unispeech-large-1500h-cv, the one English pre-trained UniSpeech
checkpoint published (no base model was): the layout of wav2vec 2.0 large-lv60 and XLSR-53, a pre-norm
transformer after a layer-normalized feature encoder whose convolutions have a bias. It is pre-trained only
(`UniSpeechForPreTraining`): its CTC head (standard English vocabulary) is synthetic unless the weights bring one,
and a pre-training checkpoint exports as its features. torchaudio does not build UniSpeech.
"""

from __future__ import annotations

from dataclasses import replace

from ._speech_encoder import LARGE_ENCODER, TRANSFORMERS_ONLY_KEEP_FP32, SpeechEncoderRecipe, tiny_encoder_variant
from ._transformers import UNPADDED_EAGER_ATTENTION
from .registry import register
from .spec import Variant

LARGE = Variant(
    name="large",
    description="UniSpeech large, 315 M parameters, pre-trained on 1,500 h of Common Voice (no published English "
    "CTC fine-tune); the configuration of microsoft/unispeech-large-1500h-cv",
    checkpoint="microsoft/unispeech-large-1500h-cv",
    architecture=replace(LARGE_ENCODER, feature_encoder_bias=True),
)


@register
class UniSpeech(SpeechEncoderRecipe):
    name = "unispeech"
    description = "UniSpeech speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers",)
    variants = (LARGE, tiny_encoder_variant("tiny", of=LARGE))
    # Not measured quantized end to end (tests/recipes/test_quantized.py): fp32 only.
    int8_schemes = ()
    int8_keep_fp32 = TRANSFORMERS_ONLY_KEEP_FP32
    transformers_model_type = "unispeech"
    transformers_model_class_name = "UniSpeechForCTC"
    transformers_attention = UNPADDED_EAGER_ATTENTION

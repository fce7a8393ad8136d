"""HuBERT speech recognition (CTC, English characters), from transformers or torchaudio.

Variants copy the config.json of the published facebook/ checkpoints. Only the large model was published
fine-tuned for CTC (facebook/hubert-large-ls960-ft); `base` is the pre-trained facebook/hubert-base-ls960
encoder with a CTC head of the standard English vocabulary, which is synthetic unless the weights bring one.
torchaudio builds the same architecture with `wav2vec2_model` (its `hubert_base`/`hubert_large` presets).
The transformers config keeps the defaults `feat_proj_layer_norm=True` and `conv_pos_batch_norm=False`, which
are those of the published checkpoints (fairseq HuBERT layer-normalizes the extracted features; the positional
convolution is weight-normalized).
"""

from __future__ import annotations

from dataclasses import replace

from ._speech_encoder import BASE_ENCODER, LARGE_ENCODER, SpeechEncoderRecipe, tiny_encoder_variant
from ._transformers import UNPADDED_EAGER_ATTENTION
from .registry import register
from .spec import Variant

BASE = Variant(
    name="base",
    description="HuBERT base, 94 M parameters, pre-trained on LibriSpeech 960 h (no published CTC fine-tune)",
    checkpoint="facebook/hubert-base-ls960",
    # fairseq pre-trained HuBERT base on unnormalized audio (task.normalize=False; torchaudio's HUBERT_BASE
    # bundle agrees).
    architecture=replace(BASE_ENCODER, normalize_waveform=False),
)

LARGE = Variant(
    name="large",
    description="HuBERT large, 315 M parameters, pre-trained on Libri-Light 60 k h, fine-tuned on LibriSpeech 960 h",
    checkpoint="facebook/hubert-large-ls960-ft",
    architecture=LARGE_ENCODER,
)


@register
class Hubert(SpeechEncoderRecipe):
    name = "hubert"
    description = "HuBERT speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers", "torchaudio")
    variants = (
        BASE,
        LARGE,
        tiny_encoder_variant("tiny", of=BASE),
        tiny_encoder_variant("tiny-large", of=LARGE),
    )
    transformers_model_type = "hubert"
    transformers_model_class_name = "HubertForCTC"
    transformers_attention = UNPADDED_EAGER_ATTENTION

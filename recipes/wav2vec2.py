"""wav2vec 2.0 speech recognition (CTC, English characters), from transformers or torchaudio.

Variants copy the config.json of the published facebook/ CTC checkpoints; the same architecture is built by
torchaudio's `wav2vec2_model`, whose presets (`wav2vec2_base`, `wav2vec2_large`, `wav2vec2_large_lv60k`)
agree with these values.
"""

from __future__ import annotations

from torch import nn
from torchaudio.models import wav2vec2_model
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

from ._speech_encoder import (
    STANDARD_FEATURE_ENCODER,
    SpeechEncoderArchitecture,
    SpeechEncoderRecipe,
    tiny_variant,
)
from ._transformers import UNPADDED_EAGER_ATTENTION
from .registry import register
from .spec import Variant

BASE = Variant(
    name="base",
    description="wav2vec 2.0 base, 94 M parameters, fine-tuned on LibriSpeech 960 h",
    checkpoint="facebook/wav2vec2-base-960h",
    architecture=SpeechEncoderArchitecture(
        feature_encoder=STANDARD_FEATURE_ENCODER,
        feature_encoder_norm="group",
        feature_encoder_bias=False,
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        intermediate_size=3072,
        pos_conv_kernel=128,
        pos_conv_groups=16,
        layer_norm_first=False,
        vocab_size=32,
        normalize_waveform=True,
    ),
)

LARGE = Variant(
    name="large",
    description="wav2vec 2.0 large, 315 M parameters, pre-trained and fine-tuned on LibriSpeech 960 h",
    checkpoint="facebook/wav2vec2-large-960h",
    architecture=SpeechEncoderArchitecture(
        feature_encoder=STANDARD_FEATURE_ENCODER,
        feature_encoder_norm="group",
        feature_encoder_bias=False,
        hidden_size=1024,
        num_layers=24,
        num_heads=16,
        intermediate_size=4096,
        pos_conv_kernel=128,
        pos_conv_groups=16,
        layer_norm_first=False,
        vocab_size=32,
        normalize_waveform=True,
    ),
)

LARGE_LV60 = Variant(
    name="large-lv60",
    description="wav2vec 2.0 large pre-trained on Libri-Light 60 k h, self-trained, fine-tuned on LibriSpeech 960 h",
    checkpoint="facebook/wav2vec2-large-960h-lv60-self",
    architecture=SpeechEncoderArchitecture(
        feature_encoder=STANDARD_FEATURE_ENCODER,
        feature_encoder_norm="layer",
        feature_encoder_bias=True,
        hidden_size=1024,
        num_layers=24,
        num_heads=16,
        intermediate_size=4096,
        pos_conv_kernel=128,
        pos_conv_groups=16,
        layer_norm_first=True,
        vocab_size=32,
        normalize_waveform=True,
    ),
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
        tiny_variant("tiny", of=BASE),
        tiny_variant("tiny-lv60", of=LARGE_LV60),
    )
    transformers_model_type = "wav2vec2"
    transformers_model_class = Wav2Vec2ForCTC
    transformers_attention = UNPADDED_EAGER_ATTENTION

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> Wav2Vec2Config:
        return wav2vec2_transformers_config(architecture)

    def torchaudio_model(self, architecture: SpeechEncoderArchitecture, num_outputs: int) -> nn.Module:
        return wav2vec2_torchaudio_model(architecture, num_outputs)


def wav2vec2_transformers_config(architecture: SpeechEncoderArchitecture) -> Wav2Vec2Config:
    """transformers `Wav2Vec2Config` of `architecture`; everything else keeps the library default."""
    return Wav2Vec2Config(
        vocab_size=architecture.vocab_size,
        hidden_size=architecture.hidden_size,
        num_hidden_layers=architecture.num_layers,
        num_attention_heads=architecture.num_heads,
        intermediate_size=architecture.intermediate_size,
        feat_extract_norm=architecture.feature_encoder_norm,
        conv_dim=tuple(layer.channels for layer in architecture.feature_encoder),
        conv_kernel=tuple(layer.kernel for layer in architecture.feature_encoder),
        conv_stride=tuple(layer.stride for layer in architecture.feature_encoder),
        conv_bias=architecture.feature_encoder_bias,
        num_conv_pos_embeddings=architecture.pos_conv_kernel,
        num_conv_pos_embedding_groups=architecture.pos_conv_groups,
        do_stable_layer_norm=architecture.layer_norm_first,
    )


def wav2vec2_torchaudio_model(architecture: SpeechEncoderArchitecture, num_outputs: int) -> nn.Module:
    """torchaudio `Wav2Vec2Model` of `architecture` with a CTC head (`aux`) of `num_outputs` labels.

    torchaudio builds HuBERT with this same function (its `hubert_base`/`hubert_large` are presets of it).
    Dropouts are 0: they only act in training, and the module is built for inference.
    """
    return wav2vec2_model(
        extractor_mode=f"{architecture.feature_encoder_norm}_norm",
        extractor_conv_layer_config=[
            (layer.channels, layer.kernel, layer.stride) for layer in architecture.feature_encoder
        ],
        extractor_conv_bias=architecture.feature_encoder_bias,
        encoder_embed_dim=architecture.hidden_size,
        encoder_projection_dropout=0.0,
        encoder_pos_conv_kernel=architecture.pos_conv_kernel,
        encoder_pos_conv_groups=architecture.pos_conv_groups,
        encoder_num_layers=architecture.num_layers,
        encoder_num_heads=architecture.num_heads,
        encoder_attention_dropout=0.0,
        encoder_ff_interm_features=architecture.intermediate_size,
        encoder_ff_interm_dropout=0.0,
        encoder_dropout=0.0,
        encoder_layer_norm_first=architecture.layer_norm_first,
        encoder_layer_drop=0.0,
        aux_num_out=num_outputs,
    )

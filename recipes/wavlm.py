"""WavLM speech recognition (CTC, English characters), from transformers or torchaudio.

Variants copy the config.json of the published microsoft/ checkpoints. Both are pre-trained only: their CTC
head (standard English vocabulary) is synthetic unless the weights bring a fine-tuned one. torchaudio builds
the same architecture with `wavlm_model` (its `wavlm_base`/`wavlm_large` presets agree with these values).
WavLM's attention computes a gated relative-position bias in every layer and does not go through
transformers' attention interface, so it is built as transformers defines it.
"""

from __future__ import annotations

from torch import nn
from torchaudio.models import wavlm_model
from transformers import WavLMConfig, WavLMForCTC

from ._speech_encoder import (
    STANDARD_FEATURE_ENCODER,
    SpeechEncoderArchitecture,
    SpeechEncoderRecipe,
    tiny_variant,
)
from .registry import register
from .spec import Variant

BASE_PLUS = Variant(
    name="base-plus",
    description="WavLM base+, 94 M parameters, pre-trained on 94 k h (no published CTC fine-tune)",
    checkpoint="microsoft/wavlm-base-plus",
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
        normalize_waveform=False,
        relative_position_buckets=320,
        relative_position_max_distance=800,
    ),
)

LARGE = Variant(
    name="large",
    description="WavLM large, 315 M parameters, pre-trained on 94 k h (no published CTC fine-tune)",
    checkpoint="microsoft/wavlm-large",
    architecture=SpeechEncoderArchitecture(
        feature_encoder=STANDARD_FEATURE_ENCODER,
        feature_encoder_norm="layer",
        feature_encoder_bias=False,
        hidden_size=1024,
        num_layers=24,
        num_heads=16,
        intermediate_size=4096,
        pos_conv_kernel=128,
        pos_conv_groups=16,
        layer_norm_first=True,
        vocab_size=32,
        normalize_waveform=True,
        relative_position_buckets=320,
        relative_position_max_distance=800,
    ),
)


@register
class WavLM(SpeechEncoderRecipe):
    name = "wavlm"
    description = "WavLM speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers", "torchaudio")
    variants = (
        BASE_PLUS,
        LARGE,
        tiny_variant("tiny", of=BASE_PLUS),
        tiny_variant("tiny-large", of=LARGE),
    )
    transformers_model_type = "wavlm"
    transformers_model_class = WavLMForCTC
    transformers_attention = None

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> WavLMConfig:
        return wavlm_transformers_config(architecture)

    def torchaudio_model(self, architecture: SpeechEncoderArchitecture, num_outputs: int) -> nn.Module:
        return wavlm_torchaudio_model(architecture, num_outputs)


def _relative_position(architecture: SpeechEncoderArchitecture) -> tuple[int, int]:
    if architecture.relative_position_buckets is None or architecture.relative_position_max_distance is None:
        raise ValueError("a WavLM architecture needs relative_position_buckets and relative_position_max_distance")
    return architecture.relative_position_buckets, architecture.relative_position_max_distance


def wavlm_transformers_config(architecture: SpeechEncoderArchitecture) -> WavLMConfig:
    """transformers `WavLMConfig` of `architecture`; everything else keeps the library default."""
    num_buckets, max_distance = _relative_position(architecture)
    return WavLMConfig(
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
        num_buckets=num_buckets,
        max_bucket_distance=max_distance,
    )


def wavlm_torchaudio_model(architecture: SpeechEncoderArchitecture, num_outputs: int) -> nn.Module:
    """torchaudio WavLM (`wavlm_model`) of `architecture` with a CTC head (`aux`) of `num_outputs` labels.

    Dropouts are 0: they only act in training, and the module is built for inference.
    """
    num_buckets, max_distance = _relative_position(architecture)
    return wavlm_model(
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
        encoder_num_buckets=num_buckets,
        encoder_max_distance=max_distance,
        encoder_attention_dropout=0.0,
        encoder_ff_interm_features=architecture.intermediate_size,
        encoder_ff_interm_dropout=0.0,
        encoder_dropout=0.0,
        encoder_layer_norm_first=architecture.layer_norm_first,
        encoder_layer_drop=0.0,
        aux_num_out=num_outputs,
    )

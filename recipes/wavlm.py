"""WavLM speech recognition (CTC, English characters), from transformers or torchaudio.

Variants copy the config.json of the published microsoft/ checkpoints. Both are pre-trained only: their CTC
head (standard English vocabulary) is synthetic unless the weights bring a fine-tuned one. torchaudio builds
the same architecture with `wavlm_model` (its `wavlm_base`/`wavlm_large` presets agree with these values).
WavLM's attention computes a gated relative-position bias in every layer and does not go through
transformers' attention interface, so it is built as transformers defines it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ._speech_encoder import (
    BASE_ENCODER,
    LARGE_ENCODER,
    WHOLE_FEATURE_ENCODER_KEEP_FP32,
    SpeechEncoderArchitecture,
    SpeechEncoderRecipe,
    tiny_encoder_variant,
    torchaudio_model_arguments,
    transformers_config_arguments,
)
from .registry import register
from .spec import Variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import WavLMConfig


def _with_relative_position(encoder: SpeechEncoderArchitecture) -> SpeechEncoderArchitecture:
    """`encoder` with the gated relative-position bias of both published WavLM configurations: 320 buckets,
    distances up to 800 frames."""
    return replace(encoder, relative_position_buckets=320, relative_position_max_distance=800)


BASE_PLUS = Variant(
    name="base-plus",
    description="WavLM base+, 94 M parameters, pre-trained on 94 k h (no published CTC fine-tune)",
    checkpoint="microsoft/wavlm-base-plus",
    # As for HuBERT base, the preprocessor_config.json leaves the waveform unnormalized (do_normalize false).
    architecture=replace(_with_relative_position(BASE_ENCODER), normalize_waveform=False),
)

LARGE = Variant(
    name="large",
    description="WavLM large, 315 M parameters, pre-trained on 94 k h (no published CTC fine-tune)",
    checkpoint="microsoft/wavlm-large",
    architecture=_with_relative_position(LARGE_ENCODER),
    # Measured with benchmarks/int8_fidelity.py on 4 inputs per length (AVX-512 VNNI): keeping only the first
    # convolution, frame argmax agreement fell below ONNX Runtime int8's at 1 s (94.4% against 95.9%); with
    # the whole feature encoder fp32 it is 96.4% at 1 s and 98.6% at 10 s (ONNX Runtime 95.9% and 96.6%),
    # 33.4-33.7 dB, for 4.2 M more fp32 weights: the program is 0.27x the fp32 one.
    int8_keep_fp32=WHOLE_FEATURE_ENCODER_KEEP_FP32,
)


@register
class WavLM(SpeechEncoderRecipe):
    name = "wavlm"
    description = "WavLM speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers", "torchaudio")
    variants = (
        BASE_PLUS,
        LARGE,
        tiny_encoder_variant("tiny", of=BASE_PLUS),
        tiny_encoder_variant("tiny-large", of=LARGE),
    )
    transformers_model_type = "wavlm"
    transformers_model_class_name = "WavLMForCTC"
    transformers_attention = None

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> WavLMConfig:
        """The shared keys plus WavLM's relative-position buckets."""
        from transformers import WavLMConfig

        num_buckets, max_distance = _relative_position(architecture)
        return WavLMConfig(
            **transformers_config_arguments(architecture),
            num_buckets=num_buckets,
            max_bucket_distance=max_distance,
        )

    def torchaudio_model(self, architecture: SpeechEncoderArchitecture, num_outputs: int) -> nn.Module:
        """torchaudio's `wavlm_model` with the shared arguments plus WavLM's relative-position buckets."""
        from torchaudio.models import wavlm_model

        num_buckets, max_distance = _relative_position(architecture)
        return wavlm_model(
            **torchaudio_model_arguments(architecture, num_outputs),
            encoder_num_buckets=num_buckets,
            encoder_max_distance=max_distance,
        )


def _relative_position(architecture: SpeechEncoderArchitecture) -> tuple[int, int]:
    if architecture.relative_position_buckets is None or architecture.relative_position_max_distance is None:
        raise ValueError("a WavLM architecture needs relative_position_buckets and relative_position_max_distance")
    return architecture.relative_position_buckets, architecture.relative_position_max_distance

"""data2vec-audio speech recognition (CTC, English characters), from transformers.

Variants copy the config.json of the published facebook/ CTC checkpoints (fine-tuned on LibriSpeech 960 h). The
layout differs from wav2vec 2.0's in two places: every feature-encoder convolution is layer-normalized while the
transformer stays post-norm at both sizes (its config has no `feat_extract_norm` or `do_stable_layer_norm`), and
the positional convolution is a stack of five plain grouped convolutions of kernel 19, each followed by a layer
norm without parameters and GELU, where wav2vec 2.0 has one weight-normalized convolution of kernel 128 (transformers
calls the depth `num_conv_pos_embeddings` and the kernel `conv_pos_kernel_size`). torchaudio does not build it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ._speech_encoder import (
    BASE_ENCODER,
    LARGE_ENCODER,
    TRANSFORMERS_ONLY_KEEP_FP32,
    SpeechEncoderArchitecture,
    SpeechEncoderRecipe,
    tiny_encoder_variant,
    transformers_config_arguments,
)
from ._transformers import UNPADDED_EAGER_ATTENTION
from .registry import register
from .spec import Variant

if TYPE_CHECKING:
    from transformers import Data2VecAudioConfig


def _data2vec_layout(encoder: SpeechEncoderArchitecture) -> SpeechEncoderArchitecture:
    """`encoder` as both published data2vec-audio configurations have it: layer-normalized feature encoder,
    post-norm transformer, five positional convolutions of kernel 19 in 16 groups (fairseq `conv_pos` 95 over
    `pos_conv_depth` 5)."""
    return replace(
        encoder,
        feature_encoder_norm="layer",
        layer_norm_first=False,
        pos_conv_kernel=19,
        pos_conv_groups=16,
        pos_conv_depth=5,
    )


BASE = Variant(
    name="base",
    description="data2vec-audio base, 93 M parameters, fine-tuned on LibriSpeech 960 h; the configuration of "
    "facebook/data2vec-audio-base-960h",
    checkpoint="facebook/data2vec-audio-base-960h",
    architecture=_data2vec_layout(BASE_ENCODER),
)

LARGE = Variant(
    name="large",
    description="data2vec-audio large, 313 M parameters, fine-tuned on LibriSpeech 960 h; the configuration of "
    "facebook/data2vec-audio-large-960h",
    checkpoint="facebook/data2vec-audio-large-960h",
    architecture=_data2vec_layout(LARGE_ENCODER),
)


@register
class Data2VecAudio(SpeechEncoderRecipe):
    name = "data2vec-audio"
    description = "data2vec-audio speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers",)
    # The two sizes differ only in widths and depth: one test-size layout covers both.
    variants = (BASE, LARGE, tiny_encoder_variant("tiny", of=BASE))
    # Not measured quantized end to end (tests/recipes/test_quantized.py): fp32 only.
    int8_schemes = ()
    int8_keep_fp32 = TRANSFORMERS_ONLY_KEEP_FP32
    transformers_model_type = "data2vec-audio"
    transformers_model_class_name = "Data2VecAudioForCTC"
    transformers_attention = UNPADDED_EAGER_ATTENTION

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> Data2VecAudioConfig:
        """The shared keys with the positional convolution stack in data2vec-audio's names, without the two keys
        its config does not take (its layout is fixed: see the module docstring)."""
        from transformers import Data2VecAudioConfig

        if (
            architecture.pos_conv_depth is None
            or architecture.feature_encoder_norm != "layer"
            or architecture.layer_norm_first
        ):
            raise ValueError(
                "a data2vec-audio architecture has a layer-normalized feature encoder, a post-norm transformer and "
                "a pos_conv_depth"
            )
        arguments = transformers_config_arguments(architecture)
        del arguments["feat_extract_norm"], arguments["do_stable_layer_norm"]
        arguments["num_conv_pos_embeddings"] = architecture.pos_conv_depth
        arguments["conv_pos_kernel_size"] = architecture.pos_conv_kernel
        return Data2VecAudioConfig(**arguments)

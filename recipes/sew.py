"""SEW (Squeezed and Efficient Wav2vec) speech recognition (CTC, English characters), from transformers.

Variants copy the config.json of the published asapp/ checkpoints, pre-trained on LibriSpeech 960 h for 100 k
updates. SEW is wav2vec 2.0 with two changes for speed (asappresearch/sew, scripts/pt-sew.sh): a compact feature
encoder (WFE-C: 13 convolutions that widen from 64 to 512 channels, the same 320-sample stride) and a squeezed
transformer, which runs on frames average-pooled in pairs (plus a positional convolution of stride 2 and kernel 31)
and whose output a linear layer upsamples back to the frame rate. The transformer is post-norm, its attention
transformers' (the export builds it with `UNPADDED_EAGER_ATTENTION`). The checkpoints are pre-trained only: the CTC
head (standard English vocabulary) is synthetic unless the weights bring one. torchaudio does not build SEW.

transformers' SEW encoder branches on the parity of the frame count; the build replaces its forward by one that
does not (`_squeezed_encoders`), so the program holds for every length.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ._speech_encoder import (
    TRANSFORMERS_ONLY_KEEP_FP32,
    ConvLayer,
    SpeechEncoderArchitecture,
    SpeechEncoderRecipe,
    tiny_encoder_variant,
    transformers_config_arguments,
)
from ._transformers import UNPADDED_EAGER_ATTENTION
from .registry import register
from .spec import Variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import SEWConfig


def compact_feature_encoder(width: int) -> tuple[ConvLayer, ...]:
    """SEW's compact feature encoder (WFE-C) whose first convolution has `width` channels: a (10, 5) convolution,
    then six strided ones (kernels 3, 3, 3, 3, 2, 2; stride 2) at 2, 2, 4, 4, 8 and 8 times `width`, each followed
    by a pointwise one of the same width (scripts/pt-sew.sh, `wfe_l=1`); 320 samples per frame, as wav2vec 2.0."""
    layers = [ConvLayer(width, 10, 5)]
    for multiple, kernel in ((2, 3), (2, 3), (4, 3), (4, 3), (8, 2), (8, 2)):
        layers += [ConvLayer(width * multiple, kernel, 2), ConvLayer(width * multiple, 1, 1)]
    return tuple(layers)


TINY_100K = Variant(
    name="tiny-100k",
    description="SEW tiny, 41 M parameters, pre-trained on LibriSpeech 960 h (100 k updates); the configuration of "
    "asapp/sew-tiny-100k",
    checkpoint="asapp/sew-tiny-100k",
    architecture=SpeechEncoderArchitecture(
        feature_encoder=compact_feature_encoder(64),
        feature_encoder_norm="group",
        feature_encoder_bias=False,
        hidden_size=512,
        num_layers=12,
        num_heads=8,
        intermediate_size=2048,
        pos_conv_kernel=31,
        pos_conv_groups=16,
        layer_norm_first=False,
        vocab_size=32,
        normalize_waveform=True,
        squeeze_factor=2,
    ),
)

MID_100K = Variant(
    name="mid-100k",
    description="SEW mid, 175 M parameters, pre-trained on LibriSpeech 960 h (100 k updates); the configuration of "
    "asapp/sew-mid-100k",
    checkpoint="asapp/sew-mid-100k",
    # The same layout as tiny's, wider and twice as deep.
    architecture=replace(TINY_100K.architecture, hidden_size=768, num_layers=24, num_heads=12, intermediate_size=3072),
)


@register
class SEW(SpeechEncoderRecipe):
    name = "sew"
    description = "SEW speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers",)
    # The two sizes differ only in widths and depth: one test-size layout covers both.
    variants = (TINY_100K, MID_100K, tiny_encoder_variant("tiny", of=TINY_100K))
    # Not measured quantized end to end (tests/recipes/test_quantized.py): fp32 only.
    int8_schemes = ()
    int8_keep_fp32 = TRANSFORMERS_ONLY_KEEP_FP32
    transformers_model_type = "sew"
    transformers_model_class_name = "SEWForCTC"
    transformers_attention = UNPADDED_EAGER_ATTENTION

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> SEWConfig:
        """The shared keys and the squeeze factor; SEW's transformer is post-norm only (no `do_stable_layer_norm`)."""
        from transformers import SEWConfig

        return SEWConfig(**squeezed_config_arguments(architecture, "SEW"))

    def exportable(self, model: nn.Module) -> nn.Module:
        from ._squeezed_encoders import exportable_squeezed_encoder

        return exportable_squeezed_encoder(model)


def squeezed_config_arguments(architecture: SpeechEncoderArchitecture, family: str) -> dict[str, object]:
    """The config keys SEW and SEW-D share: the shared ones but `do_stable_layer_norm`, and `squeeze_factor`."""
    if architecture.squeeze_factor is None or architecture.layer_norm_first:
        raise ValueError(f"a {family} architecture has a squeeze_factor and a post-norm transformer")
    arguments = transformers_config_arguments(architecture)
    del arguments["do_stable_layer_norm"]
    arguments["squeeze_factor"] = architecture.squeeze_factor
    return arguments

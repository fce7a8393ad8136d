"""SEW-D speech recognition (CTC, English characters), from transformers.

Variants copy the config.json of the published asapp/ checkpoints, pre-trained on LibriSpeech 960 h. SEW-D is SEW
(see `sew`: compact feature encoder, transformer on frames pooled in pairs) with DeBERTa's disentangled attention:
every layer adds content-to-position and position-to-content scores over log-bucketed relative positions (256
buckets a direction, up to 512 frames), computed in transformers' own `DisentangledSelfAttention`, which does not
go through transformers' attention interface; it is built as transformers defines it. torchaudio does not build
SEW-D.

transformers' SEW-D encoder branches on the parity of the frame count; the build replaces its forward by one that
does not (`_squeezed_encoders`), so the program holds for every length.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from ._speech_encoder import (
    TRANSFORMERS_ONLY_KEEP_FP32,
    SpeechEncoderArchitecture,
    SpeechEncoderRecipe,
    tiny_encoder_variant,
)
from .registry import register
from .sew import compact_feature_encoder, squeezed_config_arguments
from .spec import Variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import SEWDConfig

# The disentangled attention of every published SEW-D config.json (also transformers' defaults): both relative
# terms, the position projections shared with the content ones, the relative embeddings layer-normalized; and the
# exact (erf) GELU written out in Python, and the layer-norm epsilons of DeBERTa (transformer) and SEW (features).
DISENTANGLED_ATTENTION = MappingProxyType(
    {
        "relative_attention": True,
        "pos_att_type": ("p2c", "c2p"),
        "share_att_key": True,
        "norm_rel_ebd": "layer_norm",
        "hidden_act": "gelu_python",
        "layer_norm_eps": 1e-7,
        "feature_layer_norm_eps": 1e-5,
    }
)

TINY_100K = Variant(
    name="tiny-100k",
    description="SEW-D tiny, 24 M parameters, pre-trained on LibriSpeech 960 h (100 k updates); the configuration of "
    "asapp/sew-d-tiny-100k",
    checkpoint="asapp/sew-d-tiny-100k",
    architecture=SpeechEncoderArchitecture(
        feature_encoder=compact_feature_encoder(64),
        feature_encoder_norm="group",
        feature_encoder_bias=False,
        hidden_size=384,
        num_layers=12,
        num_heads=6,
        intermediate_size=1536,
        pos_conv_kernel=31,
        pos_conv_groups=16,
        layer_norm_first=False,
        vocab_size=32,
        normalize_waveform=True,
        relative_position_buckets=256,
        relative_position_max_distance=512,
        squeeze_factor=2,
    ),
)

BASE_PLUS_400K = Variant(
    name="base-plus-400k",
    description="SEW-D base+, 177 M parameters, pre-trained on LibriSpeech 960 h (400 k updates), fine-tuned on "
    "LibriSpeech 100 h; the configuration of asapp/sew-d-base-plus-400k-ft-ls100h",
    checkpoint="asapp/sew-d-base-plus-400k-ft-ls100h",
    # base+ widens the feature encoder by half (scripts/pt-sew-d.sh, `wfe_c=96`): its last width is the hidden size.
    architecture=replace(
        TINY_100K.architecture,
        feature_encoder=compact_feature_encoder(96),
        hidden_size=768,
        num_layers=24,
        num_heads=12,
        intermediate_size=3072,
    ),
)


@register
class SEWD(SpeechEncoderRecipe):
    name = "sew-d"
    description = "SEW-D speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers",)
    # The two sizes differ only in widths and depth: one test-size layout covers both.
    variants = (TINY_100K, BASE_PLUS_400K, tiny_encoder_variant("tiny", of=TINY_100K))
    # Not measured quantized end to end (tests/recipes/test_quantized.py): fp32 only.
    int8_schemes = ()
    int8_keep_fp32 = TRANSFORMERS_ONLY_KEEP_FP32
    transformers_model_type = "sew-d"
    transformers_model_class_name = "SEWDForCTC"
    transformers_attention = None

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> SEWDConfig:
        """SEW's keys, the relative-position buckets and SEW-D's disentangled attention (`DISENTANGLED_ATTENTION`)."""
        from transformers import SEWDConfig

        if architecture.relative_position_buckets is None or architecture.relative_position_max_distance is None:
            raise ValueError("a SEW-D architecture needs relative_position_buckets and relative_position_max_distance")
        return SEWDConfig(
            **squeezed_config_arguments(architecture, "SEW-D"),
            position_buckets=architecture.relative_position_buckets,
            max_position_embeddings=architecture.relative_position_max_distance,
            **DISENTANGLED_ATTENTION,
        )

    def exportable(self, model: nn.Module) -> nn.Module:
        from ._squeezed_encoders import exportable_squeezed_encoder

        return exportable_squeezed_encoder(model)

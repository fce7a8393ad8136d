"""wav2vec2-conformer speech recognition (CTC, English characters), from transformers.

Variants copy the config.json of the published facebook/ CTC checkpoints (fairseq S2T's wav2vec 2.0 conformer,
pre-trained on Libri-Light 60 k h and fine-tuned on LibriSpeech 960 h), one per kind of position embedding. Both
keep wav2vec 2.0 large-lv60's feature encoder (layer-normalized, with biases) and replace each transformer layer by
a conformer block: a half-step feed-forward, self-attention, a convolution module (pointwise, GLU, depthwise of
kernel 31, batch norm, swish, pointwise), a second half-step feed-forward and a layer norm. The feed-forwards and
the convolution module use swish (`hidden_act`); the depthwise kernel is the library default 31 at every size. The
attention rotates queries and keys (rotary) or adds a Transformer-XL relative position bias from a table of
sinusoids (relative; `max_source_positions` 5000, a buffer of 9999 rows of the hidden size). The checkpoints also
hold wav2vec 2.0's weight-normalized positional convolution (8.4 M parameters at large size, counted in the
descriptions), which transformers builds and never calls: the exported program has no positional convolution.

The attention goes through transformers' attention interface and passes the relative bias as `position_bias`,
which wav2vec2's eager attention (`UNPADDED_EAGER_ATTENTION`) ignores: the build registers the family's own eager
attention without a mask as `UNPADDED_CONFORMER_ATTENTION`. transformers caches the rotary table of the last
length, which would fix the exported length; the build gives the rotary embedding a forward without the cache
(`_conformer_encoders`), so the program holds for every length. torchaudio does not build wav2vec2-conformer with a
CTC head: transformers only.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING

from ._speech_encoder import (
    LARGE_ENCODER,
    TRANSFORMERS_ONLY_KEEP_FP32,
    SpeechEncoderArchitecture,
    SpeechEncoderRecipe,
    tiny_encoder_variant,
    transformers_config_arguments,
)
from ._transformers import register_unpadded_attention
from .registry import register
from .spec import BuildRequest, BuiltModel, Variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import Wav2Vec2ConformerConfig

UNPADDED_CONFORMER_ATTENTION = "audiodeploy_unpadded_eager_conformer"
"""transformers' wav2vec2-conformer eager attention (which adds the relative position bias) without an attention
mask: `UNPADDED_EAGER_ATTENTION` for this family, bit-identical to `attn_implementation="eager"`."""


@functools.cache
def register_unpadded_conformer_attention() -> None:
    """Register `UNPADDED_CONFORMER_ATTENTION` with transformers; idempotent, like `register_unpadded_eager_attention`."""
    from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import eager_attention_forward

    register_unpadded_attention(UNPADDED_CONFORMER_ATTENTION, eager_attention_forward)


# wav2vec 2.0 large-lv60's layout (pre-norm, layer-normalized feature encoder with biases) with conformer blocks.
_CONFORMER_LARGE = replace(LARGE_ENCODER, feature_encoder_bias=True)

ROPE_LARGE = Variant(
    name="rope-large",
    description="wav2vec2-conformer large with rotary position embeddings, 593 M parameters, pre-trained on "
    "Libri-Light 60 k h and fine-tuned on LibriSpeech 960 h; the configuration of "
    "facebook/wav2vec2-conformer-rope-large-960h-ft",
    checkpoint="facebook/wav2vec2-conformer-rope-large-960h-ft",
    architecture=replace(_CONFORMER_LARGE, position_embeddings="rotary"),
)

REL_POS_LARGE = Variant(
    name="rel-pos-large",
    description="wav2vec2-conformer large with relative position embeddings, 619 M parameters, pre-trained on "
    "Libri-Light 60 k h and fine-tuned on LibriSpeech 960 h; the configuration of "
    "facebook/wav2vec2-conformer-rel-pos-large-960h-ft",
    checkpoint="facebook/wav2vec2-conformer-rel-pos-large-960h-ft",
    architecture=replace(_CONFORMER_LARGE, position_embeddings="relative"),
)


@register
class Wav2Vec2Conformer(SpeechEncoderRecipe):
    name = "wav2vec2-conformer"
    description = "wav2vec2-conformer speech recognition: 16 kHz waveform to English characters (CTC)"
    sources = ("transformers",)
    # The two position embeddings compute different graphs: one test size for each ("tiny" has the default's).
    variants = (
        ROPE_LARGE,
        REL_POS_LARGE,
        tiny_encoder_variant("tiny", of=ROPE_LARGE),
        tiny_encoder_variant("tiny-rel-pos", of=REL_POS_LARGE),
    )
    # Lowered by hand when added (fp32, 0.5-2 s; not in tests/recipes/test_lowered.py): tiny, 1 delegate, 4 slice_copy
    # outside, max diff 6e-7; tiny-rel-pos, 12 delegates (the relative shift's views with two dynamic dimensions
    # stay outside), max diff 5e-7, and its 9999-row sinusoid table in the program (41 MB at large size).
    # Not measured quantized end to end (tests/recipes/test_quantized.py): fp32 only.
    int8_schemes = ()
    int8_keep_fp32 = TRANSFORMERS_ONLY_KEEP_FP32
    transformers_model_type = "wav2vec2-conformer"
    transformers_model_class_name = "Wav2Vec2ConformerForCTC"
    transformers_attention = UNPADDED_CONFORMER_ATTENTION

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> Wav2Vec2ConformerConfig:
        """The shared keys with the position embeddings and swish; without `do_stable_layer_norm`, which the
        conformer blocks (always pre-norm) do not read."""
        from transformers import Wav2Vec2ConformerConfig

        if architecture.position_embeddings is None or not architecture.layer_norm_first:
            raise ValueError("a wav2vec2-conformer architecture has position_embeddings and pre-norm blocks")
        arguments = transformers_config_arguments(architecture)
        del arguments["do_stable_layer_norm"]
        arguments["position_embeddings_type"] = architecture.position_embeddings
        arguments["hidden_act"] = "swish"
        return Wav2Vec2ConformerConfig(**arguments)

    def exportable(self, model: nn.Module) -> nn.Module:
        from ._conformer_encoders import exportable_conformer_encoder

        return exportable_conformer_encoder(model)

    def _build(self, request: BuildRequest[SpeechEncoderArchitecture]) -> BuiltModel:
        # `transformers_attention` names it; transformers looks it up when the model is built or loaded.
        register_unpadded_conformer_attention()
        return super()._build(request)

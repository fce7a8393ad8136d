"""wav2vec2-conformer: its published layouts, the attention that keeps the relative position bias, and the rotary
embedding without its cache (the checks every speech encoder passes are in test_speech_encoders.py)."""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.recipes._conformer_encoders import ExportableRotaryEmbedding
from audiodeploy.recipes._transformers import UNPADDED_EAGER_ATTENTION
from audiodeploy.recipes.wav2vec2_conformer import UNPADDED_CONFORMER_ATTENTION


def test_published_layouts():
    recipe = recipes.get("wav2vec2-conformer")
    for variant, position_embeddings in (("rope-large", "rotary"), ("rel-pos-large", "relative")):
        config = recipe.transformers_config(recipe.variant(variant).architecture)
        assert config.position_embeddings_type == position_embeddings
        assert (config.hidden_act, config.conv_depthwise_kernel_size, config.feat_extract_norm) == (
            "swish",
            31,
            "layer",
        )
        assert (config.hidden_size, config.num_hidden_layers, config.conv_bias) == (1024, 24, True)
    assert recipe.variant("tiny-rel-pos").architecture.position_embeddings == "relative"


@pytest.mark.parametrize("variant", ["tiny", "tiny-rel-pos"])
def test_the_unpadded_attention_computes_what_eager_does(variant):
    """Bit-identical to transformers' eager attention; wav2vec2's unpadded attention would drop the relative bias."""
    built = recipes.get("wav2vec2-conformer").build(variant)
    model = built.module.model
    assert model.config._attn_implementation == UNPADDED_CONFORMER_ATTENTION
    inputs = built.random_inputs(16_000, seed=1)
    outputs = {}
    for attention in (UNPADDED_CONFORMER_ATTENTION, "eager", UNPADDED_EAGER_ATTENTION):
        model.set_attn_implementation(attention)
        with torch.no_grad():
            outputs[attention] = built.module(*inputs)
    assert torch.equal(outputs[UNPADDED_CONFORMER_ATTENTION], outputs["eager"])
    ignores_the_bias = torch.equal(outputs[UNPADDED_EAGER_ATTENTION], outputs["eager"])
    assert ignores_the_bias == (variant == "tiny")


def test_the_rotary_embedding_computes_what_transformers_does_at_every_length():
    built = recipes.get("wav2vec2-conformer").build("tiny")
    embedding = built.module.model.base_model.encoder.embed_positions
    assert type(embedding) is ExportableRotaryEmbedding
    for frames in (49, 50, 49):
        hidden_states = torch.zeros(1, frames, 32)
        ours = embedding(hidden_states)
        embedding.__class__ = ExportableRotaryEmbedding.__base__  # transformers' own embedding, same module
        try:
            theirs = embedding(hidden_states)
        finally:
            embedding.__class__ = ExportableRotaryEmbedding
        assert ours.shape == (2, frames, 1, 1, 16)
        assert torch.equal(ours, theirs)

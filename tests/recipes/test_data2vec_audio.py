"""data2vec-audio: its positional convolution stack in transformers' names (the checks every speech encoder
passes are in test_speech_encoders.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from audiodeploy import recipes


def test_the_positional_convolution_stack_is_configured_in_transformers_names():
    recipe = recipes.get("data2vec-audio")
    config = recipe.transformers_config(recipe.variant("base").architecture)
    assert (config.num_conv_pos_embeddings, config.conv_pos_kernel_size, config.num_conv_pos_embedding_groups) == (
        5,
        19,
        16,
    )
    tiny = recipe.transformers_config(recipe.variant("tiny").architecture)
    assert (tiny.num_conv_pos_embeddings, tiny.conv_pos_kernel_size) == (5, 7)


def test_a_layout_data2vec_audio_cannot_build_is_refused():
    recipe = recipes.get("data2vec-audio")
    pre_norm = replace(recipe.variant("large").architecture, layer_norm_first=True)
    with pytest.raises(ValueError, match="post-norm"):
        recipe.transformers_config(pre_norm)

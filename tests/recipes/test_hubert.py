"""HuBERT: both sources at test size, real weights loading, published configurations."""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from tests.recipes.speech_encoder_checks import (
    check_published_configuration,
    check_seed_decides_the_synthetic_weights,
    check_tiny_builds_and_exports,
    check_torchaudio_state_dict_matches_transformers,
    check_transformers_weights_round_trip,
)


@pytest.mark.parametrize("source", ["transformers", "torchaudio"])
@pytest.mark.parametrize("variant", ["tiny", "tiny-large"])
def test_tiny_fp32_builds_and_exports_like_eager(variant, source):
    check_tiny_builds_and_exports("hubert", variant, source)


def test_seed_decides_the_synthetic_weights():
    check_seed_decides_the_synthetic_weights("hubert")


def test_transformers_weights_round_trip(tmp_path):
    check_transformers_weights_round_trip("hubert", "tiny-large", tmp_path)


@pytest.mark.parametrize("variant", ["tiny", "tiny-large"])
def test_torchaudio_state_dict_matches_transformers(variant, tmp_path):
    check_torchaudio_state_dict_matches_transformers("hubert", variant, tmp_path)


@pytest.mark.parametrize(("variant", "parameters"), [("base", 94_396_320), ("large", 315_467_936)])
def test_published_configuration(variant, parameters):
    check_published_configuration("hubert", variant, parameters)


def test_published_layouts():
    base, large = (recipes.get("hubert").variant(name) for name in ("base", "large"))
    assert (base.checkpoint, large.checkpoint) == ("facebook/hubert-base-ls960", "facebook/hubert-large-ls960-ft")
    assert (base.architecture.feature_encoder_norm, base.architecture.layer_norm_first) == ("group", False)
    assert (large.architecture.feature_encoder_norm, large.architecture.layer_norm_first) == ("layer", True)
    assert not base.architecture.feature_encoder_bias and not large.architecture.feature_encoder_bias
    assert recipes.get("hubert").transformers_config(base.architecture).feat_proj_layer_norm


def test_a_pretrained_checkpoint_without_ctc_head_loads_with_a_synthetic_head(tmp_path):
    # facebook/hubert-base-ls960 is published as HubertModel: no lm_head.
    recipe = recipes.get("hubert")
    full = recipe.build("tiny", seed=1)
    full.module.model.hubert.save_pretrained(tmp_path)
    loaded = recipe.build("tiny", weights=str(tmp_path), seed=9)
    assert loaded.notes == ("the checkpoint has no CTC head: lm_head is synthetic (seed 9)",)
    body = loaded.module.model.hubert.state_dict()
    for name, value in full.module.model.hubert.state_dict().items():
        assert torch.equal(body[name], value), name

"""HuBERT: its published layouts and a pre-trained checkpoint without CTC head (the checks every speech
encoder passes are in test_speech_encoders.py)."""

from __future__ import annotations

import torch

from audiodeploy import recipes


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

"""HuBERT: its published layouts and a pre-trained checkpoint without CTC head (the checks every speech
encoder passes are in test_speech_encoders.py)."""

from __future__ import annotations

import json

import torch

from audiodeploy import recipes


def test_published_layouts():
    base, large = (recipes.get("hubert").variant(name) for name in ("base", "large"))
    assert (base.checkpoint, large.checkpoint) == ("facebook/hubert-base-ls960", "facebook/hubert-large-ls960-ft")
    assert (base.architecture.feature_encoder_norm, base.architecture.layer_norm_first) == ("group", False)
    assert (large.architecture.feature_encoder_norm, large.architecture.layer_norm_first) == ("layer", True)
    assert not base.architecture.feature_encoder_bias and not large.architecture.feature_encoder_bias
    assert recipes.get("hubert").transformers_config(base.architecture).feat_proj_layer_norm


def test_a_pretrained_checkpoint_without_ctc_head_gives_its_features(tmp_path):
    # facebook/hubert-base-ls960 is published as HubertModel: no lm_head, so the program outputs the features.
    recipe = recipes.get("hubert")
    full = recipe.build("tiny", seed=1)
    full.module.model.hubert.save_pretrained(tmp_path)
    loaded = recipe.build("tiny", weights=str(tmp_path), seed=9)
    assert loaded.output.kind == "hidden-states" and loaded.notes == ()
    body = loaded.module.model.state_dict()
    for name, value in full.module.model.hubert.state_dict().items():
        assert torch.equal(body[name], value), name


def test_a_ctc_checkpoint_whose_config_names_no_architecture_gets_a_synthetic_head(tmp_path):
    recipe = recipes.get("hubert")
    full = recipe.build("tiny", seed=1)
    full.module.model.hubert.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = recipe.build("tiny", weights=str(tmp_path), seed=9)
    assert loaded.output.kind == "ctc-logits"
    assert loaded.notes == ("the checkpoint has no CTC head: lm_head is synthetic (seed 9)",)

"""wav2vec2: its published layouts, a full-size build, tokenizers, bad weights and static shapes (the checks
every speech encoder passes are in test_speech_encoders.py)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import HubertConfig, HubertForCTC, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor

from audiodeploy import recipes
from audiodeploy.recipes import (
    STANDARD_ENGLISH,
    TORCHAUDIO_ENGLISH,
    LengthRange,
    WeightsError,
    WeightsMismatchError,
)
from tests.recipes.helpers import assert_one_line


def test_published_layouts():
    base, large, lv60 = (recipes.get("wav2vec2").variant(name) for name in ("base", "large", "large-lv60"))
    assert base.checkpoint == "facebook/wav2vec2-base-960h"
    assert large.checkpoint == "facebook/wav2vec2-large-960h"
    assert lv60.checkpoint == "facebook/wav2vec2-large-960h-lv60-self"

    # base and large: group-norm feature encoder without bias, post-norm transformer.
    def layout(variant):
        architecture = variant.architecture
        return architecture.feature_encoder_norm, architecture.feature_encoder_bias, architecture.layer_norm_first

    assert layout(base) == layout(large) == ("group", False, False)
    # lv60-self: layer-norm feature encoder with bias, pre-norm ("stable layer norm") transformer.
    assert layout(lv60) == ("layer", True, True)
    assert all(variant.architecture.stride == 320 for variant in (base, large, lv60))


def test_base_builds_at_full_size_and_transcribes():
    built = recipes.get("wav2vec2").build()
    assert built.variant == "base"
    assert built.weights_provenance == "synthetic (seed 0) from the published facebook/wav2vec2-base-960h configuration"
    with torch.no_grad():
        logits = built.module(*built.example_inputs)
    assert logits.shape == (1, 49, 32)
    assert isinstance(built.vocabulary.decode(logits), str)


def test_tokenizer_and_preprocessor_beside_the_weights_are_used(tmp_path):
    recipe = recipes.get("wav2vec2")
    recipe.build("tiny").module.model.save_pretrained(tmp_path)
    tokens = ["[PAD]", "[UNK]", "|", *"abcdefghijklmnopqrstuvwxyz", "'", "-", "."]
    (tmp_path / "vocab.json").write_text(json.dumps({token: index for index, token in enumerate(tokens)}))
    tokenizer = Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json"), unk_token="[UNK]", pad_token="[PAD]")
    tokenizer.save_pretrained(tmp_path)
    Wav2Vec2FeatureExtractor(do_normalize=False).save_pretrained(tmp_path)

    loaded = recipe.build("tiny", weights=str(tmp_path))
    assert loaded.vocabulary is not None
    assert loaded.vocabulary.tokens == tuple(tokens)
    assert (loaded.vocabulary.blank, loaded.vocabulary.word_delimiter) == ("[PAD]", "|")
    assert loaded.vocabulary.origin == f"tokenizer in {tmp_path}"
    assert loaded.module.normalize_waveform is False


def test_a_tokenizer_of_another_size_is_refused(tmp_path):
    recipes.get("wav2vec2").build("tiny").module.model.save_pretrained(tmp_path)
    (tmp_path / "vocab.json").write_text(json.dumps({"<pad>": 0, "|": 1, "A": 2}))
    Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json")).save_pretrained(tmp_path)
    with pytest.raises(WeightsError) as caught:
        recipes.get("wav2vec2").build("tiny", weights=str(tmp_path))
    assert_one_line(caught.value, "has 6 tokens but the CTC head has 32 outputs")


def test_weights_of_another_model_type_are_refused(tmp_path):
    config = HubertConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(32,) * 7,
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2,
    )
    HubertForCTC(config).save_pretrained(tmp_path)
    with pytest.raises(WeightsMismatchError) as caught:
        recipes.get("wav2vec2").build("tiny", weights=str(tmp_path))
    assert_one_line(caught.value, "hold a 'hubert' model", "recipe 'wav2vec2' builds 'wav2vec2'", "recipe for hubert")


def test_missing_weights_are_a_one_line_error(tmp_path):
    with pytest.raises(WeightsError) as caught:
        recipes.get("wav2vec2").build("tiny", weights=str(tmp_path / "missing"))
    assert_one_line(caught.value, "not found")


def test_a_directory_without_config_is_refused(tmp_path):
    with pytest.raises(WeightsError) as caught:
        recipes.get("wav2vec2").build("tiny", weights=str(tmp_path))
    assert_one_line(caught.value, "has no config.json")


def test_each_source_refuses_the_other_sources_weights(tmp_path):
    state_file = tmp_path / "weights.pt"
    torch.save({}, state_file)
    with pytest.raises(WeightsError) as caught:
        recipes.get("wav2vec2").build("tiny", weights=str(state_file))
    assert_one_line(caught.value, "is a file", "--source torchaudio")
    with pytest.raises(WeightsError) as caught:
        recipes.get("wav2vec2").build("tiny", source="torchaudio", weights=str(tmp_path))
    assert_one_line(caught.value, "is a directory", "--source transformers")


def test_a_file_that_is_not_a_state_dict_is_refused(tmp_path):
    path = tmp_path / "audio.wav"
    path.write_bytes(b"RIFF not a checkpoint")
    with pytest.raises(WeightsError) as caught:
        recipes.get("wav2vec2").build("tiny", source="torchaudio", weights=str(path))
    assert_one_line(caught.value, "cannot read weights", "not a PyTorch checkpoint")


def test_a_state_dict_of_another_variant_is_refused(tmp_path):
    recipe = recipes.get("wav2vec2")
    path = tmp_path / "lv60.pt"
    torch.save(recipe.build("tiny-lv60", source="torchaudio").module.model.state_dict(), path)
    with pytest.raises(WeightsError) as caught:
        recipe.build("tiny", source="torchaudio", weights=str(path))
    assert_one_line(caught.value, "does not fit torchaudio wav2vec2 'tiny'", "choose the variant it was trained as")


def test_a_torchaudio_bundle_head_decodes_with_torchaudio_labels(tmp_path):
    recipe = recipes.get("wav2vec2")
    architecture = recipe.variant("tiny").architecture
    path = tmp_path / "bundle.pt"
    torch.save(recipe.torchaudio_model(architecture, num_outputs=29).state_dict(), path)
    built = recipe.build("tiny", source="torchaudio", weights=str(path))
    assert built.vocabulary == TORCHAUDIO_ENGLISH
    with torch.no_grad():
        assert built.module(*built.example_inputs).shape == (1, 49, 29)


def test_a_state_dict_without_ctc_head_gets_a_synthetic_one(tmp_path):
    recipe = recipes.get("wav2vec2")
    state = recipe.build("tiny", source="torchaudio").module.model.state_dict()
    path = tmp_path / "pretrained.pt"
    torch.save({key: value for key, value in state.items() if not key.startswith("aux.")}, path)
    built = recipe.build("tiny", source="torchaudio", weights=str(path), seed=4)
    assert built.vocabulary == STANDARD_ENGLISH
    assert built.notes == ("the state dict has no CTC head: aux is synthetic (seed 4)",)


def test_a_fixed_length_exports_with_static_shapes():
    built = recipes.get("wav2vec2").build("tiny", length_range=LengthRange.fixed(2.0))
    assert built.dynamic_shapes == ({},)
    assert built.example_inputs[0].shape == (1, 32_000)
    program = torch.export.export(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes)
    assert program.range_constraints == {}

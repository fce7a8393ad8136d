"""wav2vec2-bert: a speech encoder whose input is filterbank rows (160 features every 20 ms), normalized per mel bin
inside the program; built, run and exported at test size, the published sizes on the meta device. Its one lowering
is the runtime's (tests/runtime/test_model.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import SeamlessM4TFeatureExtractor

from audiodeploy import recipes
from audiodeploy.program.mel import Fbank
from audiodeploy.recipes import STANDARD_ENGLISH
from tests.recipes.helpers import assert_exports_like_eager

RECIPE = recipes.get("wav2vec2-bert")


def speech_like(samples: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 16_000
    tone = np.sin(2 * np.pi * (150 + 80 * np.sin(3 * t)) * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    return (0.4 * tone + 0.03 * rng.standard_normal(samples)).astype(np.float32)


@pytest.mark.parametrize(("variant", "rows_per_frame"), [("tiny", 1), ("tiny-adapter", 2)])
def test_tiny_fp32_builds_and_exports_like_eager(variant, rows_per_frame):
    """(1, rows, 160) filterbank rows over 1-10 s (50-500 rows of 20 ms) in multiples of the adapter's stride; the
    description carries the front end; the export over the whole range matches eager at both ends."""
    built = RECIPE.build(variant)
    assert built.weights_provenance == f"synthetic (seed 0) from the test-size '{variant}' configuration"
    assert built.fbank == Fbank.seamless_m4t() and built.vocabulary == STANDARD_ENGLISH
    spec = built.input
    assert (spec.kind, spec.samples_per_step, spec.feature_size) == ("fbank", 320, 160)
    assert (spec.length_multiple, spec.min_length, spec.max_length) == (rows_per_frame, 50, 500)
    described = built.describe()
    assert described.fbank == built.fbank and described.mel is None
    (rows,) = built.example_inputs
    with torch.no_grad():
        logits = built.module(rows)
    assert logits.shape == (1, 50 // rows_per_frame, 32)
    assert_exports_like_eager(built)


@pytest.mark.parametrize("variant", ["tiny", "tiny-adapter"])
def test_the_program_normalizes_its_rows_as_the_seamless_m4t_extractor(variant):
    """The module on `Fbank`'s unnormalized rows gives what transformers' pipeline gives: SeamlessM4TFeatureExtractor
    (which normalizes each mel bin over the utterance) then the model."""
    built = RECIPE.build(variant, seed=5)
    audio = speech_like(24_321)  # 150 frames of 10 ms: 75 rows, no padding by the extractor
    features = SeamlessM4TFeatureExtractor()(audio, sampling_rate=16_000, return_tensors="pt")["input_features"]
    rows = built.fbank(audio)
    assert rows.shape == features.shape == (1, 75, 160)
    if variant == "tiny-adapter":  # the program takes an even number of rows: the first 74
        rows, features = rows[:, :74], torch.from_numpy(built.fbank.normalize(rows[0, :74].numpy()))[None]
    with torch.no_grad():
        expected = built.module.model(input_features=features).logits
        torch.testing.assert_close(built.module(rows), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("variant", "parameters"), [("base", 580_525_920), ("base-adapter", 605_711_200)])
def test_published_configuration(variant, parameters):
    """facebook/w2v-bert-2.0's configuration ("600 M") with a 32-label CTC head, built on the meta device."""
    published = RECIPE.variant(variant)
    assert published.checkpoint == "facebook/w2v-bert-2.0"
    with torch.device("meta"):
        model = RECIPE.transformers_model_class(RECIPE.transformers_config(published.architecture))
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert f" {round(parameters / 1e6)} M parameters" in published.description
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (1024, 24, 16)
    assert (config.position_embeddings_type, config.left_max_position_embeddings) == ("relative_key", 64)


def test_transformers_weights_round_trip_and_are_found_by_model_type(tmp_path):
    original = RECIPE.build("tiny-adapter", seed=7)
    original.module.model.save_pretrained(tmp_path)
    assert recipes.for_checkpoint(str(tmp_path)) is RECIPE
    loaded = RECIPE.build("tiny-adapter", weights=str(tmp_path))
    assert loaded.weights_provenance == f"loaded from {tmp_path} (transformers Wav2Vec2BertForCTC)"
    assert loaded.input == original.input and loaded.notes == ()
    (rows,) = original.random_inputs(60, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(loaded.module(rows), original.module(rows), atol=0, rtol=0)


def test_a_checkpoint_with_another_head_builds_with_it(tmp_path):
    from transformers import Wav2Vec2BertForSequenceClassification

    config = RECIPE.transformers_config(RECIPE.variant("tiny").architecture)
    config.id2label, config.label2id = {0: "no", 1: "yes"}, {"no": 0, "yes": 1}
    Wav2Vec2BertForSequenceClassification(config).save_pretrained(tmp_path)
    built = RECIPE.build("tiny", weights=str(tmp_path))
    assert (built.output.kind, built.labels, built.vocabulary) == ("class-logits", ("no", "yes"), None)
    with torch.no_grad():
        assert built.module(*built.example_inputs).shape == (1, 2)

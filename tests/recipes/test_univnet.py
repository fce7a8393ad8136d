"""UnivNet: the weight-normalized generator at test size, its fixed noise, real weights loading."""

from __future__ import annotations

import torch
from torch.nn.utils.parametrizations import _WeightNorm
from transformers import UnivNetModel

from audiodeploy import recipes
from audiodeploy.recipes._vocoder import count_parametrized_convolutions
from tests.recipes.helpers import assert_exports_like_eager, weight_norm_on_parameters

# conv_pre, conv_post, and in each of 3 blocks: convt_pre, 2 location-variable residual convolutions (c32: 4), and
# the kernel predictor's input conv, 1 residual block of 2 convs (c32: 3), kernel conv and bias conv.
CONVOLUTIONS = 2 + 3 * (1 + 2 + 1 + 1 * 2 + 2)


def test_tiny_fp32_builds_and_exports_like_eager():
    built = recipes.get("univnet").build("tiny")
    assert (built.input.min_length, built.input.max_length, built.input.samples_per_step) == (94, 938, 256)
    assert (built.input.feature_size, built.sample_rate) == (100, 24_000)
    (mel,) = built.example_inputs
    with torch.no_grad():
        waveform = built.module(mel)
    assert waveform.shape == (1, 94 * 256)
    assert 0.05 < waveform.std() < 0.9
    assert count_parametrized_convolutions(built.module.model, _WeightNorm) == CONVOLUTIONS
    program = assert_exports_like_eager(built)
    assert weight_norm_on_parameters(program) == CONVOLUTIONS


def test_noise_is_drawn_once_from_the_seed_for_the_longest_input():
    first, again, other = (recipes.get("univnet").build("tiny", seed=seed) for seed in (1, 1, 2))
    assert first.module.noise.shape == (1, first.input.max_length, 8)
    assert torch.equal(first.module.noise, again.module.noise)
    assert not torch.equal(first.module.noise, other.module.noise)
    (mel,) = first.example_inputs
    with torch.no_grad():
        # Deterministic: the same call twice gives the same waveform.
        assert torch.equal(first.module(mel), first.module(mel))


def test_a_shorter_input_uses_the_start_of_the_same_noise():
    built = recipes.get("univnet").build("tiny")
    model = built.module.model
    (mel,) = built.random_inputs(120)
    with torch.no_grad():
        expected, _ = model(input_features=mel, noise_sequence=built.module.noise[:, :120], return_dict=False)
        torch.testing.assert_close(built.module(mel), expected, atol=0, rtol=0)


def test_published_configuration():
    recipe = recipes.get("univnet")
    variant = recipe.variant("c32")
    assert variant.checkpoint == "dg845/univnet-dev"
    with torch.device("meta"):
        model = UnivNetModel(recipe.transformers_config(variant.architecture))
    assert sum(p.numel() for p in model.parameters()) == 14_789_153
    assert variant.architecture.hop_length == 256


def test_transformers_weights_round_trip(tmp_path):
    recipe = recipes.get("univnet")
    config = recipe.transformers_config(recipe.variant("tiny").architecture)
    torch.manual_seed(5)
    plain = UnivNetModel(config).eval()
    plain.save_pretrained(tmp_path)
    loaded = recipe.build("tiny", weights=str(tmp_path), seed=3)
    assert loaded.weights_provenance == f"loaded from {tmp_path} (transformers UnivNetModel)"
    (mel,) = loaded.example_inputs
    noise = loaded.module.noise[:, : mel.shape[1]]
    with torch.no_grad():
        expected, _ = plain(input_features=mel, noise_sequence=noise, return_dict=False)
        torch.testing.assert_close(loaded.module(mel), expected, atol=1e-5, rtol=1e-4)

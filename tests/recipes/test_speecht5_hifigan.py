"""SpeechT5's HiFi-GAN (recipe `speecht5-hifigan`): weight-norm and spectral-norm generators at test size, real
weights loading, the published size."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.parametrizations import _SpectralNorm, _WeightNorm
from transformers import SpeechT5HifiGan, UnivNetConfig, UnivNetModel

from audiodeploy import recipes
from audiodeploy.recipes import WeightsError, WeightsMismatchError
from audiodeploy.recipes._vocoder import count_parametrized_convolutions
from tests.recipes.helpers import assert_exports_like_eager, assert_one_line, weight_norm_on_parameters

CONVOLUTIONS = 78  # conv_pre, 4 upsamplers, 12 residual blocks of 6, conv_post
TINY_CONVOLUTIONS = 38  # the first two residual kernels and dilations: 8 blocks of 4


def test_tiny_weight_norm_fp32_builds_and_exports_like_eager():
    built = recipes.get("speecht5-hifigan").build("tiny")
    assert built.weights_provenance == "synthetic (seed 0) from the test-size 'tiny' configuration"
    assert (built.input.kind, built.input.layout) == ("mel", ("batch", "frames", "mel_bins"))
    assert (built.input.min_length, built.input.max_length, built.input.samples_per_step) == (63, 625, 256)
    assert built.sample_rate == 16_000 and built.atol == 1e-3
    (mel,) = built.example_inputs
    with torch.no_grad():
        waveform = built.module(mel)
    assert waveform.shape == (1, 63 * 256)
    # Audible synthetic weights: a tolerance of 1e-3 means something against this amplitude.
    assert 0.05 < waveform.std() < 0.5

    model = built.module.model
    assert count_parametrized_convolutions(model, _WeightNorm) == TINY_CONVOLUTIONS
    program = assert_exports_like_eager(built)
    assert weight_norm_on_parameters(program) == TINY_CONVOLUTIONS


def test_tiny_spectral_norm_fp32_builds_and_exports_like_eager():
    built = recipes.get("speecht5-hifigan").build("tiny-spectral-norm")
    model = built.module.model
    assert count_parametrized_convolutions(model, _SpectralNorm) == TINY_CONVOLUTIONS
    assert count_parametrized_convolutions(model, _WeightNorm) == 0
    assert built.atol == 1e-5
    with torch.no_grad():
        waveform = built.module(*built.example_inputs)
    # Spectral norm caps each convolution's gain: quieter output, hence the smaller tolerance.
    assert 10 * built.atol < waveform.abs().max() < 0.1
    program = assert_exports_like_eager(built)
    nodes = [str(node.target) for node in program.graph.nodes]
    assert nodes.count("aten.mv.default") == TINY_CONVOLUTIONS
    assert weight_norm_on_parameters(program) == 0


def test_published_generator_builds_at_full_size():
    built = recipes.get("speecht5-hifigan").build()
    assert built.variant == "v1"
    assert built.weights_provenance == "synthetic (seed 0) from the published microsoft/speecht5_hifigan configuration"
    model = built.module.model
    # 12,656,257 plain parameters; weight norm splits each weight into a direction (same size) and a magnitude
    # per output channel (10,113 in all).
    assert sum(p.numel() for p in model.parameters()) == 12_656_257 + 10_113
    assert model.config.upsample_initial_channel == 512
    assert count_parametrized_convolutions(model, _WeightNorm) == CONVOLUTIONS


def test_transformers_weights_round_trip(tmp_path):
    # Published checkpoints store plain convolution weights; the recipe applies weight norm after loading.
    recipe = recipes.get("speecht5-hifigan")
    config = recipe.transformers_config(recipe.variant("tiny").architecture)
    torch.manual_seed(5)
    plain = SpeechT5HifiGan(config).eval()
    plain.save_pretrained(tmp_path)
    loaded = recipe.build("tiny", weights=str(tmp_path))
    assert loaded.weights_provenance == f"loaded from {tmp_path} (transformers SpeechT5HifiGan)"
    (mel,) = loaded.example_inputs
    with torch.no_grad():
        torch.testing.assert_close(loaded.module(mel), plain(mel), atol=1e-6, rtol=1e-5)
    assert count_parametrized_convolutions(loaded.module.model, _WeightNorm) == TINY_CONVOLUTIONS


def test_the_spectral_norm_variant_refuses_weights(tmp_path):
    with pytest.raises(WeightsError) as caught:
        recipes.get("speecht5-hifigan").build("spectral-norm", weights=str(tmp_path))
    assert_one_line(caught.value, "variant 'spectral-norm' has no trained weights", "--variant v1")


def test_weights_of_another_model_type_are_refused(tmp_path):
    config = UnivNetConfig(model_in_channels=4, model_hidden_channels=4, kernel_predictor_hidden_channels=4)
    UnivNetModel(config).save_pretrained(tmp_path)
    with pytest.raises(WeightsMismatchError) as caught:
        recipes.get("speecht5-hifigan").build("tiny", weights=str(tmp_path))
    assert_one_line(caught.value, "hold a 'univnet' model", "builds 'speecht5_hifigan'")

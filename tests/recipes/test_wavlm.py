"""WavLM: both sources at test size, real weights loading, published configurations."""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from tests.recipes.helpers import assert_exports_like_eager
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
    check_tiny_builds_and_exports("wavlm", variant, source)


def test_seed_decides_the_synthetic_weights():
    check_seed_decides_the_synthetic_weights("wavlm")


def test_transformers_weights_round_trip(tmp_path):
    check_transformers_weights_round_trip("wavlm", "tiny", tmp_path)


@pytest.mark.parametrize("variant", ["tiny", "tiny-large"])
def test_torchaudio_state_dict_matches_transformers(variant, tmp_path):
    check_torchaudio_state_dict_matches_transformers("wavlm", variant, tmp_path)


@pytest.mark.parametrize(("variant", "parameters"), [("base-plus", 94_406_544), ("large", 315_485_920)])
def test_published_configuration(variant, parameters):
    check_published_configuration("wavlm", variant, parameters)


def test_published_layouts():
    base_plus, large = (recipes.get("wavlm").variant(name) for name in ("base-plus", "large"))
    assert (base_plus.checkpoint, large.checkpoint) == ("microsoft/wavlm-base-plus", "microsoft/wavlm-large")
    for variant in (base_plus, large):
        architecture = variant.architecture
        assert (architecture.relative_position_buckets, architecture.relative_position_max_distance) == (320, 800)
    assert (base_plus.architecture.feature_encoder_norm, base_plus.architecture.layer_norm_first) == ("group", False)
    assert (large.architecture.feature_encoder_norm, large.architecture.layer_norm_first) == ("layer", True)


def test_relative_position_bias_spans_long_inputs():
    # WavLM buckets relative positions up to 800 frames; 10 s is 499 frames. Export covers the whole range.
    built = recipes.get("wavlm").build("tiny", seed=2)
    program = assert_exports_like_eager(built)
    inputs = built.random_inputs(built.input.max_length // 2 // 320 * 320, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(*inputs), built.module(*inputs), atol=1e-6, rtol=0)

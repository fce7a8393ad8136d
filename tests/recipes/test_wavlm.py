"""WavLM: its published layouts and relative-position bias (the checks every speech encoder passes are in
test_speech_encoders.py)."""

from __future__ import annotations

import torch

from audiodeploy import recipes
from tests.recipes.helpers import assert_exports_like_eager


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

"""The `encodec` recipe built, not lowered: one window's encode and decode modules, its bandwidths, its fixed length,
and a checkpoint in transformers' `save_pretrained` layout; at 48 kHz, one of the model's own stereo chunks and its
scale. (At 24 kHz its two methods lower to one delegate each at one window, every weight-normed convolution folded:
measured by hand when it was added, as benchmarks/bring_your_own_model.py measures transformers' EncodecModel; a
codec's command line and runtime are tested on `dac` in tests/test_cli_codec.py, the 48 kHz program lowered and run
in tests/test_cli_chunked_codec.py.)"""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.program.description import CodecChunks
from audiodeploy.recipes import LengthRangeError, WeightsError
from audiodeploy.recipes.spec import LengthRange

HOP = 320


@pytest.fixture(scope="module")
def built():
    return recipes.get("encodec").build(variant="tiny", length_range=LengthRange.fixed(0.5))


def test_tiny_encodes_one_window_to_codes_and_decodes_them_to_as_many_samples(built):
    assert (built.input.min_length, built.input.max_length, built.input.length_multiple) == (12_160, 12_160, HOP)
    with torch.no_grad():
        codes = built.module(built.example_inputs[0])
        audio = built.decoder.module(codes)
    assert codes.shape == (1, 38, 2) and codes.dtype == torch.int64
    # The synthetic codebooks are drawn (transformers starts them at zero: every code would be 0, every frame silent).
    assert codes.unique().numel() > 4
    assert audio.shape == (1, 38 * HOP) and audio.std() > 0.05
    assert built.decoder.input.min_length == built.decoder.input.max_length == 38
    # Its LSTMs start afresh in each window: the sidecar asks the runtime for 60% overlap.
    assert built.describe().window_overlap == 0.6


@pytest.mark.parametrize(
    "variant, codebooks",
    [("24khz-1.5kbps", 2), ("24khz-6kbps", 8), ("24khz-24kbps", 32), ("48khz-3kbps", 2), ("48khz-24kbps", 16)],
)
def test_each_bandwidth_encodes_to_its_codebooks(variant, codebooks):
    architecture = recipes.get("encodec").variant(variant).architecture
    config = recipes.get("encodec").transformers_config(architecture)
    assert recipes.get("encodec").codebooks(config, architecture) == (codebooks, 1024)


def test_a_range_of_lengths_is_refused_naming_the_lstm():
    with pytest.raises(LengthRangeError, match="LSTM is unrolled at one length.*--seconds"):
        recipes.get("encodec").build(variant="tiny", length_range=LengthRange(0.5, 2.0))


def test_a_save_pretrained_checkpoint_builds_the_codes_of_the_saved_model(tmp_path):
    from transformers import EncodecModel

    recipe = recipes.get("encodec")
    torch.manual_seed(7)
    saved = EncodecModel(recipe.transformers_config(recipe.variant("tiny").architecture)).eval()
    recipe.synthetic_init(saved)
    saved.save_pretrained(tmp_path / "my-encodec")
    loaded = recipe.build(variant="tiny", weights=str(tmp_path / "my-encodec"), length_range=LengthRange.fixed(0.5))
    waveform = loaded.example_inputs[0]
    with torch.no_grad():
        expected = saved.encode(waveform[:, None], bandwidth=1.5).audio_codes[0].transpose(1, 2)
        assert torch.equal(loaded.module(waveform), expected)


def test_at_48khz_the_program_takes_one_stereo_chunk_and_gives_its_codes_and_scale():
    """The model's own chunk (0.1 s at test size), whatever the recipe's default window: encode gives the chunk's
    codes and its loudness, decode takes both back to the chunk's stereo audio, as transformers' per-chunk steps
    do."""
    built = recipes.get("encodec").build(variant="tiny-48khz")
    assert built.input.shape(built.input.max_length) == (1, 2, 4800) and built.input.is_static
    waveform = built.example_inputs[0]
    with torch.no_grad():
        codes, scale = built.module(waveform)
        audio = built.decoder.module(codes, scale)
        expected_codes, expected_scale = built.module.model._encode_frame(waveform, 3.0)
    assert codes.shape == (1, 15, 2) and torch.equal(codes, expected_codes.transpose(1, 2))
    assert scale.shape == (1, 1) and torch.equal(scale, expected_scale)
    assert torch.allclose(scale, waveform.mean(1).pow(2).mean().sqrt() + 1e-8)
    assert audio.shape == (1, 2, 4800) and audio.std() > 0.001
    described = built.describe()
    assert described.decoder is not None and described.decoder.chunks == CodecChunks(stride=4752, scaled=True)
    assert described.input.channels == 2 and described.length_range_seconds == (0.1, 0.1)


def test_at_48khz_another_length_is_refused_naming_the_chunks():
    with pytest.raises(LengthRangeError, match="own chunks of 0.1 s.*without --seconds.*--seconds 0.1"):
        recipes.get("encodec").build(variant="tiny-48khz", length_range=LengthRange.fixed(0.5))


def test_a_checkpoint_that_normalizes_without_chunks_is_refused(tmp_path):
    from transformers import EncodecModel

    recipe = recipes.get("encodec")
    config = recipe.transformers_config(recipe.variant("tiny").architecture)
    config.normalize = True
    EncodecModel(config).save_pretrained(tmp_path / "whole")
    with pytest.raises(WeightsError, match="loudness of its whole input.*windows"):
        recipe.build(variant="tiny", weights=str(tmp_path / "whole"), length_range=LengthRange.fixed(0.5))

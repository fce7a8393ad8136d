"""The `encodec` recipe built, not lowered: one window's encode and decode modules, its bandwidths, its fixed length,
and a checkpoint in transformers' `save_pretrained` layout. (Its two methods lower to one delegate each at one
window, every weight-normed convolution folded: measured by hand when it was added, as
benchmarks/bring_your_own_model.py measures transformers' EncodecModel; a codec's command line and runtime are
tested on `dac` in tests/test_cli_codec.py.)"""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.recipes import LengthRangeError
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


@pytest.mark.parametrize("variant, codebooks", [("24khz-1.5kbps", 2), ("24khz-6kbps", 8), ("24khz-24kbps", 32)])
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

"""The `mimi` recipe built, not lowered: its encode and decode modules, the shortest input torch.cdist allows, and
a checkpoint in transformers' `save_pretrained` layout. (Its two methods lower to one delegate each, with codes
equal to eager's: measured by hand when it was added, as benchmarks/bring_your_own_model.py measures transformers'
MimiModel; the command line and the runtime of a codec are tested on `dac` in tests/test_cli_codec.py.)"""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.recipes import LengthRangeError
from audiodeploy.recipes.spec import LengthRange

HOP = 1920


@pytest.fixture(scope="module")
def built():
    return recipes.get("mimi").build(variant="tiny", length_range=LengthRange(2.1, 4.0))


def test_tiny_encodes_a_frame_of_codes_per_hop_and_decodes_them_to_as_many_samples(built):
    assert (built.input.sample_rate, built.input.length_multiple, built.decoder.input.min_length) == (24_000, HOP, 27)
    waveform = built.random_inputs(30 * HOP, seed=3)[0]
    with torch.no_grad():
        codes = built.module(waveform)
        audio = built.decoder.module(codes)
    assert codes.shape == (1, 30, 2) and codes.dtype == torch.int64
    # The synthetic codebooks are drawn (transformers starts them at zero: every code would be 0, every frame silent).
    assert codes.unique().numel() > 4 and int(codes.max()) < built.decoder.codebook_size == 64
    assert audio.shape == (1, 30 * HOP) and audio.std() > 0.05


def test_the_shortest_range_is_above_torch_cdists_branch():
    with pytest.raises(LengthRangeError, match=r"at least 2.08 s \(26 frames; torch.cdist branches at 25\)"):
        recipes.get("mimi").build(variant="tiny", length_range=LengthRange(1.0, 4.0))


def test_a_save_pretrained_checkpoint_builds_the_codes_of_its_first_codebooks(tmp_path):
    from transformers import MimiModel

    recipe = recipes.get("mimi")
    architecture = recipe.variant("tiny").architecture
    torch.manual_seed(7)
    saved = MimiModel(recipe.transformers_config(architecture)).eval()
    recipe.synthetic_init(saved)
    saved.save_pretrained(tmp_path / "my-mimi")
    loaded = recipe.build(variant="tiny", weights=str(tmp_path / "my-mimi"), length_range=LengthRange(2.1, 4.0))
    assert loaded.weights_provenance.startswith("loaded from")
    waveform = loaded.random_inputs(27 * HOP, seed=1)[0]
    with torch.no_grad():
        expected = saved.encode(waveform[:, None], num_quantizers=2).audio_codes.transpose(1, 2)
        assert torch.equal(loaded.module(waveform), expected)

"""The `dac` recipe built, not lowered: its encode and decode modules, their specs, and a checkpoint in
transformers' `save_pretrained` layout. (Both methods are lowered and run through the command line, once per test
run, in tests/test_cli_codec.py.)"""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.program.description import DescriptionError, ProgramDescription
from audiodeploy.recipes.spec import LengthRange
from tests.program.test_description import Declared, DeclaredProgram


@pytest.fixture(scope="module")
def built():
    return recipes.get("dac").build(variant="tiny", length_range=LengthRange(0.5, 2.0))


def test_tiny_encodes_a_frame_of_codes_per_hop_and_decodes_them_to_as_many_samples(built):
    hop = built.input.length_multiple
    assert hop == 320 and built.method == "encode" and set(built.methods) == {"encode", "decode"}
    waveform = built.random_inputs(37 * hop, seed=3)[0]
    with torch.no_grad():
        codes = built.module(waveform)
        audio = built.decoder.module(codes)
    assert codes.shape == (1, 37, 2) and codes.dtype == torch.int64
    assert 0 <= int(codes.min()) and int(codes.max()) < built.decoder.codebook_size == 64
    # transformers' own decode of the same codes: 8 samples fewer (an upsampling by 5), which the wrapper pads.
    with torch.no_grad():
        own = built.decoder.module.model.decode(audio_codes=codes.transpose(1, 2)).audio_values
    assert audio.shape == (1, 37 * hop) and own.shape == (1, 37 * hop - 8)
    assert torch.equal(audio[:, : own.shape[1]], own) and not audio[:, own.shape[1] :].any()
    assert audio.std() > 0.05  # audible: a tolerance of 1e-3 against it says something


def test_the_description_of_a_codec_has_its_decoder_and_reads_back(built):
    spec = built.decoder.input
    assert (spec.kind, spec.samples_per_step, spec.feature_size) == ("codes", 320, 2)
    assert (spec.min_length, spec.max_length) == (built.input.min_length // 320, built.input.max_length // 320)
    described = built.describe({"encode": 0.0, "decode": 1e-6})
    assert described.task == "codec" and described.method == "encode"
    assert described.max_abs_diff_vs_eager == 0.0 and described.decoder.max_abs_diff_vs_eager == 1e-6
    assert ProgramDescription.from_dict(described.to_dict()) == described
    document = described.to_dict()
    del document["decoder"]
    with pytest.raises(ValueError, match="'decoder' is for codec programs"):
        ProgramDescription.from_dict(document)


def test_a_codec_program_is_checked_method_by_method(built):
    described = built.describe()
    waveform = [Declared("torch.float32", (1, built.input.max_length))]
    codes = [Declared("torch.int64", (1, built.input.max_length // 320, 2))]
    fitting = {"encode": (waveform, codes), "decode": (codes, waveform)}
    described.check_program(DeclaredProgram(fitting), "d.pte")
    with pytest.raises(DescriptionError, match="describes method 'decode'; the program has encode"):
        described.check_program(DeclaredProgram({"encode": fitting["encode"]}), "d.pte")
    float_codes = [Declared("torch.float32", codes[0].sizes)]
    with pytest.raises(DescriptionError, match="its decode method takes torch.float32 at most"):
        described.check_program(DeclaredProgram({**fitting, "decode": (float_codes, waveform)}), "d.pte")


def test_a_save_pretrained_checkpoint_builds_the_codes_of_the_saved_model(tmp_path):
    from transformers import DacModel

    recipe = recipes.get("dac")
    torch.manual_seed(7)
    saved = DacModel(recipe.transformers_config(recipe.variant("tiny").architecture)).eval()
    saved.save_pretrained(tmp_path / "my-dac")
    loaded = recipe.build(variant="tiny", weights=str(tmp_path / "my-dac"))
    assert loaded.weights_provenance.startswith("loaded from")
    waveform = loaded.random_inputs(50 * 320, seed=1)[0]
    with torch.no_grad():
        expected = saved.encode(waveform[:, None]).audio_codes.transpose(1, 2)
        assert torch.equal(loaded.module(waveform), expected)

"""The original HiFi-GAN (recipe `hifigan`): both residual block types lowered to one delegate, checkpoints in
the original repository's format (file, directory with config.json, after remove_weight_norm()), the
one-line refusals, and the published configurations."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import audiodeploy
from audiodeploy import recipes
from audiodeploy.recipes import LengthRange, MelSpectrogram, WeightsError, WeightsMismatchError
from tests.pipeline import lowered_tiny_recipe, run_lowered
from tests.recipes.helpers import assert_exports_like_eager, assert_one_line, weight_norm_on_parameters

# conv_pre, an upsampler per stage, the residual blocks' convolutions (two blocks per stage at test size; type
# "1": 2 x 6 per stage; type "2": 2 x 2), conv_post.
CONVOLUTIONS = {"tiny": 2 + 4 * (1 + 2 * 6), "tiny-v3": 2 + 3 * (1 + 2 * 2)}
TEST_RANGE = LengthRange(0.1, 0.5)
ORIGINAL_FRONT_END = MelSpectrogram("hifigan", 22_050, 80, 256, 1024, 0.0, 8000.0, n_fft=1024)


def lower_over_its_range(variant: str) -> tuple[recipes.BuiltModel, audiodeploy.lowering.MethodReport]:
    """`variant` lowered over TEST_RANGE; at its shortest and longest input the program matches eager."""
    built, lowered = lowered_tiny_recipe("hifigan", variant)
    assert built.length_range == TEST_RANGE
    for length in (built.input.min_length, built.input.max_length):
        inputs = built.random_inputs(length, seed=length)
        with torch.no_grad():
            expected = built.module(*inputs)
        actual = run_lowered(lowered, inputs)
        assert actual.shape == (1, length * 256)
        torch.testing.assert_close(actual, expected, atol=built.atol, rtol=0)
    return built, lowered.report.methods["forward"]


def write_checkpoint(generator: torch.nn.Module, path) -> None:
    """What the original training writes as g_<step>."""
    torch.save({"generator": generator.state_dict()}, path)


def write_config(architecture, directory, **changes) -> None:
    """An original config.json: the architecture's fields among training settings the recipe ignores."""
    config = {"batch_size": 16, "learning_rate": 0.0002, "segment_size": 8192, "num_freq": 1025}
    config.update(architecture.to_config(), **changes)
    (directory / "config.json").write_text(json.dumps(config))


def waveform(built: recipes.BuiltModel, frames: int = 40) -> torch.Tensor:
    (mel,) = built.random_inputs(frames, seed=1)
    with torch.no_grad():
        return built.module(mel)


@pytest.mark.parametrize("variant", ["tiny", "tiny-v3"], ids=["resblock1", "resblock2"])
def test_fp32_tiny_lowers_to_one_delegate_with_every_convolution_folded(variant):
    built, report = lower_over_its_range(variant)
    assert built.weights_provenance == f"synthetic (seed 0) from the test-size '{variant}' configuration"
    assert (built.sample_rate, built.input.samples_per_step, built.atol) == (22_050, 256, 1e-3)
    assert built.mel == ORIGINAL_FRONT_END
    generator = built.module.generator
    assert sum(hasattr(conv, "weight_g") for conv in generator.convolutions()) == CONVOLUTIONS[variant]
    # Audible synthetic weights: the tolerance means something against this amplitude.
    assert 0.05 < waveform(built).std() < 0.6
    assert report.delegates == 1, report.ops_outside_delegates
    assert len(report.folds) == CONVOLUTIONS[variant] and report.not_folded == ()
    assert report.gemms_not_delegated == ()


def test_published_configurations_on_the_meta_device():
    recipe = recipes.get("hifigan")
    assert recipe.variant_names() == ("v1", "v2", "v3")
    # Plain parameters, and with weight norm's magnitude per output channel (dim 0) added.
    expected = {"v1": (13_926_017, 13_936_130), "v2": (925_985, 928_514), "v3": (1_462_273, 1_464_322)}
    for name, (plain, normed) in expected.items():
        architecture = recipe.variant(name).architecture
        assert architecture.front_end() == ORIGINAL_FRONT_END
        with torch.device("meta"):
            generator = architecture.generator()
            assert sum(p.numel() for p in generator.parameters()) == plain
            generator.apply_weight_norm()
        assert sum(p.numel() for p in generator.parameters()) == normed
        state = generator.state_dict()
        assert state["conv_pre.weight_v"].shape == (architecture.upsample_initial_channel, 80, 7)
        assert state["conv_pre.weight_g"].shape == (architecture.upsample_initial_channel, 1, 1)
        channels = architecture.upsample_initial_channel
        assert state["ups.0.weight_v"].shape == (channels, channels // 2, 16)
        assert "conv_post.bias" in state
    v1 = recipe.variant("v1").architecture
    assert (v1.upsample_rates, v1.upsample_kernel_sizes, v1.resblock) == ((8, 8, 2, 2), (16, 16, 4, 4), "1")
    v3 = recipe.variant("v3").architecture
    assert (v3.upsample_rates, v3.resblock_dilation_sizes) == ((8, 8, 4), ((1, 2), (2, 6), (3, 12)))
    with torch.device("meta"):
        generator = v3.generator()
    assert {"resblocks.8.convs.1.weight", "resblocks.0.convs.0.bias"} <= set(generator.state_dict())


def test_a_generator_checkpoint_file_loads_as_the_module_it_was_saved_from(tmp_path):
    saved = recipes.get("hifigan").build("tiny", seed=7)
    write_checkpoint(saved.module.generator, tmp_path / "g_00000007")
    loaded = recipes.get("hifigan").build("tiny", weights=str(tmp_path / "g_00000007"))
    assert loaded.weights_provenance == (
        f"loaded from {tmp_path / 'g_00000007'} (original HiFi-GAN generator, configuration of variant 'tiny')"
    )
    assert any("legacy weight_norm" in note for note in loaded.notes)
    torch.testing.assert_close(waveform(loaded), waveform(saved), atol=0, rtol=0)
    assert not torch.equal(waveform(loaded), waveform(recipes.get("hifigan").build("tiny")))


def test_a_directory_with_config_json_overrides_the_variant(tmp_path):
    saved = recipes.get("hifigan").build("tiny-v3", seed=3)
    write_checkpoint(saved.module.generator, tmp_path / "generator_v3")
    torch.save({"mpd": {}, "msd": {}, "steps": 3}, tmp_path / "do_00000003")
    architecture = recipes.get("hifigan").variant("tiny-v3").architecture
    write_config(architecture, tmp_path, sampling_rate=16_000, fmax=None)
    # The default variant is v1 (type "1" blocks): the config's type "2" layout is what gets built.
    loaded = recipes.get("hifigan").build(weights=str(tmp_path))
    assert loaded.variant == "v1"
    assert any('resblock "2"' in note and "not variant 'v1'" in note for note in loaded.notes)
    assert loaded.mel == MelSpectrogram("hifigan", 16_000, 80, 256, 1024, 0.0, None, n_fft=1024)
    assert loaded.sample_rate == 16_000
    torch.testing.assert_close(waveform(loaded), waveform(saved), atol=0, rtol=0)


def test_a_16_khz_checkpoint_whose_kernels_exceed_their_rates_by_an_odd_count_loads_and_upsamples_exactly(tmp_path):
    """Rates 8, 5, 2, 2 with kernels 16, 10, 4, 4 (a hop of 160 at 16 kHz): 10 - 5 is odd, so the original's padding
    cannot give 5 samples per input sample; the forks that train such models pad one more and add one output
    sample."""
    architecture = dataclasses.replace(
        recipes.get("hifigan").variant("tiny-v3").architecture,
        upsample_rates=(8, 5, 2, 2),
        upsample_kernel_sizes=(16, 10, 4, 4),
        hop_size=160,
        win_size=640,
        n_fft=640,
        sampling_rate=16_000,
    )
    torch.manual_seed(5)
    generator = architecture.generator()
    generator.apply_weight_norm()
    assert (generator.ups[1].padding, generator.ups[1].output_padding) == ((3,), (1,))
    assert (generator.ups[0].padding, generator.ups[0].output_padding) == ((4,), (0,))  # the original's, k = 2u
    write_checkpoint(generator, tmp_path / "g_00100000")
    write_config(architecture, tmp_path)
    loaded = recipes.get("hifigan").build(weights=str(tmp_path), length_range=TEST_RANGE)
    assert loaded.mel.hop_length == 160 and loaded.sample_rate == 16_000
    mel = loaded.random_inputs(37, seed=2)[0]
    with torch.no_grad():
        expected = generator.eval()(mel.transpose(1, 2)).squeeze(1)
        actual = loaded.module(mel)
    assert actual.shape == (1, 37 * 160)
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)
    assert_exports_like_eager(loaded)


def test_a_checkpoint_saved_after_remove_weight_norm_loads_without_weight_norm(tmp_path):
    saved = recipes.get("hifigan").build("tiny-v3", seed=4, length_range=TEST_RANGE)
    expected = waveform(saved)
    saved.module.generator.remove_weight_norm()
    write_checkpoint(saved.module.generator, tmp_path / "g_00000004")
    loaded = recipes.get("hifigan").build("tiny-v3", weights=str(tmp_path / "g_00000004"), length_range=TEST_RANGE)
    assert "conv_pre.weight" in loaded.module.generator.state_dict()
    assert not any(hasattr(conv, "weight_g") for conv in loaded.module.generator.convolutions())
    assert any("weight norm is not applied" in note for note in loaded.notes)
    torch.testing.assert_close(waveform(loaded), expected, atol=1e-6, rtol=0)
    # Plain weights: the exported graph reads them as parameters, with no norm to compute (or fold).
    assert weight_norm_on_parameters(assert_exports_like_eager(loaded)) == 0


def test_the_front_end_resynthesizes_a_waveform_of_its_length():
    built = recipes.get("hifigan").build("tiny-v3")
    time = np.arange(22_050) / 22_050
    mel = built.mel(0.3 * np.sin(2 * np.pi * 220 * time).astype(np.float32))
    assert mel.shape == (1, 86, 80)
    # Natural log of mel magnitudes clamped at 1e-5.
    assert mel.min() >= np.log(1e-5) - 1e-4 and mel.max() > -3
    with torch.no_grad():
        assert built.module(mel).shape == (1, 86 * 256)


# Refusals: each a single line that says what to pass instead.


def test_a_checkpoint_of_another_architecture_is_refused(tmp_path):
    write_checkpoint(recipes.get("hifigan").build("tiny-v3").module.generator, tmp_path / "g_1")
    with pytest.raises(WeightsMismatchError) as caught:
        recipes.get("hifigan").build("tiny", weights=str(tmp_path / "g_1"))
    assert_one_line(
        caught.value,
        "does not fit the generator of variant 'tiny'",
        'the checkpoint has 3 upsampling stages and type "2" residual blocks',
        "lacks 147 of its parameters (e.g. ups.3.bias)",
        "--variant",
    )


def test_a_checkpoint_of_another_width_is_refused(tmp_path):
    narrow = dataclasses.replace(recipes.get("hifigan").variant("v2").architecture, upsample_initial_channel=32)
    generator = narrow.generator()
    generator.apply_weight_norm()  # as training saves it
    write_checkpoint(generator, tmp_path / "g_1")
    with pytest.raises(WeightsMismatchError) as caught:
        recipes.get("hifigan").build("v2", weights=str(tmp_path / "g_1"))
    assert_one_line(caught.value, "conv_pre.bias is (32,) in the checkpoint, (128,) in the generator", "--variant")


def test_a_config_with_an_unknown_resblock_is_refused(tmp_path):
    write_checkpoint(recipes.get("hifigan").build("tiny").module.generator, tmp_path / "g_1")
    write_config(recipes.get("hifigan").variant("tiny").architecture, tmp_path, resblock="3")
    with pytest.raises(WeightsError) as caught:
        recipes.get("hifigan").build(weights=str(tmp_path))
    assert_one_line(caught.value, "config.json describes no HiFi-GAN generator", "resblock '3'")


def test_a_discriminator_checkpoint_is_refused(tmp_path):
    torch.save({"mpd": {"convs.0.weight_g": torch.ones(1)}, "msd": {}, "optim_g": {}, "steps": 1}, tmp_path / "do_1")
    with pytest.raises(WeightsError) as caught:
        recipes.get("hifigan").build("tiny", weights=str(tmp_path / "do_1"))
    assert_one_line(caught.value, "is a discriminator checkpoint", "pass the g_* checkpoint")


@pytest.mark.parametrize("held", [(), ("do_00000001",)], ids=["empty", "discriminator-only"])
def test_a_directory_without_a_generator_checkpoint_is_refused(tmp_path, held):
    write_config(recipes.get("hifigan").variant("tiny").architecture, tmp_path)
    for name in held:
        torch.save({"mpd": {}, "msd": {}}, tmp_path / name)
    with pytest.raises(WeightsError) as caught:
        recipes.get("hifigan").build(weights=str(tmp_path))
    assert_one_line(caught.value, "holds no generator checkpoint (g_* or generator*)", *(["do_*"] if held else []))


# BigVGAN's checkpoints share HiFi-GAN's format and loader (hifigan.load_generator): both recipes refuse these
# weights for the same reasons.
@pytest.mark.parametrize("recipe", ["hifigan", "bigvgan"])
def test_unreadable_or_missing_weights_are_refused(tmp_path, recipe):
    (tmp_path / "g_1").write_text("not a checkpoint")
    cases = {
        str(tmp_path / "g_1"): "cannot read",
        str(tmp_path / "absent"): "not found",
        str(tmp_path): "has no config.json",
    }
    for weights, fragment in cases.items():
        with pytest.raises(WeightsError) as caught:
            recipes.get(recipe).build("tiny", length_range=TEST_RANGE, weights=weights)
        assert_one_line(caught.value, fragment)

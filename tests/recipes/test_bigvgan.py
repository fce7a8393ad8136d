"""BigVGAN (recipe `bigvgan`): the tiny generator lowered to one delegate with its anti-aliased Snake activations
inside, checkpoints in NVIDIA's layout (config.json and bigvgan_generator.pt, training's g_* files, after
remove_weight_norm()), the one-line refusals, the published configurations, and the mel front end against
BigVGAN's `mel_spectrogram` written here in torch."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torchaudio.functional

from audiodeploy import recipes
from audiodeploy.recipes import LengthRange, MelSpectrogram, WeightsError, WeightsMismatchError
from tests.pipeline import lowered_tiny_recipe, run_lowered
from tests.recipes.helpers import assert_one_line

TEST_RANGE = LengthRange(0.1, 0.5)
# fp32 XNNPACK against eager PyTorch, waveform samples in [-1, 1]: about 5e-7 measured; the recipe declares 1e-3.
LOWERED_ATOL = 1e-5
# A config.json as NVIDIA's training writes it: the architecture among settings the recipe ignores.
TRAINING_SETTINGS = {"num_gpus": 0, "batch_size": 32, "learning_rate": 0.0001, "segment_size": 65536, "num_workers": 4}


def bigvgan(variant: str = "tiny", **options) -> recipes.BuiltModel:
    return recipes.get("bigvgan").build(variant, length_range=TEST_RANGE, **options)


def waveform(built: recipes.BuiltModel, frames: int = 12) -> torch.Tensor:
    (mel,) = built.random_inputs(frames, seed=1)
    with torch.no_grad():
        return built.module(mel)


def save_pretrained(built: recipes.BuiltModel, directory, **config_changes) -> None:
    """What `BigVGAN._save_pretrained` writes: config.json and bigvgan_generator.pt holding {"generator": ...}."""
    directory.mkdir(exist_ok=True)
    config = {**TRAINING_SETTINGS, **recipes.get("bigvgan").variant(built.variant).architecture.to_config()}
    config.update(config_changes)
    config = {key: value for key, value in config.items() if value is not ...}  # `...`: leave the key out
    (directory / "config.json").write_text(json.dumps(config))
    torch.save({"generator": built.module.generator.state_dict()}, directory / "bigvgan_generator.pt")


@pytest.fixture(scope="module")
def tiny():
    built, _ = lowered_tiny_recipe("bigvgan")
    assert built.length_range == TEST_RANGE
    return built


@pytest.fixture(scope="module")
def lowered():
    return lowered_tiny_recipe("bigvgan")[1]


def test_fp32_tiny_lowers_to_one_delegate_with_the_activations_inside_and_every_weight_norm_folded(tiny, lowered):
    architecture = recipes.get("bigvgan").variant("tiny").architecture
    report = lowered.report.methods["forward"]
    assert report.delegates == 1
    assert set(report.ops_outside_delegates) <= {"dim_order_ops._to_dim_order_copy"}, report.ops_outside_delegates
    assert len(report.folds) == architecture.convolutions == 12 and report.not_folded == ()
    assert report.gemms_not_delegated == ()
    assert {"ReplicatePaddingAsConcatPass", "ParameterOnlyValuesAsConstantsPass"} <= set(report.rewrites)


def test_fp32_tiny_program_matches_eager_at_the_shortest_and_longest_mel(tiny, lowered):
    for frames in (tiny.input.min_length, tiny.input.max_length):
        (mel,) = tiny.random_inputs(frames, seed=frames)
        with torch.no_grad():
            expected = tiny.module(mel)
        actual = run_lowered(lowered, (mel,))
        assert actual.shape == (1, frames * 256)
        torch.testing.assert_close(actual, expected, atol=LOWERED_ATOL, rtol=0)
    assert tiny.atol == 1e-3


def test_synthetic_tiny_is_audible_and_says_so(tiny):
    assert tiny.weights_provenance == "synthetic (seed 0) from the test-size 'tiny' configuration"
    assert any("LeCun-normal" in note for note in tiny.notes)
    assert (tiny.sample_rate, tiny.input.samples_per_step) == (22_050, 256)
    generator = tiny.module.generator
    assert sum(hasattr(conv, "weight_g") for conv in generator.convolutions()) == 12
    alphas = torch.cat([activation.alpha for activation in generator.periodic_activations()])
    assert alphas.std() > 0.1  # drawn, not the initial zeros
    # Audible, below the clamp: the tolerance means something against this amplitude.
    assert 0.05 < waveform(tiny).std() < 0.6


def test_published_configurations_on_the_meta_device():
    recipe = recipes.get("bigvgan")
    assert recipe.default_variant == "v2-22khz-80band-256x"
    assert {"v2-22khz-80band-256x", "v2-24khz-100band-256x", "v2-44khz-128band-512x"} <= set(recipe.variant_names())
    # Parameters with weight norm's magnitudes (hub model cards: 112 M for v2).
    expected = {
        "v2-22khz-80band-256x": 112_231_249,
        "v2-24khz-100band-256x": 112_446_289,
        "base-22khz-80band": 13_953_474,
    }
    for name, parameters in expected.items():
        with torch.device("meta"):
            generator = recipe.variant(name).architecture.generator()
            generator.apply_weight_norm()
        assert sum(p.numel() for p in generator.parameters()) == parameters, name
    state = generator.state_dict()
    assert state["ups.0.0.weight_v"].shape == (512, 256, 16)
    assert state["resblocks.0.activations.5.act.beta"].shape == (256,)
    assert state["resblocks.0.activations.0.upsample.filter"].shape == (1, 1, 12)
    assert state["activation_post.downsample.lowpass.filter"].shape == (1, 1, 12)
    assert "conv_post.bias" in state  # v1: a bias and a tanh at the end
    v2 = recipe.variant("v2-22khz-80band-256x").architecture
    assert (v2.use_tanh_at_final, v2.use_bias_at_final, v2.fmax, v2.activations) == (False, False, None, 109)
    assert v2.front_end() == MelSpectrogram("hifigan", 22_050, 80, 256, 1024, 0.0, None, n_fft=1024)
    wide = recipe.variant("v2-44khz-128band-512x").architecture
    assert (wide.upsample_rates, wide.hop_size, wide.n_fft, wide.num_mels) == ((8, 4, 2, 2, 2, 2), 512, 2048, 128)


# Checkpoints in NVIDIA's layout.


def test_a_hub_directory_loads_as_the_module_it_was_saved_from(tmp_path):
    saved = bigvgan("tiny", seed=7)
    save_pretrained(saved, tmp_path / "bigvgan_tiny")
    loaded = bigvgan(weights=str(tmp_path / "bigvgan_tiny"))
    checkpoint = tmp_path / "bigvgan_tiny" / "bigvgan_generator.pt"
    assert loaded.weights_provenance == (
        f"loaded from {checkpoint} (BigVGAN generator, configuration of {tmp_path / 'bigvgan_tiny' / 'config.json'})"
    )
    assert any("legacy weight_norm" in note for note in loaded.notes)
    torch.testing.assert_close(waveform(loaded), waveform(saved), atol=0, rtol=0)
    assert not torch.equal(waveform(loaded), waveform(bigvgan("tiny")))


def test_the_loaded_filters_are_the_ones_the_activations_use(tmp_path):
    """The [1, 1, 12] filters are buffers of the checkpoint; the [C, 1, 12] ones the convolutions read follow them."""
    saved = bigvgan("tiny", seed=7)
    expected = waveform(saved)
    state = saved.module.generator.state_dict()
    for key in state:
        if key.endswith(".filter"):
            state[key] = state[key].flip(-1) * 1.5
    torch.save({"generator": state}, tmp_path / "g_00000007")
    loaded = bigvgan("tiny", weights=str(tmp_path / "g_00000007"))
    assert not torch.allclose(waveform(loaded), expected, atol=1e-3)
    saved.module.generator.load_state_dict(state)
    torch.testing.assert_close(waveform(loaded), waveform(saved), atol=0, rtol=0)


def test_a_v1_config_without_the_final_options_builds_tanh_and_bias_and_overrides_the_variant(tmp_path):
    saved = bigvgan("tiny-amp2", seed=3)  # AMPBlock2, Snake in linear scale, tanh and bias at the end
    save_pretrained(saved, tmp_path, use_tanh_at_final=..., use_bias_at_final=..., sampling_rate=32_000)
    torch.save({"mpd": {}, "mrd": {}, "steps": 3}, tmp_path / "do_00000003")
    loaded = recipes.get("bigvgan").build(weights=str(tmp_path), length_range=TEST_RANGE)
    assert loaded.variant == "v2-22khz-80band-256x"
    overridden = [note for note in loaded.notes if "not variant 'v2-22khz-80band-256x'" in note]
    assert len(overridden) == 1 and 'resblock "2" with snake' in overridden[0]
    assert loaded.mel == MelSpectrogram("hifigan", 32_000, 100, 256, 1024, 0.0, 12_000.0, n_fft=1024)
    assert loaded.module.generator.use_tanh_at_final and loaded.module.generator.conv_post.bias is not None
    torch.testing.assert_close(waveform(loaded), waveform(saved), atol=0, rtol=0)


def test_a_checkpoint_saved_after_remove_weight_norm_loads_without_weight_norm(tmp_path):
    saved = bigvgan("tiny-amp2", seed=4)
    expected = waveform(saved)
    saved.module.generator.remove_weight_norm()
    torch.save({"generator": saved.module.generator.state_dict()}, tmp_path / "bigvgan_generator.pt")
    loaded = bigvgan("tiny-amp2", weights=str(tmp_path / "bigvgan_generator.pt"))
    assert "conv_pre.weight" in loaded.module.generator.state_dict()
    assert any("weight norm is not applied" in note for note in loaded.notes)
    torch.testing.assert_close(waveform(loaded), expected, atol=1e-6, rtol=0)


# Refusals: each a single line that says what to pass instead.


def test_an_original_hifigan_checkpoint_is_refused_naming_its_recipe(tmp_path):
    hifigan = recipes.get("hifigan").build("tiny")
    torch.save({"generator": hifigan.module.generator.state_dict()}, tmp_path / "g_1")
    with pytest.raises(WeightsMismatchError) as caught:
        bigvgan(weights=str(tmp_path / "g_1"))
    assert_one_line(caught.value, "without Snake activations", "recipe 'hifigan'")


def test_a_checkpoint_of_another_layout_or_width_is_refused(tmp_path):
    torch.save({"generator": bigvgan("tiny-amp2").module.generator.state_dict()}, tmp_path / "amp2.pt")
    with pytest.raises(WeightsMismatchError) as caught:
        bigvgan("tiny", weights=str(tmp_path / "amp2.pt"))
    assert_one_line(
        caught.value,
        "does not fit the generator of variant 'tiny'",
        "the checkpoint has 1 upsampling stages",
        "--variant",
    )
    wider = replace(recipes.get("bigvgan").variant("tiny").architecture, upsample_initial_channel=64).generator()
    wider.apply_weight_norm()
    torch.save({"generator": wider.state_dict()}, tmp_path / "wider.pt")
    with pytest.raises(WeightsMismatchError) as caught:
        bigvgan("tiny", weights=str(tmp_path / "wider.pt"))
    assert_one_line(caught.value, "conv_pre.bias is (64,) in the checkpoint, (32,) in the generator", "--variant")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"activation": "relu"}, "activation 'relu' is not one of snake, snakebeta"),
        ({"snake_logscale": "yes"}, "snake_logscale should be true or false"),
        ({"resblock": "3"}, "resblock '3'"),
        ({"hop_size": 300}, "hop_size 300 is not the product of upsample_rates"),
    ],
    ids=["activation", "logscale", "resblock", "hop"],
)
def test_a_config_the_generator_cannot_be_built_from_is_refused(tmp_path, change, fragment):
    save_pretrained(bigvgan("tiny"), tmp_path, **change)
    with pytest.raises(WeightsError) as caught:
        bigvgan(weights=str(tmp_path))
    assert_one_line(caught.value, "config.json", fragment)


def test_a_discriminator_checkpoint_or_a_directory_without_a_generator_is_refused(tmp_path):
    torch.save({"mpd": {"convs.0.weight_g": torch.ones(1)}, "mrd": {}, "optim_g": {}, "steps": 1}, tmp_path / "do_1")
    with pytest.raises(WeightsError) as caught:
        bigvgan(weights=str(tmp_path / "do_1"))
    assert_one_line(caught.value, "is a discriminator checkpoint", "bigvgan_generator.pt")
    (tmp_path / "config.json").write_text(json.dumps(recipes.get("bigvgan").variant("tiny").architecture.to_config()))
    with pytest.raises(WeightsError) as caught:
        bigvgan(weights=str(tmp_path))
    assert_one_line(caught.value, "holds no bigvgan_generator.pt and none", "beside config.json")


# Unreadable or missing weights: test_hifigan.py's test_unreadable_or_missing_weights_are_refused, for both recipes.


# The mel front end.


def bigvgan_mel_spectrogram(y, n_fft, num_mels, sampling_rate, hop_size, win_size, fmin, fmax) -> torch.Tensor:
    """BigVGAN's meldataset.mel_spectrogram in float32 torch; torchaudio's slaney filters stand for librosa's."""
    fmax = sampling_rate / 2 if fmax is None else fmax  # librosa's default
    mel_basis = torchaudio.functional.melscale_fbanks(
        n_fft // 2 + 1, fmin, fmax, num_mels, sampling_rate, norm="slaney", mel_scale="slaney"
    ).T
    padding = (n_fft - hop_size) // 2
    y = torch.nn.functional.pad(y.unsqueeze(1), (padding, padding), mode="reflect").squeeze(1)
    spec = torch.stft(
        y, n_fft, hop_size, win_size, torch.hann_window(win_size), center=False, onesided=True, return_complex=True
    )
    spec = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    return torch.log(torch.clamp(torch.matmul(mel_basis, spec), min=1e-5))


@pytest.mark.parametrize("variant", ["v2-22khz-80band-256x", "v2-44khz-128band-512x", "24khz-100band"])
def test_the_front_end_is_bigvgans_mel_spectrogram(variant):
    architecture = recipes.get("bigvgan").variant(variant).architecture
    rate = architecture.sampling_rate
    time = np.arange(rate // 2) / rate
    noise = np.random.default_rng(0).standard_normal(time.size)
    audio = (0.3 * np.sin(2 * np.pi * 220 * time) + 0.05 * noise).astype(np.float32)
    expected = bigvgan_mel_spectrogram(
        torch.from_numpy(audio)[None],
        architecture.n_fft,
        architecture.num_mels,
        rate,
        architecture.hop_size,
        architecture.win_size,
        architecture.fmin,
        architecture.fmax,
    )
    actual = architecture.front_end()(audio)
    assert actual.shape == (1, expected.shape[2], architecture.num_mels)
    # float64 (the front end) against float32 (BigVGAN's torch): about 1e-5 in the log.
    torch.testing.assert_close(actual[0].T, expected[0], atol=1e-4, rtol=0)

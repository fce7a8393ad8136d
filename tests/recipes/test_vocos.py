"""Vocos (recipe `vocos`): the tiny model lowered to one delegate, inverse STFT included, matching eager; checkpoints in
the hub repository's layout (config.yaml + pytorch_model.bin); the one-line refusals; the published configuration."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchaudio

import audiodeploy
from audiodeploy import recipes
from audiodeploy.recipes import LengthRange, MelSpectrogram, WeightsError, WeightsMismatchError
from tests.pipeline import lowered_tiny_recipe, run_lowered
from tests.recipes.helpers import assert_one_line

TEST_RANGE = LengthRange(0.1, 0.5)
VOCOS_FRONT_END = MelSpectrogram("vocos", 24_000, 100, 256, 1024, 0.0, None)
# The lowered tiny model against eager, waveform samples of standard deviation 0.025 (measured: 2e-7); the
# recipe's own tolerance (1e-3, for trained weights) would not notice a wrong envelope at the edges.
TINY_ATOL = 1e-5


def config_yaml(dim: int = 32, intermediate_dim: int = 96, num_layers: int = 2, feature_extractor: str =
                "vocos.feature_extractors.MelSpectrogramFeatures", head: str = "vocos.heads.ISTFTHead",
                padding: str = "center") -> str:  # fmt: skip
    """config.yaml as charactr/vocos-mel-24khz writes it (the tiny sizes by default)."""
    return f"""\
feature_extractor:
  class_path: {feature_extractor}
  init_args:
    sample_rate: 24000
    n_fft: 1024
    hop_length: 256
    n_mels: 100
    padding: center

backbone:
  class_path: vocos.models.VocosBackbone
  init_args:
    input_channels: 100
    dim: {dim}
    intermediate_dim: {intermediate_dim}
    num_layers: {num_layers}

head:
  class_path: {head}
  init_args:
    dim: {dim}
    n_fft: 1024
    hop_length: 256
    padding: {padding}
"""


def write_checkpoint(built: recipes.BuiltModel, directory, config: str | None = None) -> None:
    """pytorch_model.bin as `Vocos.state_dict()` saves it, the feature extractor's buffers included, and its
    config.yaml (unless `config` is "")."""
    state = dict(built.module.vocos.state_dict())
    state["feature_extractor.mel_spec.spectrogram.window"] = torch.hann_window(1024)
    filters = torchaudio.functional.melscale_fbanks(513, 0, 12_000, 100, 24_000)
    state["feature_extractor.mel_spec.mel_scale.fb"] = filters
    torch.save(state, directory / "pytorch_model.bin")
    if config != "":
        (directory / "config.yaml").write_text(config_yaml() if config is None else config)


def waveform(built: recipes.BuiltModel, frames: int = 40) -> torch.Tensor:
    (mel,) = built.random_inputs(frames, seed=1)
    with torch.no_grad():
        return built.module(mel)


@pytest.fixture(scope="module")
def tiny() -> tuple[recipes.BuiltModel, audiodeploy.lowering.LoweredProgram]:
    built, lowered = lowered_tiny_recipe("vocos")
    assert built.length_range == TEST_RANGE
    return built, lowered


def test_fp32_tiny_lowers_to_one_delegate_inverse_stft_included(tiny):
    built, lowered = tiny
    assert built.weights_provenance == "synthetic (seed 0) from the test-size 'tiny' configuration"
    assert (built.sample_rate, built.input.samples_per_step, built.mel) == (24_000, 256, VOCOS_FRONT_END)
    report = lowered.report.methods["forward"]
    assert (report.delegates, report.ops_outside_delegates) == (1, {})
    assert "InverseStftAsConvolutionPass" in report.rewrites
    assert report.gemms_not_delegated == () and report.not_folded == ()


@pytest.mark.parametrize("end", ["min_length", "max_length"], ids=["shortest", "longest"])
def test_fp32_tiny_program_matches_eager_with_hop_samples_per_frame(tiny, end):
    built, lowered = tiny
    length = getattr(built.input, end)
    inputs = built.random_inputs(length, seed=length)
    with torch.no_grad():
        expected = built.module(*inputs)
    actual = run_lowered(lowered, inputs)
    assert actual.shape == (1, length * 256)
    assert 0.01 < expected.std() < 0.1  # the tolerance means something against this amplitude
    torch.testing.assert_close(actual, expected, atol=TINY_ATOL, rtol=0)
    # Vocos' decode gives (frames - 1) * 256 samples; the last frame's are zeros.
    assert not actual[0, -256:].any()


def test_published_configuration_on_the_meta_device():
    recipe = recipes.get("vocos")
    assert recipe.variant_names() == ("mel-24khz",)
    architecture = recipe.variant("mel-24khz").architecture
    assert architecture.front_end() == VOCOS_FRONT_END
    with torch.device("meta"):
        model = architecture.model()
    assert sum(p.numel() for p in model.parameters()) == 13_531_650
    state = model.state_dict()
    assert state["backbone.embed.weight"].shape == (512, 100, 7)
    assert state["backbone.convnext.7.dwconv.weight"].shape == (512, 1, 7)
    assert state["backbone.convnext.0.pwconv1.weight"].shape == (1536, 512)
    assert state["backbone.convnext.0.gamma"].shape == (512,)
    assert state["head.out.weight"].shape == (1026, 512)
    assert state["head.istft.window"].shape == (1024,)
    assert len([key for key in state if key.startswith("backbone.convnext.")]) == 8 * 9


def test_a_hub_layout_directory_loads_as_the_model_it_was_saved_from(tmp_path):
    saved = recipes.get("vocos").build("tiny", seed=7)
    write_checkpoint(saved, tmp_path)
    # The default variant is mel-24khz: the config's tiny sizes are what gets built.
    loaded = recipes.get("vocos").build(weights=str(tmp_path))
    assert loaded.variant == "mel-24khz"
    assert loaded.weights_provenance == (
        f"loaded from {tmp_path / 'pytorch_model.bin'} (original Vocos, configuration of {tmp_path / 'config.yaml'})"
    )
    assert any("2 ConvNeXt blocks of dim 32" in note and "not variant 'mel-24khz'" in note for note in loaded.notes)
    assert loaded.mel == VOCOS_FRONT_END
    torch.testing.assert_close(waveform(loaded), waveform(saved), atol=0, rtol=0)
    assert not torch.equal(waveform(loaded), waveform(recipes.get("vocos").build("tiny")))


def test_a_checkpoint_file_loads_with_the_variant_configuration(tmp_path):
    saved = recipes.get("vocos").build("tiny", seed=3)
    write_checkpoint(saved, tmp_path, config="")
    loaded = recipes.get("vocos").build("tiny", weights=str(tmp_path / "pytorch_model.bin"))
    assert loaded.weights_provenance.endswith("(original Vocos, configuration of variant 'tiny')")
    torch.testing.assert_close(waveform(loaded), waveform(saved), atol=0, rtol=0)


def test_the_front_end_resynthesizes_a_waveform_of_its_length():
    built = recipes.get("vocos").build("tiny")
    time = np.arange(24_000) / 24_000
    mel = built.mel(0.3 * np.sin(2 * np.pi * 220 * time).astype(np.float32))
    # Centred frames: 1 + 24000 // 256.
    assert mel.shape == (1, 94, 100)
    assert mel.min() >= np.log(1e-7) - 1e-4 and mel.max() > 0
    with torch.no_grad():
        assert built.module(mel).shape == (1, 94 * 256)


# Refusals: each a single line that says what to pass instead.


@pytest.mark.parametrize(
    ("config", "error", "fragments"),
    [
        (config_yaml(feature_extractor="vocos.feature_extractors.EncodecFeatures"), WeightsMismatchError,
         ["EnCodec-token features", "this recipe builds the mel-spectrogram Vocos", "charactr/vocos-mel-24khz"]),
        (config_yaml(head="vocos.heads.IMDCTCosHead"), WeightsMismatchError,
         ["an IMDCT head (head vocos.heads.IMDCTCosHead)"]),
        (config_yaml(padding="same"), WeightsError, ["head padding 'same' is not built by this recipe"]),
        (config_yaml().replace("input_channels: 100", "input_channels: 80"), WeightsError,
         ["backbone input_channels and feature_extractor n_mels differ (80, 100)"]),
        (config_yaml().replace("    num_layers: 2\n", ""), WeightsError, ["backbone init_args has no num_layers"]),
        ("backbone: [1, 2", WeightsError, ["cannot read"]),
    ],
    ids=["encodec", "imdct-head", "same-padding", "inconsistent", "incomplete", "not-yaml"],
)  # fmt: skip
def test_a_config_of_another_vocos_is_refused(tmp_path, config, error, fragments):
    write_checkpoint(recipes.get("vocos").build("tiny"), tmp_path, config=config)
    with pytest.raises(error) as caught:
        recipes.get("vocos").build(weights=str(tmp_path))
    assert_one_line(caught.value, str(tmp_path / "config.yaml"), *fragments)


def test_a_checkpoint_of_another_size_or_head_is_refused(tmp_path):
    write_checkpoint(recipes.get("vocos").build("tiny"), tmp_path, config="")
    checkpoint = str(tmp_path / "pytorch_model.bin")
    with pytest.raises(WeightsMismatchError) as caught:
        recipes.get("vocos").build("mel-24khz", weights=checkpoint)
    assert_one_line(
        caught.value,
        "does not fit the Vocos of variant 'mel-24khz' (8 ConvNeXt blocks of dim 512",
        "the checkpoint has 2 ConvNeXt blocks and an ISTFT head; it lacks 54 of its entries",
        "--variant",
    )
    (tmp_path / "config.yaml").write_text(config_yaml(dim=48))
    with pytest.raises(WeightsMismatchError) as caught:
        recipes.get("vocos").build("tiny", weights=str(tmp_path))
    assert_one_line(caught.value, "backbone.embed.weight is (32, 100, 7) in the checkpoint, (48, 100, 7) in the model")

    state = torch.load(checkpoint, weights_only=True)
    del state["head.istft.window"]
    state["head.imdct.window"] = torch.ones(1024)
    torch.save(state, checkpoint)
    with pytest.raises(WeightsMismatchError) as caught:
        recipes.get("vocos").build("tiny", weights=checkpoint)
    assert_one_line(
        caught.value,
        "the checkpoint has 2 ConvNeXt blocks and an IMDCT head",
        "lacks 1 of its entries (e.g. head.istft.window) and has 1 it does not (e.g. head.imdct.window)",
    )


def test_unreadable_or_missing_weights_are_refused(tmp_path):
    (tmp_path / "broken.bin").write_text("not a checkpoint")
    torch.save({"generator": {}}, tmp_path / "other.bin")
    (tmp_path / "config-only").mkdir()
    (tmp_path / "config-only" / "config.yaml").write_text(config_yaml())
    cases = {
        str(tmp_path / "broken.bin"): "cannot read",
        str(tmp_path / "other.bin"): "is not a Vocos state dict",
        str(tmp_path / "absent"): "not found",
        str(tmp_path / "config-only"): "has no pytorch_model.bin",
    }
    for weights, fragment in cases.items():
        with pytest.raises(WeightsError) as caught:
            recipes.get("vocos").build("tiny", weights=weights)
        assert_one_line(caught.value, fragment)

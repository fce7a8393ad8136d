"""What every CTC speech recognizer family passes: its sources at test size (wav2vec2, HuBERT and WavLM from
transformers and torchaudio; UniSpeech, UniSpeech-SAT, data2vec-audio, SEW, SEW-D and wav2vec2-conformer from
transformers only), real weights loading, published configurations. Each family's own behaviour is tested in its
test_<family>.py."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils import parametrize
from torchaudio.models.wav2vec2.utils import import_huggingface_model

from audiodeploy import recipes
from audiodeploy.recipes import STANDARD_ENGLISH, BuiltModel
from tests.recipes.helpers import EXPORT_ATOL, assert_exports_like_eager, weight_norm_on_parameters

# The families both libraries build, and those only transformers builds.
TORCHAUDIO_FAMILIES = ("wav2vec2", "hubert", "wavlm")
TRANSFORMERS_ONLY_FAMILIES = ("unispeech", "unispeech-sat", "data2vec-audio", "sew", "sew-d", "wav2vec2-conformer")
FAMILIES = TORCHAUDIO_FAMILIES + TRANSFORMERS_ONLY_FAMILIES

# Every family's test-size variants: the layouts of its smallest and its pre-norm published variant.
TINY = [
    ("wav2vec2", "tiny"),
    ("wav2vec2", "tiny-lv60"),
    ("hubert", "tiny"),
    ("hubert", "tiny-large"),
    ("wavlm", "tiny"),
    ("wavlm", "tiny-large"),
]
# The same for the transformers-only families; one test size where the published sizes differ only in widths and
# depth (data2vec-audio, SEW, SEW-D), and UniSpeech's only published layout is the pre-norm large one.
TRANSFORMERS_ONLY_TINY = [
    ("unispeech", "tiny"),
    ("unispeech-sat", "tiny"),
    ("unispeech-sat", "tiny-large"),
    ("data2vec-audio", "tiny"),
    ("sew", "tiny"),
    ("sew-d", "tiny"),
    # One test size per kind of position embedding: rotary (the default's layout) and relative.
    ("wav2vec2-conformer", "tiny"),
    ("wav2vec2-conformer", "tiny-rel-pos"),
]
TINY_BUILDS = [(family, variant, source) for family, variant in TINY for source in ("transformers", "torchaudio")] + [
    (family, variant, "transformers") for family, variant in TRANSFORMERS_ONLY_TINY
]

# data2vec-audio's positional convolutions are plain convolutions, and wav2vec2-conformer's transformers encoder never
# calls its weight-normalized one (its attention has position embeddings of its own); every other family has one
# weight-normalized.
WITHOUT_WEIGHT_NORMED_POSITIONAL_CONVOLUTION = ("data2vec-audio", "wav2vec2-conformer")
WEIGHT_NORMED_POSITIONAL_CONVOLUTIONS = {
    family: 0 if family in WITHOUT_WEIGHT_NORMED_POSITIONAL_CONVOLUTION else 1 for family in FAMILIES
}

# Parameters of the transformers model of each published variant.
PUBLISHED = [
    ("wav2vec2", "base", 94_396_320),
    ("wav2vec2", "large", 315_461_792),
    ("wav2vec2", "large-lv60", 315_471_520),
    ("hubert", "base", 94_396_320),
    ("hubert", "large", 315_467_936),
    ("wavlm", "base-plus", 94_406_544),
    ("wavlm", "large", 315_485_920),
    ("unispeech", "large", 315_471_520),
    ("unispeech-sat", "base-plus", 94_396_320),
    ("unispeech-sat", "large", 315_467_936),
    ("data2vec-audio", "base", 93_188_896),
    ("data2vec-audio", "large", 313_309_216),
    ("sew", "tiny-100k", 40_725_311),
    ("sew", "mid-100k", 174_699_583),
    ("sew-d", "tiny-100k", 24_127_423),
    ("sew-d", "base-plus-400k", 177_003_711),
    ("wav2vec2-conformer", "rope-large", 593_376_928),
    ("wav2vec2-conformer", "rel-pos-large", 618_591_904),
]


def positional_convolutions(built: BuiltModel) -> list[torch.nn.Module]:
    model = built.module.model
    if built.source == "torchaudio":
        return [model.encoder.transformer.pos_conv_embed.conv]
    embedding = model.base_model.encoder.pos_conv_embed
    if built.recipe == "data2vec-audio":
        return [layer.conv for layer in embedding.layers]
    if built.recipe == "wav2vec2-conformer":
        return []  # built (and in the checkpoint), never called
    return [embedding.conv]


@pytest.mark.parametrize(("family", "variant", "source"), TINY_BUILDS)
def test_tiny_fp32_builds_and_exports_like_eager(family, variant, source):
    """Builds with synthetic weights, runs, exports over 1-10 s and matches eager at 1 s, 1.02 s (one frame more:
    SEW's transformer pools frames in pairs) and 10 s; the positional convolution is a weight-norm parametrization
    that exports as `_weight_norm` on parameters (data2vec-audio's are plain convolutions; wav2vec2-conformer's is
    never called)."""
    built = recipes.get(family).build(variant, source)
    assert (built.recipe, built.variant, built.source) == (family, variant, source)
    assert built.weights_provenance == f"synthetic (seed 0) from the test-size '{variant}' configuration"
    assert built.vocabulary == STANDARD_ENGLISH
    assert built.input.length_multiple == 320 and built.sample_rate == 16_000
    assert (built.input.min_length, built.input.max_length) == (16_000, 160_000)
    (waveform,) = built.example_inputs
    assert waveform.shape == (1, 16_000)
    with torch.no_grad():
        logits = built.module(waveform)
    # 320 samples per frame, minus the 400-sample receptive field of the first frame.
    assert logits.shape == (1, 49, 32)
    assert isinstance(built.vocabulary.decode(logits), str)

    weight_normed = WEIGHT_NORMED_POSITIONAL_CONVOLUTIONS[family]
    for conv in positional_convolutions(built):
        assert parametrize.is_parametrized(conv, "weight") == bool(weight_normed)
        if weight_normed:
            assert type(conv.parametrizations["weight"][0]).__name__ == "_WeightNorm"

    program = assert_exports_like_eager(built)
    assert weight_norm_on_parameters(program) == weight_normed
    inputs = built.random_inputs(built.input.min_length + built.input.length_multiple, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(*inputs), built.module(*inputs), atol=EXPORT_ATOL, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_seed_decides_the_synthetic_weights(family):
    recipe = recipes.get(family)
    first, again, other = (recipe.build("tiny", seed=seed) for seed in (1, 1, 2))
    (waveform,) = first.example_inputs
    with torch.no_grad():
        assert torch.equal(first.module(waveform), again.module(waveform))
        assert not torch.equal(first.module(waveform), other.module(waveform))


@pytest.mark.parametrize(
    ("family", "variant"),
    [("wav2vec2", "tiny"), ("wav2vec2", "tiny-lv60"), ("hubert", "tiny-large"), ("wavlm", "tiny")]
    + [(family, "tiny") for family in TRANSFORMERS_ONLY_FAMILIES]
    + [("wav2vec2-conformer", "tiny-rel-pos")],
)
def test_transformers_weights_round_trip(family, variant, tmp_path):
    """A tiny model saved with save_pretrained loads back through the recipe with identical outputs."""
    recipe = recipes.get(family)
    original = recipe.build(variant, seed=7)
    original.module.model.save_pretrained(tmp_path)
    loaded = recipe.build(variant, weights=str(tmp_path))
    assert loaded.weights_provenance == f"loaded from {tmp_path} (transformers {type(original.module.model).__name__})"
    assert loaded.vocabulary == STANDARD_ENGLISH
    assert loaded.notes == ()
    inputs = original.random_inputs(24_000 // 320 * 320, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(loaded.module(*inputs), original.module(*inputs), atol=0, rtol=0)
    program = assert_exports_like_eager(loaded)
    assert weight_norm_on_parameters(program) == WEIGHT_NORMED_POSITIONAL_CONVOLUTIONS[family]


@pytest.mark.parametrize(("family", "variant"), TINY)
def test_torchaudio_state_dict_matches_transformers(family, variant, tmp_path):
    """torchaudio's converter turns the transformers model into a state dict that the torchaudio source loads,
    and both sources then compute the same logits: the two sources build one architecture."""
    recipe = recipes.get(family)
    reference = recipe.build(variant, source="transformers", seed=3)
    hf_model = reference.module.model
    # torchaudio's converter takes the CTC head only from Wav2Vec2ForCTC (for WavLMForCTC it looks for a
    # `.wav2vec2` attribute that transformers calls `.wavlm`): convert the body, carry the head over by hand.
    converted = import_huggingface_model(hf_model.base_model)
    converted.aux = torch.nn.Linear(hf_model.lm_head.in_features, hf_model.lm_head.out_features)
    converted.aux.load_state_dict(hf_model.lm_head.state_dict())
    path = tmp_path / "state_dict.pt"
    torch.save(converted.state_dict(), path)

    loaded = recipe.build(variant, source="torchaudio", weights=str(path))
    assert loaded.weights_provenance == f"loaded from {path} (torchaudio state dict, '{variant}' configuration)"
    inputs = reference.random_inputs(32_000, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(loaded.module(*inputs), reference.module(*inputs), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize(("family", "variant", "parameters"), PUBLISHED)
def test_published_configuration(family, variant, parameters):
    """The published configuration has the published size in every source (built on the meta device: no
    memory, no time). transformers has one parameter vector more than torchaudio: `masked_spec_embed`, for
    training. A description that gives the size in millions gives this one (the transformers-only families' all
    do)."""
    recipe = recipes.get(family)
    published = recipe.variant(variant)
    architecture = published.architecture
    with torch.device("meta"):
        hf_model = recipe.transformers_model_class(recipe.transformers_config(architecture))
    hf_count = sum(p.numel() for p in hf_model.parameters())
    assert hf_count == parameters
    if family in TRANSFORMERS_ONLY_FAMILIES or "M parameters" in published.description:
        assert f" {round(parameters / 1e6)} M parameters" in published.description
    if "torchaudio" in recipe.sources:
        with torch.device("meta"):
            ta_model = recipe.torchaudio_model(architecture, architecture.vocab_size)
        assert hf_count - sum(p.numel() for p in ta_model.parameters()) == architecture.hidden_size


# Each head a checkpoint of these families may carry, as its config.json's `architectures` names it: the program's
# output kind and the output's shape for 0.5 s of audio at test size (24 frames, hidden 32).
HEADS = [
    ("wav2vec2", "ForSequenceClassification", "class-logits", (1, 3)),
    ("wav2vec2", "ForAudioFrameClassification", "frame-class-logits", (1, 24, 3)),
    ("wavlm", "ForXVector", "embedding", (1, 24)),
    ("hubert", "Model", "hidden-states", (1, 24, 32)),
    ("wav2vec2", "ForPreTraining", "hidden-states", (1, 24, 32)),
    # What the published UniSpeech and SEW-D checkpoints hold (microsoft/unispeech-large-1500h-cv, asapp/sew-d-tiny-100k).
    ("unispeech", "ForPreTraining", "hidden-states", (1, 24, 32)),
    ("sew-d", "Model", "hidden-states", (1, 24, 32)),
]
LABELS = {0: "no", 1: "yes", 2: "unknown"}


def save_checkpoint_with_head(family: str, suffix: str, directory) -> torch.nn.Module:
    """A test-size checkpoint of `family` with the head `suffix` names, written with save_pretrained; the model."""
    import transformers

    recipe = recipes.get(family)
    config = recipe.transformers_config(recipe.variant("tiny").architecture)
    config.id2label, config.label2id = LABELS, {label: index for index, label in LABELS.items()}
    config.xvector_output_dim = 24
    torch.manual_seed(3)
    model = getattr(transformers, recipe.transformers_class_prefix + suffix)(config).eval()
    model.save_pretrained(directory)
    return model


@pytest.mark.parametrize(("family", "suffix", "kind", "shape"), HEADS)
def test_a_checkpoint_builds_with_the_head_it_has(family, suffix, kind, shape, tmp_path):
    saved = save_checkpoint_with_head(family, suffix, tmp_path)
    built = recipes.get(family).build("tiny", weights=str(tmp_path))
    assert built.output.kind == kind and built.notes == ()
    assert built.labels == (tuple(LABELS.values()) if "classification" in suffix.lower() else None)
    assert built.vocabulary is None
    assert built.describe().task == built.output.task
    inputs = built.random_inputs(8000, seed=1)
    with torch.no_grad():
        output = built.module(*inputs)
    assert tuple(output.shape) == shape
    if suffix != "ForPreTraining":  # its own output is the contrastive task's, not the features
        waveform = inputs[0]
        if built.module.normalize_waveform:
            waveform = torch.nn.functional.layer_norm(waveform, waveform.shape[-1:], eps=1e-7)
        with torch.no_grad():
            expected = saved(input_values=waveform)
        expected = expected.embeddings if suffix == "ForXVector" else expected[0]
        torch.testing.assert_close(output, expected, atol=1e-4, rtol=1e-4)


def test_default_keep_fp32_follows_the_head(tmp_path):
    save_checkpoint_with_head("wav2vec2", "ForSequenceClassification", tmp_path)
    built = recipes.get("wav2vec2").build("tiny", weights=str(tmp_path))
    assert built.keep_fp32 == ("*.feature_extractor.conv_layers.0.*", "*.projector", "*.classifier")
    assert recipes.get("wav2vec2").build("tiny").keep_fp32 == ("*.feature_extractor.conv_layers.0.*", "*.lm_head")


def test_an_architecture_without_a_program_is_refused_naming_those_there_are(tmp_path):
    save_checkpoint_with_head("wav2vec2", "Model", tmp_path)
    config = (tmp_path / "config.json").read_text().replace('"Wav2Vec2Model"', '"Wav2Vec2ForMaskedSpeech"')
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(recipes.WeightsError, match="Wav2Vec2ForMaskedSpeech.*Wav2Vec2ForSequenceClassification"):
        recipes.get("wav2vec2").build("tiny", weights=str(tmp_path))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_found_by_the_model_type_of_its_config(family, tmp_path):
    recipe = recipes.get(family)
    config = recipe.transformers_config(recipe.variant("tiny").architecture)
    assert config.model_type == recipe.transformers_model_type
    config.save_pretrained(tmp_path)
    assert recipes.for_checkpoint(str(tmp_path)) is recipe


def test_the_recipe_of_a_checkpoint_is_found_by_its_model_type(tmp_path):
    save_checkpoint_with_head("wavlm", "ForXVector", tmp_path / "wavlm")
    assert recipes.for_checkpoint(str(tmp_path / "wavlm")).name == "wavlm"
    from transformers import BertConfig

    BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8).save_pretrained(
        tmp_path / "bert"
    )
    with pytest.raises(recipes.UnknownRecipeError, match="a model of type 'bert'.*hubert.*wav2vec2"):
        recipes.for_checkpoint(str(tmp_path / "bert"))

"""The registry: lookups, the error messages that name valid choices, and registering a recipe of one's own."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from types import MappingProxyType

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.recipes import (
    WAVEFORM_OUTPUT,
    BuildRequest,
    BuiltModel,
    LengthRange,
    Recipe,
    RecipeError,
    RegistrationError,
    UnknownRecipeError,
    UnknownSourceError,
    UnknownVariantError,
    Variant,
    register,
    synthetic_provenance,
    unregister,
    waveform_input,
)
from tests.recipes.helpers import assert_exports_like_eager, assert_one_line

BUILT_IN = (
    "bigvgan",
    "dac",
    "data2vec-audio",
    "encodec",
    "hifigan",
    "hubert",
    "mimi",
    "sew",
    "sew-d",
    "speecht5-hifigan",
    "unispeech",
    "unispeech-sat",
    "univnet",
    "vits",
    "vocos",
    "wav2vec2",
    "wav2vec2-bert",
    "wav2vec2-conformer",
    "wavlm",
)


def test_available_lists_the_built_in_recipes_sorted():
    assert recipes.available() == BUILT_IN


def test_family_modules_are_importable_as_audiodeploy_recipes():
    from audiodeploy.recipes import (
        bigvgan,
        data2vec_audio,
        hifigan,
        hubert,
        sew,
        sew_d,
        speecht5_hifigan,
        unispeech,
        unispeech_sat,
        univnet,
        vocos,
        wav2vec2,
        wav2vec2_conformer,
        wavlm,
    )

    modules = (wav2vec2, hubert, wavlm, speecht5_hifigan, hifigan, univnet, bigvgan, vocos)
    modules += (unispeech, unispeech_sat, data2vec_audio, sew, sew_d, wav2vec2_conformer)
    names = ("wav2vec2", "hubert", "wavlm", "speecht5_hifigan", "hifigan", "univnet", "bigvgan", "vocos")
    names += ("unispeech", "unispeech_sat", "data2vec_audio", "sew", "sew_d", "wav2vec2_conformer")
    assert [module.__name__ for module in modules] == [f"audiodeploy.recipes.{name}" for name in names]


def test_get_returns_the_declared_recipe():
    recipe = recipes.get("wav2vec2")
    assert recipe.name == "wav2vec2"
    assert recipe.default_variant == "base"
    assert recipe.default_source == "transformers"
    assert recipe.variant_names() == ("base", "large", "large-lv60")
    assert "tiny" in recipe.variant_names(include_hidden=True)


@pytest.mark.parametrize(
    ("name", "variants", "sources"),
    [
        ("wav2vec2", ("base", "large", "large-lv60"), ("transformers", "torchaudio")),
        ("hubert", ("base", "large"), ("transformers", "torchaudio")),
        ("wavlm", ("base-plus", "large"), ("transformers", "torchaudio")),
        ("unispeech", ("large",), ("transformers",)),
        ("unispeech-sat", ("base-plus", "large"), ("transformers",)),
        ("data2vec-audio", ("base", "large"), ("transformers",)),
        ("sew", ("tiny-100k", "mid-100k"), ("transformers",)),
        ("sew-d", ("tiny-100k", "base-plus-400k"), ("transformers",)),
        ("wav2vec2-conformer", ("rope-large", "rel-pos-large"), ("transformers",)),
        ("hifigan", ("v1", "v2", "v3"), ("original",)),
        ("speecht5-hifigan", ("v1", "spectral-norm"), ("transformers",)),
        ("univnet", ("c32",), ("transformers",)),
        ("dac", ("16khz", "24khz", "44khz"), ("transformers",)),
        ("mimi", ("8-codebooks", "32-codebooks"), ("transformers",)),
        (
            "encodec",
            (
                "24khz-6kbps",
                "24khz-1.5kbps",
                "24khz-3kbps",
                "24khz-12kbps",
                "24khz-24kbps",
                "48khz-3kbps",
                "48khz-6kbps",
                "48khz-12kbps",
                "48khz-24kbps",
            ),
            ("transformers",),
        ),
        (
            "bigvgan",
            (
                "v2-22khz-80band-256x",
                "v2-22khz-80band-fmax8k-256x",
                "v2-24khz-100band-256x",
                "v2-44khz-128band-256x",
                "v2-44khz-128band-512x",
                "22khz-80band",
                "24khz-100band",
                "base-22khz-80band",
                "base-24khz-100band",
            ),
            ("original",),
        ),  # fmt: skip
        ("vocos", ("mel-24khz",), ("original",)),
    ],
)
def test_listed_variants_and_sources(name, variants, sources):
    recipe = recipes.get(name)
    assert recipe.variant_names() == variants
    assert recipe.sources == sources
    assert all(v.checkpoint for v in recipe.variants if not v.hidden)


def test_unknown_recipe_error_names_the_choices_and_the_closest():
    with pytest.raises(UnknownRecipeError) as caught:
        recipes.get("wav2vec")
    assert_one_line(caught.value, "unknown recipe 'wav2vec'", ", ".join(BUILT_IN), "did you mean 'wav2vec2'?")
    assert isinstance(caught.value, RecipeError)


def test_unknown_variant_error_names_the_listed_variants():
    with pytest.raises(UnknownVariantError) as caught:
        recipes.get("hubert").build(variant="xlarge")
    assert_one_line(caught.value, "recipe 'hubert' has no variant 'xlarge'", "choose one of base, large")
    assert "tiny" not in str(caught.value)


def test_unknown_source_error_names_the_sources():
    with pytest.raises(UnknownSourceError) as caught:
        recipes.get("speecht5-hifigan").build(variant="tiny", source="torchaudio")
    assert_one_line(caught.value, "recipe 'speecht5-hifigan' cannot be built from source 'torchaudio'", "transformers")


def test_describe_is_json_ready_and_hides_test_variants():
    described = json.loads(json.dumps(recipes.get("wav2vec2").describe()))
    assert [v["name"] for v in described["variants"]] == ["base", "large", "large-lv60"]
    assert described["variants"][0]["checkpoint"] == "facebook/wav2vec2-base-960h"
    assert described["default_length_range_seconds"] == [1.0, 10.0]
    assert described["input"] == "waveform"
    assert described["output"]["postprocess"] == "ctc-greedy-decode"


# Run in a fresh interpreter: this one has long imported torch. Prints the recipes it listed and which of the
# heavy libraries (seconds to import) the listing imported.
_LIST_WITHOUT_LIBRARIES = """
import json, sys
from audiodeploy import recipes

for name in recipes.available():
    recipe = recipes.get(name)
    json.dumps(recipe.describe())
    for variant in recipe.variant_names(include_hidden=True):
        recipe.variant(variant)
    recipe.source()
    recipe.default_length_range
print(json.dumps({
    "listed": recipes.available(),
    "imported": [library for library in ("torch", "torchaudio", "transformers") if library in sys.modules],
}))
"""


def test_listing_and_describing_recipes_imports_no_model_library():
    """`audiodeploy list` answers at once: declaring, listing and describing every recipe imports neither
    torch, torchaudio nor transformers (a build imports them)."""
    result = subprocess.run(
        [sys.executable, "-c", _LIST_WITHOUT_LIBRARIES], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert tuple(answer["listed"]) == BUILT_IN
    assert answer["imported"] == []


# A user-defined recipe: the smallest thing the registry accepts.


@dataclass(frozen=True)
class GainArchitecture:
    gain: float


class Gain(torch.nn.Module):
    def __init__(self, gain: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(gain))

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        return waveform * self.weight


class GainRecipe(Recipe[GainArchitecture]):
    name = "test-gain"
    description = "multiplies a waveform by a gain"
    task = "vocoder"
    sources = ("torch",)
    variants = (Variant("double", "gain 2", GainArchitecture(2.0), checkpoint="none/gain"),)
    sample_rate = 8_000
    input_kind = "waveform"
    output = WAVEFORM_OUTPUT
    default_length_range = LengthRange(0.5, 2.0)
    atol = 1e-6

    def _build(self, request: BuildRequest[GainArchitecture]) -> BuiltModel:
        spec = waveform_input(self.sample_rate, 1, request.length_range)
        return BuiltModel(
            recipe=self.name,
            variant=request.variant.name,
            source=request.source,
            module=Gain(request.variant.architecture.gain).eval(),
            example_inputs=spec.random_inputs(spec.example_length),
            dynamic_shapes=spec.dynamic_shapes(),
            input=spec,
            output=self.output,
            length_range=request.length_range,
            weights_provenance=synthetic_provenance(request.variant, request.seed),
            atol=self.tolerance(request.variant),
        )


@pytest.fixture
def gain_recipe():
    register(GainRecipe)
    yield recipes.get("test-gain")
    unregister("test-gain")


def test_a_user_recipe_registers_builds_and_exports(gain_recipe):
    assert "test-gain" in recipes.available()
    built = gain_recipe.build()
    assert (built.recipe, built.variant, built.source) == ("test-gain", "double", "torch")
    assert built.weights_provenance == "synthetic (seed 0) from the published none/gain configuration"
    assert_exports_like_eager(built)


def test_registering_a_taken_name_is_refused(gain_recipe):
    with pytest.raises(RegistrationError) as caught:
        register(GainRecipe)
    assert_one_line(caught.value, "'test-gain' is already registered")


def test_registering_an_incomplete_declaration_is_refused():
    class Incomplete(Recipe[GainArchitecture]):
        name = "incomplete"

        def _build(self, request: BuildRequest[GainArchitecture]) -> BuiltModel:
            raise NotImplementedError

    with pytest.raises(RegistrationError) as caught:
        register(Incomplete)
    assert_one_line(caught.value, "Incomplete does not declare", "variants", "atol")
    assert "incomplete" not in recipes.available()


def test_a_hidden_default_variant_is_refused():
    class HiddenDefault(GainRecipe):
        name = "test-hidden-default"
        variants = (Variant("tiny", "hidden", GainArchitecture(1.0), checkpoint=None, hidden=True),)

    with pytest.raises(RegistrationError):
        register(HiddenDefault)


def test_keep_fp32_declared_for_a_source_the_recipe_lacks_is_refused_on_the_recipe_or_a_variant():
    class RecipeKeepsForOtherSource(GainRecipe):
        name = "test-keep-recipe"
        int8_keep_fp32 = MappingProxyType({"transformers": ("*.weight",)})

    class VariantKeepsForOtherSource(GainRecipe):
        name = "test-keep-variant"
        variants = GainRecipe.variants + (
            Variant("triple", "gain 3", GainArchitecture(3.0), None, int8_keep_fp32={"onnx": ("*",)}),
        )

    for declaration in (RecipeKeepsForOtherSource, VariantKeepsForOtherSource):
        with pytest.raises(RegistrationError) as caught:
            register(declaration)
        assert_one_line(caught.value, f"'{declaration.name}' declares int8_keep_fp32 for sources it does not have")
        assert declaration.name not in recipes.available()


def test_a_variant_keep_fp32_replaces_the_recipe_default_for_that_variant_only():
    class KeepsPerVariant(GainRecipe):
        name = "test-keep-per-variant"
        int8_keep_fp32 = MappingProxyType({"torch": ("recipe.*",)})
        variants = GainRecipe.variants + (
            Variant("triple", "gain 3", GainArchitecture(3.0), None, int8_keep_fp32={"torch": ("variant.*",)}),
        )

    register(KeepsPerVariant)
    try:
        recipe = recipes.get("test-keep-per-variant")
        assert recipe.default_keep_fp32() == recipe.default_keep_fp32("torch", "double") == ("recipe.*",)
        assert recipe.default_keep_fp32("torch", "triple") == ("variant.*",)
    finally:
        unregister("test-keep-per-variant")

"""The recipe registry: the `Recipe` base class, the `register` decorator, `get` and `available`.

A recipe is a small declarative class: class attributes say what the model family is (variants, sources,
sample rate, input, output, default length range, tolerance) and `_build` builds one variant from one source.
`Recipe.build` validates a request against the declaration before anything is constructed, so a wrong name
fails fast with a message that lists the valid choices.

    @register
    class MyVocoder(Recipe[MyArchitecture]):
        name = "my-vocoder"
        ...
        def _build(self, request: BuildRequest[MyArchitecture]) -> BuiltModel: ...
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from audiodeploy.program.mel import Fbank, MelSpectrogram
from audiodeploy.program.vocabulary import CtcVocabulary

from .errors import (
    QuantizationSchemeError,
    RegistrationError,
    UnknownRecipeError,
    UnknownSourceError,
    UnknownVariantError,
)
from .spec import (
    ArchitectureT,
    BuildRequest,
    BuiltHead,
    BuiltModel,
    InputKind,
    InputSpec,
    LengthRange,
    OutputSpec,
    Task,
    Variant,
)

if TYPE_CHECKING:
    from torch import nn


def _choices(valid: Iterable[str], given: str) -> str:
    """'choose one of a, b, c' plus a 'did you mean' when a valid name is close to the given one."""
    names = list(valid)
    close = difflib.get_close_matches(given, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"choose one of {', '.join(names)}{hint}"


class Recipe(ABC, Generic[ArchitectureT]):
    """A model family that can be built for export. Subclass it, set every attribute below, implement `_build`.

    The first entry of `sources` and the first entry of `variants` are the defaults.
    """

    name: str
    """Registry name, what `audiodeploy export NAME` takes."""
    description: str
    task: Task
    sources: tuple[str, ...]
    """Libraries the model can be built from, e.g. ("transformers", "torchaudio")."""
    variants: tuple[Variant[ArchitectureT], ...]
    sample_rate: int
    input_kind: InputKind | Literal["text"]
    """What the user gives the program: its input's kind, or "text" for text to speech (whose methods take token ids
    and latents the runtime makes from the text)."""
    output: OutputSpec
    default_length_range: LengthRange
    """The range of input durations exported when the user does not give one."""
    atol: float
    """Absolute tolerance of a lowered program's output against the eager module (fp32)."""
    int8_schemes: tuple[str, ...] = ()
    """The schemes this recipe takes (`audiodeploy.QuantizationScheme` values, as the command line spells them),
    measured end to end on its tiny variant (tests/recipes/test_quantized.py); none by default.
    `check_int8_scheme` refuses the others."""
    window_overlap: float | None = None
    """The share of a window that the runtime overlaps neighbouring windows by when the user gives no overlap: more
    than its default fifth for a model that needs a warm-up (an LSTM that a window starts afresh); None: the
    default."""
    transformers_model_type: str | None = None
    """The ``model_type`` of the transformers checkpoints this recipe builds, if any: `for_checkpoint` finds the
    recipe of a checkpoint by it."""
    int8_keep_fp32: Mapping[str, tuple[str, ...]] = MappingProxyType({})
    """Per source: the module-name patterns (`keep_fp32` of `audiodeploy.Quantization`, fnmatch on the export
    wrapper's module paths) whose GEMMs stay fp32 by default when the model is quantized; a source not
    named keeps nothing. A variant may declare its own (`Variant.int8_keep_fp32`). See `default_keep_fp32`."""

    @property
    def default_variant(self) -> str:
        return self.variants[0].name

    @property
    def default_source(self) -> str:
        return self.sources[0]

    def variant_names(self, include_hidden: bool = False) -> tuple[str, ...]:
        """Names of the variants; the test-size (hidden) ones only when asked."""
        return tuple(v.name for v in self.variants if include_hidden or not v.hidden)

    def variant(self, name: str | None = None) -> Variant[ArchitectureT]:
        """The variant called `name` (the default when None); raises `UnknownVariantError` naming the choices."""
        wanted = self.default_variant if name is None else name
        for candidate in self.variants:
            if candidate.name == wanted:
                return candidate
        raise UnknownVariantError(
            f"recipe '{self.name}' has no variant '{wanted}': {_choices(self.variant_names(), wanted)}"
        )

    def tolerance(self, variant: Variant[ArchitectureT]) -> float:
        """The absolute tolerance for `variant`: its own when it declares one, else the recipe's."""
        return self.atol if variant.atol is None else variant.atol

    def source(self, name: str | None = None) -> str:
        """The source called `name` (the default when None); raises `UnknownSourceError` naming the choices."""
        wanted = self.default_source if name is None else name
        if wanted not in self.sources:
            raise UnknownSourceError(
                f"recipe '{self.name}' cannot be built from source '{wanted}': {_choices(self.sources, wanted)}"
            )
        return wanted

    def check_int8_scheme(self, scheme: str) -> str:
        """`scheme` when this recipe takes it; else `QuantizationSchemeError` naming the ones it takes."""
        if scheme not in self.int8_schemes:
            remedy = (
                f"choose one of {', '.join(self.int8_schemes)}, or export it in fp32"
                if self.int8_schemes
                else "it takes no quantization scheme: export it in fp32"
            )
            raise QuantizationSchemeError(f"recipe '{self.name}' cannot be quantized as '{scheme}': {remedy}")
        return scheme

    def default_keep_fp32(self, source: str | None = None, variant: str | None = None) -> tuple[str, ...]:
        """The patterns whose GEMMs stay fp32 by default when `variant` built from `source` is quantized: the
        variant's own when it declares them, else the recipe's."""
        declared = self.variant(variant).int8_keep_fp32
        return tuple((self.int8_keep_fp32 if declared is None else declared).get(self.source(source), ()))

    def build(
        self,
        variant: str | None = None,
        source: str | None = None,
        weights: str | None = None,
        seed: int = 0,
        length_range: LengthRange | None = None,
    ) -> BuiltModel:
        """Build the eval-mode module of `variant` from `source`, wrapped for export.

        variant: a name from `variant_names()`; default: the first variant.
        source: a name from `sources`; default: the first source.
        weights: None for seeded synthetic weights from the variant's published configuration (no download);
            else a local directory saved with `save_pretrained` or a hub id (source "transformers"), or a
            state-dict file (source "torchaudio").
        seed: seeds `torch.manual_seed` right before the synthetic model is constructed.
        length_range: durations the export must accept; default: `default_length_range`.
        """
        request = BuildRequest(
            variant=self.variant(variant),
            source=self.source(source),
            weights=weights,
            seed=seed,
            length_range=self.default_length_range if length_range is None else length_range,
        )
        return self._build(request)

    @abstractmethod
    def _build(self, request: BuildRequest[ArchitectureT]) -> BuiltModel:
        """Build the model for a validated request."""

    def _package(
        self,
        request: BuildRequest[ArchitectureT],
        module: nn.Module,
        spec: InputSpec,
        weights_provenance: str,
        notes: tuple[str, ...],
        vocabulary: CtcVocabulary | None = None,
        mel: MelSpectrogram | None = None,
        head: BuiltHead | None = None,
        fbank: Fbank | None = None,
    ) -> BuiltModel:
        """`module` as `request` built it, ready for export: in eval mode without gradients, with seeded
        example inputs of `spec.example_length`, dynamic shapes over `spec`, and the variant's tolerance.
        `head` is what the module outputs when it is not the recipe's declared `output` (a checkpoint's own head)."""
        module = module.eval()
        module.requires_grad_(False)
        keep_fp32 = self.default_keep_fp32(request.source, request.variant.name)
        return BuiltModel(
            recipe=self.name,
            variant=request.variant.name,
            source=request.source,
            module=module,
            example_inputs=spec.random_inputs(spec.example_length, seed=request.seed),
            dynamic_shapes=spec.dynamic_shapes(),
            input=spec,
            output=self.output if head is None else head.output,
            length_range=request.length_range,
            weights_provenance=weights_provenance,
            atol=self.tolerance(request.variant),
            vocabulary=vocabulary,
            labels=None if head is None else head.labels,
            mel=mel,
            fbank=fbank,
            notes=notes,
            window_overlap=self.window_overlap,
            keep_fp32=keep_fp32 if head is None else head.keep_fp32,
        )

    def describe(self) -> dict[str, object]:
        """A JSON-serializable summary of the declaration, for `audiodeploy list`."""
        return {
            "name": self.name,
            "description": self.description,
            "task": self.task,
            "sources": list(self.sources),
            "variants": [
                {"name": v.name, "description": v.description, "checkpoint": v.checkpoint, "atol": self.tolerance(v)}
                for v in self.variants
                if not v.hidden
            ],
            "default_variant": self.default_variant,
            "sample_rate": self.sample_rate,
            "input": self.input_kind,
            "output": self.output.to_dict(),
            "default_length_range_seconds": [
                self.default_length_range.min_seconds,
                self.default_length_range.max_seconds,
            ],
            "atol": self.atol,
            "int8_schemes": list(self.int8_schemes),
        }


_DECLARED_ATTRIBUTES = (
    "name",
    "description",
    "task",
    "sources",
    "variants",
    "sample_rate",
    "input_kind",
    "output",
    "default_length_range",
    "atol",
)

_REGISTRY: dict[str, Recipe[object]] = {}

RecipeClass = TypeVar("RecipeClass", bound=type[Recipe])


def register(recipe_class: RecipeClass) -> RecipeClass:
    """Class decorator: check a recipe's declaration and add an instance of it to the registry.

    Raises `RegistrationError` when an attribute is missing, the declaration is inconsistent, or the name is
    already registered. Returns the class unchanged.
    """
    missing = [attribute for attribute in _DECLARED_ATTRIBUTES if not hasattr(recipe_class, attribute)]
    if missing:
        raise RegistrationError(f"recipe class {recipe_class.__name__} does not declare {', '.join(missing)}")
    recipe = recipe_class()
    if not recipe.sources or not recipe.variants:
        raise RegistrationError(f"recipe '{recipe.name}' must declare at least one source and one variant")
    names = [v.name for v in recipe.variants]
    if len(set(names)) != len(names):
        raise RegistrationError(f"recipe '{recipe.name}' declares a variant name twice: {', '.join(names)}")
    declared_keep_fp32 = [recipe.int8_keep_fp32] + [v.int8_keep_fp32 for v in recipe.variants if v.int8_keep_fp32]
    unknown_sources = sorted(set().union(*declared_keep_fp32) - set(recipe.sources))
    if unknown_sources:
        raise RegistrationError(
            f"recipe '{recipe.name}' declares int8_keep_fp32 for sources it does not have: {', '.join(unknown_sources)}"
        )
    if recipe.variants[0].hidden:
        raise RegistrationError(f"recipe '{recipe.name}': the default (first) variant must not be hidden")
    if recipe.name in _REGISTRY:
        raise RegistrationError(
            f"a recipe named '{recipe.name}' is already registered: give yours another name, or unregister() it first"
        )
    _REGISTRY[recipe.name] = recipe
    return recipe_class


def unregister(name: str) -> None:
    """Remove a recipe from the registry (to replace it, or after a test)."""
    get(name)
    del _REGISTRY[name]


def get(name: str) -> Recipe[object]:
    """The registered recipe called `name`; raises `UnknownRecipeError` naming the registered ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownRecipeError(f"unknown recipe '{name}': {_choices(available(), name)}") from None


def for_checkpoint(weights: str) -> Recipe[object]:
    """The recipe that builds the transformers checkpoint `weights` (a save_pretrained directory or hub id), found
    by the ``model_type`` of its config.json; `UnknownRecipeError` naming the model types there are recipes for."""
    from ._transformers import read_config

    model_type = read_config(weights).get("model_type")
    for recipe in _REGISTRY.values():
        if model_type is not None and recipe.transformers_model_type == model_type:
            return recipe
    known = sorted(r.transformers_model_type for r in _REGISTRY.values() if r.transformers_model_type)
    what = "a config.json without a model_type" if model_type is None else f"a model of type '{model_type}'"
    raise UnknownRecipeError(
        f"weights '{weights}' hold {what}, which no recipe builds from its config alone: audiodeploy builds "
        f"{', '.join(known)} checkpoints; for another format name the recipe (audiodeploy list)"
    )


def available() -> tuple[str, ...]:
    """Names of the registered recipes, sorted."""
    return tuple(sorted(_REGISTRY))

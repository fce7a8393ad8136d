"""Errors a recipe raises for bad requests.

Every message is one line that names the problem and says what to do, so the command line can print it
as is, without a traceback.
"""

from __future__ import annotations

from audiodeploy.errors import AudiodeployError
from audiodeploy.program.spec import InputLengthError

__all__ = [
    "CalibrationError",
    "InputLengthError",
    "LengthRangeError",
    "QuantizationSchemeError",
    "RecipeError",
    "RegistrationError",
    "UnknownRecipeError",
    "UnknownSourceError",
    "UnknownVariantError",
    "UnreadableWeightsError",
    "WeightsError",
    "WeightsMismatchError",
]


class RecipeError(AudiodeployError):
    """Base class: a request the recipe library cannot satisfy, with a one-line message for the user."""


class UnknownRecipeError(RecipeError):
    """No recipe is registered under the requested name."""


class UnknownVariantError(RecipeError):
    """The recipe has no variant of the requested name."""


class UnknownSourceError(RecipeError):
    """The recipe cannot build its model from the requested source (library)."""


class RegistrationError(RecipeError):
    """A recipe declaration is incomplete or inconsistent, or its name is already taken."""


class LengthRangeError(RecipeError):
    """The requested range of input lengths is empty, inverted or too short for the model."""


class WeightsError(RecipeError):
    """Weights could not be loaded: missing path, unreachable hub, or a checkpoint that does not fit."""


class WeightsMismatchError(WeightsError):
    """The weights hold a different kind of model than the recipe builds (another `model_type`), or tensors of
    other shapes than the configuration beside them gives."""


class UnreadableWeightsError(WeightsError):
    """A weights file that is corrupt, truncated, not a checkpoint, or that would run code to load."""


class QuantizationSchemeError(RecipeError):
    """The recipe does not take the requested quantization scheme (see `Recipe.int8_schemes`)."""


class CalibrationError(RecipeError):
    """Calibration audio that is missing, not audio, or an empty directory."""

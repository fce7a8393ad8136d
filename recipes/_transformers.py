"""Loading transformers checkpoints for the recipes, with one-line errors instead of library tracebacks.

Also registers the attention implementation the speech encoders are exported with (see
`UNPADDED_EAGER_ATTENTION`). Importing transformers takes seconds, so each function imports what it uses when
it is called: declaring and listing recipes imports neither transformers nor torch.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._checkpoints import first_line, is_unreadable, unreadable
from .errors import WeightsError, WeightsMismatchError
from .spec import synthetic_provenance

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

    from .spec import BuildRequest

UNPADDED_EAGER_ATTENTION = "audiodeploy_unpadded_eager"
"""transformers' eager attention without an attention mask, for exporting one unpadded utterance.

Under `torch.export`, transformers materializes an all-true mask even when no mask is passed (it cannot
inspect the mask while tracing), and attention then carries mask bookkeeping in every layer. SDPA is worse:
its decomposition adds `eq`, `full_like`, `logical_not`, `any` and `where` per layer even without a mask. A
batch of one unpadded waveform needs no mask at all, so this implementation creates none and runs the same
eager attention as `attn_implementation="eager"` (bit-identical outputs).
"""


def _no_attention_mask(*args: object, **kwargs: object) -> None:
    # The signature of transformers' mask interface functions; the answer is always "no mask".
    return None


@functools.cache
def register_unpadded_eager_attention() -> None:
    """Register `UNPADDED_EAGER_ATTENTION` with transformers, before a model is built with it. Idempotent: the
    name is namespaced and always maps to the same functions, and later calls return at once."""
    from transformers.models.wav2vec2.modeling_wav2vec2 import eager_attention_forward

    register_unpadded_attention(UNPADDED_EAGER_ATTENTION, eager_attention_forward)


def register_unpadded_attention(name: str, attention: Callable[..., Any]) -> None:
    """Register the attention function `attention` with transformers as `name`, with no attention mask (see
    `UNPADDED_EAGER_ATTENTION`): for a family whose eager attention differs from wav2vec2's."""
    from transformers import AttentionInterface, AttentionMaskInterface

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, _no_attention_mask)


def transformers_class(name: str) -> Any:
    """The class transformers exports as `name` (e.g. "Wav2Vec2ForCTC"), importing transformers."""
    import transformers

    return getattr(transformers, name)


def transformers_class_exists(name: str) -> bool:
    """Whether transformers exports a class called `name` (not every family has every head)."""
    import transformers

    return hasattr(transformers, name)


# A hub id is "name" or "owner/name"; anything else (absolute or dotted paths, deeper paths) is a local path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")

ModelT = TypeVar("ModelT", bound="PreTrainedModel")


def locate(weights: str) -> str:
    """The existing local directory `weights` names, or `weights` itself when it can only be a hub id."""
    path = Path(weights).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise WeightsError(
                f"weights directory {weights} has no config.json: pass a directory saved with save_pretrained()"
            )
        return str(path)
    if path.exists():
        raise WeightsError(
            f"weights {weights} is a file, but source 'transformers' loads a directory saved with save_pretrained() "
            "or a hub id (a torchaudio state-dict file needs --source torchaudio)"
        )
    if not _HUB_ID.match(weights):
        raise WeightsError(f"weights {weights} not found: no such directory")
    return _hub_location(weights)


@functools.cache
def _hub_location(hub_id: str) -> str:
    """`hub_id` when the hub answers; else its snapshot in the local hub cache, if there is one.

    Without a network the hub client retries each request for about 20 s before it gives up, once per file; one
    connection attempt tells at once, and a cached snapshot is then used as the local directory it is.
    """
    from huggingface_hub import constants
    from transformers.utils import cached_file

    if os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes"):
        endpoint = urllib.parse.urlsplit(constants.ENDPOINT)
        port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
        try:
            socket.create_connection((endpoint.hostname, port), timeout=5).close()
            return hub_id
        except OSError as error:
            unreachable = f"the Hugging Face Hub ({endpoint.hostname}) cannot be reached: {error.strerror or error}"
    else:
        unreachable = "HF_HUB_OFFLINE is set"
    try:
        return str(Path(cached_file(hub_id, "config.json", local_files_only=True)).parent)
    except OSError:
        raise WeightsError(
            f"weights '{hub_id}' are not a local directory and {unreachable}; download the checkpoint where the hub "
            "is reachable (save_pretrained) and pass its directory"
        ) from None


def read_config(weights: str) -> dict[str, object]:
    """The config.json of a local directory or hub id, as a dictionary."""
    from transformers import PretrainedConfig

    location = locate(weights)
    try:
        config, _ = PretrainedConfig.get_config_dict(location)
    except OSError as error:
        if Path(location).is_dir():  # transformers says OSError of a config.json that is missing or not JSON
            raise WeightsError(
                f"cannot read the config.json of '{weights}': {first_line(error).rstrip('.')}; save the checkpoint "
                "again with save_pretrained(), which writes config.json beside the weights"
            ) from None
        raise WeightsError(
            f"cannot read weights '{weights}': not a local directory, and the Hugging Face Hub did not serve it "
            f"({first_line(error)}); download it where the hub is reachable and pass the directory"
        ) from None
    except (ValueError, json.JSONDecodeError) as error:
        raise WeightsError(f"cannot read the config.json of '{weights}': {first_line(error)}") from None
    return config


def refuse_other_model_type(config: dict[str, object], weights: str, expected_model_type: str, recipe: str) -> None:
    """Raise `WeightsMismatchError` when the config.json of `weights` is not of `expected_model_type`."""
    model_type = config.get("model_type")
    if model_type != expected_model_type:
        raise WeightsMismatchError(
            f"weights '{weights}' hold a '{model_type}' model, but recipe '{recipe}' builds '{expected_model_type}': "
            f"pass a {expected_model_type} checkpoint, or use the recipe for {model_type}"
        )


def load_pretrained(
    model_class: type[ModelT],
    weights: str,
    expected_model_type: str,
    recipe: str,
    attn_implementation: str | None,
    seed: int,
) -> tuple[ModelT, list[str]]:
    """Load `model_class` from `weights` after checking its config is `expected_model_type`.

    Returns the model and the names of parameters the checkpoint did not contain (transformers initializes
    them; `seed` seeds that initialization). Raises `WeightsMismatchError` when the directory holds another
    kind of model, `WeightsError` when it cannot be read.
    """
    import torch

    refuse_other_model_type(read_config(weights), weights, expected_model_type, recipe)
    torch.manual_seed(seed)
    location = locate(weights)
    try:
        # With output_loading_info, from_pretrained returns (model, {"missing_keys": [...], ...}). Mismatched
        # sizes are let through so that they are named below: transformers' own error points at a report that
        # only -v shows.
        model, loading_info = cast(
            tuple[ModelT, dict[str, Any]],
            model_class.from_pretrained(
                location,
                attn_implementation=attn_implementation,
                output_loading_info=True,
                ignore_mismatched_sizes=True,
                dtype=torch.float32,
            ),
        )
    except OSError as error:
        raise WeightsError(
            f"cannot load weights '{weights}': {first_line(error).rstrip('.')}; save the model with save_pretrained(), "
            "which writes its weights (model.safetensors) beside config.json"
        ) from None
    except Exception as error:  # torch and safetensors raise many types for a damaged file; is_unreadable sorts them
        if is_unreadable(error):
            raise unreadable(_weights_file(location), error) from None
        if not isinstance(error, (RuntimeError, ValueError)):
            raise
        raise WeightsError(
            f"weights '{weights}' do not fit transformers {model_class.__name__}: {first_line(error)}"
        ) from None
    refuse_mismatched(weights, loading_info.get("mismatched_keys", ()))
    return model.eval(), sorted(loading_info.get("missing_keys", []))


# The names transformers looks for in a save_pretrained directory, in its order of preference.
_WEIGHTS_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def _weights_file(location: str) -> str:
    """The weights file transformers read from `location` (a directory), or `location` when it cannot tell."""
    directory = Path(location)
    for name in _WEIGHTS_FILES:
        if (directory / name).is_file():
            return str(directory / name)
    return location


def refuse_mismatched(weights: str, mismatched: Iterable[tuple[str, tuple[int, ...], tuple[int, ...]]]) -> None:
    """Raise `WeightsMismatchError` naming a few parameters whose checkpoint shape differs from the model's.

    `mismatched` is transformers' `mismatched_keys`: (name, checkpoint shape, model shape) triples. The model is
    built from the config.json beside the weights, so a mismatch means that config is not the weights' own.
    """
    ordered = sorted(mismatched, key=lambda entry: entry[0])
    if not ordered:
        return
    shown = "; ".join(
        f"{name} is {tuple(checkpoint)} in the checkpoint, {tuple(model)} in the model"
        for name, checkpoint, model in ordered[:3]
    )
    more = f" (and {len(ordered) - 3} more)" if len(ordered) > 3 else ""
    raise WeightsMismatchError(
        f"weights '{weights}' do not fit their config.json: {shown}{more}; the config.json beside the weights must "
        "be the one they were trained with"
    )


def synthetic_or_loaded(
    request: BuildRequest[Any],
    recipe: str,
    model_class: type[ModelT],
    model_type: str,
    synthetic: Callable[[], PretrainedConfig],
    synthetic_init: Callable[[ModelT], None],
    needless: Callable[[str], bool] = lambda name: False,
) -> tuple[ModelT, str]:
    """The model a recipe builds, with its provenance: without `request.weights`, `model_class` of the
    `synthetic` config seeded by the request and `synthetic_init` given its weights; with them, the checkpoint
    loaded and refused when it lacks a parameter other than a `needless` one (training-only parts)."""
    import torch

    if request.weights is None:
        torch.manual_seed(request.seed)
        model = model_class(synthetic())
        synthetic_init(model)
        return model.eval(), synthetic_provenance(request.variant, request.seed)
    model, missing = load_pretrained(model_class, request.weights, model_type, recipe, None, request.seed)
    refuse_incomplete(request.weights, [name for name in missing if not needless(name)], model_class, model_type)
    return model, f"loaded from {request.weights} (transformers {model_class.__name__})"


def refuse_incomplete(weights: str, missing: list[str], model_class: type[PreTrainedModel], model_type: str) -> None:
    """Raise `WeightsError` when the checkpoint lacks any of the `missing` parameters it must hold."""
    if missing:
        raise WeightsError(
            f"weights '{weights}' lack {len(missing)} parameters of {model_class.__name__} "
            f"(e.g. {missing[0]}): pass a complete {model_type} checkpoint"
        )


def optional_file(weights: str, filename: str) -> str | None:
    """Path of `filename` beside the weights (a tokenizer or preprocessor file), or None when there is none."""
    from transformers.utils import cached_file

    location = locate(weights)
    local = Path(location)
    if local.is_dir():
        candidate = local / filename
        return str(candidate) if candidate.is_file() else None
    try:
        return cached_file(location, filename)
    except OSError:
        return None

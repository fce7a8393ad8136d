"""What the recipes that load an original repository's checkpoint share: reading the file, and checking that its
state dict fits the model built for it, each failure a one-line `WeightsError` naming the file.

Declaring a recipe imports no torch: these functions import it when they run.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import WeightsError, WeightsMismatchError

if TYPE_CHECKING:
    import torch


def load_payload(path: Path) -> object:
    """What `torch.save` wrote to `path`, on the CPU, unpickling tensors and containers only."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as error:
        raise WeightsError(f"cannot read {path} as a PyTorch checkpoint: {first_line(error)}") from None


def read_generator_state(
    path: Path,
    *,
    family: str,
    wanted: str,
    discriminators: tuple[str, ...],
    discriminator_contents: str,
    discriminator_remedy: str,
) -> dict[str, torch.Tensor]:
    """The generator state dict of a HiFi-GAN-style checkpoint file (`{"generator": ...}`, or a bare state dict).

    `family` names the format ("HiFi-GAN", "BigVGAN") and `wanted` what to pass instead of a file without a
    generator. A payload with any of the `discriminators` keys is the training's discriminator checkpoint:
    refused as holding `discriminator_contents`, with `discriminator_remedy`.
    """
    import torch

    payload = load_payload(path)
    if not isinstance(payload, Mapping):
        raise WeightsError(f"{path} holds a {type(payload).__name__}, not a {family} checkpoint dictionary")
    if "generator" in payload:
        state = payload["generator"]
    elif any(key in payload for key in discriminators):
        raise WeightsError(
            f"{path} is a discriminator checkpoint ({discriminator_contents}), not a generator: {discriminator_remedy}"
        )
    elif any(str(key).startswith("conv_pre.") for key in payload):
        state = payload  # a bare generator state dict
    else:
        keys = ", ".join(map(str, list(payload)[:4]))
        raise WeightsError(f"{path} holds no 'generator' state dict (its keys: {keys}): pass {wanted}")
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"the 'generator' entry of {path} is not a state dict of tensors")
    return dict(state)


def check_fits(
    state: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    checkpoint: Path,
    *,
    model: str,
    layout: str,
    hint: str,
    entries: str = "entries",
    built: str = "model",
) -> None:
    """Raise `WeightsMismatchError` unless `state` has exactly the keys and shapes of `expected`.

    The message reads `{checkpoint} does not fit {model}: {layout}; it lacks ...; {hint}` (`layout`: what the
    checkpoint's keys say of the model it holds), or names the first entry of another shape; `entries` and
    `built` are the words for the state dict's entries and the module built ("parameters", "generator").
    """
    missing = [key for key in expected if key not in state]
    unexpected = [key for key in state if key not in expected]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"lacks {len(missing)} of its {entries} (e.g. {missing[0]})")
        if unexpected:
            parts.append(f"has {len(unexpected)} it does not (e.g. {unexpected[0]})")
        raise WeightsMismatchError(f"{checkpoint} does not fit {model}: {layout}; it {' and '.join(parts)}; {hint}")
    for key, tensor in expected.items():
        if state[key].shape != tensor.shape:
            raise WeightsMismatchError(
                f"{checkpoint} does not fit {model}: {key} is {tuple(state[key].shape)} in the checkpoint, "
                f"{tuple(tensor.shape)} in the {built}; {hint}"
            )


def first_line(error: BaseException) -> str:
    """The first line of an error's message (or its type's name): what a one-line error can quote."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__

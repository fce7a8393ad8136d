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

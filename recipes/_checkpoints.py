"""What the recipes that load weights share: reading a checkpoint file, and checking that its state dict fits
the model built for it, each failure a one-line `WeightsError` naming the file.

Declaring a recipe imports no torch: these functions import it when they run.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UnreadableWeightsError, WeightsError, WeightsMismatchError

if TYPE_CHECKING:
    import torch

REREAD_REMEDY = "download or save the weights again (torch.save of the state dict, or save_pretrained) and pass them"
_HOLDS_CODE = "it holds code to run while loading"
CODE_REMEDY = (
    "take the weights from a source you trust, saved as tensors only (torch.save of the state dict, or save_pretrained)"
)

# torch.load names what the weights-only unpickler refused after a preamble advising weights_only=False: advice
# that runs whatever code the file holds. These are the preamble's lines, never quoted.
_TORCH_ADVICE = (
    "Weights only load failed",
    "Please file an issue",
    "Check the documentation",
    "WeightsUnpickler error",
)

# What torch.load and safetensors raise for a file that is not a checkpoint: random bytes reach the unpickler
# and fail in it (a missing memo key, an empty stack, a bad string), a cut zip fails in its reader.
_UNREADABLE = (pickle.UnpicklingError, EOFError, KeyError, IndexError, UnicodeDecodeError)


def load_payload(path: Path) -> object:
    """What `torch.save` wrote to `path`, on the CPU, unpickling tensors and containers only."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        raise WeightsError(f"cannot read {path}: {error.strerror or first_line(error)}") from None
    except (RuntimeError, ValueError, *_UNREADABLE) as error:
        raise unreadable(path, error) from None


def is_unreadable(error: BaseException) -> bool:
    """Whether `error`, raised while loading weights, says the file is corrupt, truncated or not weights at all."""
    from safetensors import SafetensorError

    if isinstance(error, (SafetensorError, *_UNREADABLE)):
        return True
    # A mismatch is a RuntimeError too: only the zip reader's one is about the file.
    return isinstance(error, RuntimeError) and "PytorchStreamReader" in str(error)


def unreadable(path: Path | str, error: BaseException) -> UnreadableWeightsError:
    """The one-line error for weights at `path` that failed to load with `error` (see `is_unreadable`)."""
    cause = _cause(error)
    remedy = CODE_REMEDY if cause.startswith(_HOLDS_CODE) else REREAD_REMEDY
    return UnreadableWeightsError(f"cannot read weights {path}: {cause}; {remedy}")


def _cause(error: BaseException) -> str:
    """What is wrong with the file, in a clause: the loader's own words, without torch's weights_only advice."""
    from safetensors import SafetensorError

    if isinstance(error, SafetensorError):
        return f"not a valid safetensors file ({first_line(error)})"
    detail = _refusal_detail(error)
    if detail is not None:
        if "GLOBAL" in detail:
            return f"{_HOLDS_CODE}, which audiodeploy never runs ({detail.rstrip('.')})"
        return f"it is not a PyTorch checkpoint, or is corrupt ({detail.rstrip('.')})"
    quoted = first_sentence(error)
    if isinstance(error, (KeyError, IndexError, EOFError, UnicodeDecodeError)):
        # Their messages are a bare key or nothing: the type says more.
        quoted = type(error).__name__ if not str(error) else f"{type(error).__name__}: {quoted}"
    return f"it is not a PyTorch checkpoint, or is truncated or corrupt ({quoted})"


def _refusal_detail(error: BaseException) -> str | None:
    """What torch's weights-only unpickler refused (e.g. "Unsupported operand 149"), or None for other errors."""
    text = str(error)
    if not text.startswith("Weights only load failed"):
        return None
    kept = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith(_TORCH_ADVICE)]
    return kept[0] if kept else "refused by the weights-only unpickler"


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


def first_sentence(error: BaseException) -> str:
    """The first sentence of an error's first line: torch's zip reader follows it with a paragraph of advice."""
    line = first_line(error)
    return line.split(". ", 1)[0].rstrip(".")

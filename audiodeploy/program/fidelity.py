"""How close a program's outputs are to the reference (fp32 eager): model-free measures.

Each measure takes ``(reference, actual)`` tensors of the same shape and returns a float:

- :func:`output_snr_db`: signal-to-noise ratio of ``actual`` against ``reference``, in dB
  (``10 log10(sum(ref^2) / sum((act - ref)^2))``; infinite when they are equal);
- :func:`max_abs_diff`;
- :func:`frame_argmax_agreement`: for CTC logits ``[..., frames, vocabulary]``, the fraction of
  frames whose most likely token is the same;
- :func:`waveform_snr_db`: the SNR of a waveform, the same formula as :func:`output_snr_db`, named
  for what a vocoder's report should say.

A log-mel distance needs a mel front end, which the lowering core does not have: pass
``log_mel_distance(log_mel)`` with the caller's front end (any callable ``waveform -> log-mel``,
floored as the model's own front end floors it, as vocoder recipes' ``built.mel`` is). It is given one
waveform at a time: the rows of a pool of same-length waveforms are taken one by one.

:func:`measure` pools every input's outputs (flattened to ``[-1, last dim]`` and concatenated), so
an SNR is the energy ratio over all inputs, not a mean of per-input ratios. Outputs whose last
dimensions differ (waveforms of several lengths) are flattened and concatenated instead.

:data:`SNR_FLOORS_DB` is the fidelity below which a quantized program is not what the user asked for
(:func:`below_floor`): 15 dB output SNR for a speech encoder's logits and 15 dB waveform SNR for a vocoder.
What it separates, measured on the tiny models with synthetic weights: wav2vec2 int8-static calibrated on
a one-sample file or a second of silence, -2.8 dB and no frame's argmax kept, on a pure tone 8.6 dB, on
speech-like audio 23 dB; HuBERT int8-dynamic 31 dB; the vocoders calibrated on speech and measured on held-out
speech 20 dB and more (tests/recipes/test_quantized.py). The tiny HiFi-GANs measured on generated signals, as
``export`` measures them, give 10-13 dB even calibrated on speech: under the floor, and said so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch

Measure = Callable[[torch.Tensor, torch.Tensor], float]


def output_snr_db(reference: torch.Tensor, actual: torch.Tensor) -> float:
    reference, actual = _float(reference, actual)
    noise = (actual - reference).pow(2).sum().item()
    signal = reference.pow(2).sum().item()
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def waveform_snr_db(reference: torch.Tensor, actual: torch.Tensor) -> float:
    return output_snr_db(reference, actual)


def max_abs_diff(reference: torch.Tensor, actual: torch.Tensor) -> float:
    reference, actual = _float(reference, actual)
    return (actual - reference).abs().max().item() if reference.numel() else 0.0


def frame_argmax_agreement(reference: torch.Tensor, actual: torch.Tensor) -> float:
    """Fraction of frames (every position but the last dimension) with the same argmax over the last dimension."""
    reference, actual = _float(reference, actual)
    if reference.numel() == 0:
        return 1.0
    return (reference.argmax(-1) == actual.argmax(-1)).double().mean().item()


def log_mel_distance(log_mel: Callable[[torch.Tensor], torch.Tensor]) -> Measure:
    """A measure: mean absolute difference of ``log_mel(waveform)``, the caller's log-mel front end.

    The front end gives the log itself: a vocoder's own one floors the magnitude before its log (1e-5 for
    HiFi-GAN, 1e-7 for Vocos), and a second log here would measure something else.
    """

    def distance(reference: torch.Tensor, actual: torch.Tensor) -> float:
        reference, actual = _float(reference, actual)
        # measure() pools waveforms of one length as rows, one per input: a front end takes one waveform.
        pairs = zip(reference, actual) if reference.dim() == 2 else [(reference, actual)]
        return torch.cat([(log_mel(r) - log_mel(a)).abs().flatten() for r, a in pairs]).mean().item()

    return distance


SNR_FLOORS_DB: Mapping[str, float] = {"snr_db": 15.0, "waveform_snr_db": 15.0}
"""Measure name -> the lowest SNR (dB) a quantized program should keep against fp32; see the module docstring."""


def below_floor(measured: Mapping[str, float], floors: Mapping[str, float] = SNR_FLOORS_DB) -> dict[str, float]:
    """The measures of ``measured`` under their floor (name -> floor): empty when the program is faithful enough.

    A measure without a floor (``max_abs_diff``, whose scale is the model's) is never under one; NaN is.
    """
    return {name: floor for name, floor in floors.items() if name in measured and not measured[name] >= floor}


DEFAULT_MEASURES: Mapping[str, Measure] = {"snr_db": output_snr_db, "max_abs_diff": max_abs_diff}


def measure(
    references: Sequence[torch.Tensor],
    actuals: Sequence[torch.Tensor],
    measures: Mapping[str, Measure] | None = None,
) -> dict[str, float]:
    """Every measure on all outputs pooled: ``references[i]`` and ``actuals[i]`` come from the same input."""
    if len(references) != len(actuals) or not references:
        raise ValueError("measure() takes one reference per actual output, and at least one")
    measures = DEFAULT_MEASURES if measures is None else measures
    same_last = len({tuple(t.shape[-1:]) for t in [*references, *actuals]}) == 1
    reference = torch.cat([_pooled(r, same_last) for r in references])
    actual = torch.cat([_pooled(a, same_last) for a in actuals])
    if reference.shape != actual.shape:
        raise ValueError(f"outputs differ in shape: reference {tuple(reference.shape)}, actual {tuple(actual.shape)}")
    return {name: float(fn(reference, actual)) for name, fn in measures.items()}


def _pooled(tensor: torch.Tensor, rows: bool) -> torch.Tensor:
    """``[-1, last dim]`` when every output has the same last dimension (logits), else flat (waveforms)."""
    tensor = tensor.detach()
    if not rows:
        return tensor.reshape(-1)
    return tensor.reshape(-1, tensor.shape[-1]) if tensor.dim() > 0 else tensor.reshape(1, 1)


def _float(reference: torch.Tensor, actual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if reference.shape != actual.shape:
        raise ValueError(f"outputs differ in shape: reference {tuple(reference.shape)}, actual {tuple(actual.shape)}")
    return reference.detach().double(), actual.detach().double()

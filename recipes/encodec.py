"""EnCodec, Meta's neural codec (`encodec`): 24 kHz mono waveform to codes and back, from transformers'
`EncodecModel` (one program, an ``encode`` and a ``decode`` method: see `_codec`).

Every convolution's weight is computed by `weight_norm`, which the lowering core folds. Its LSTM fixes the length:
`torch.export` unrolls an `nn.LSTM` at the example's length, so a program takes one window (`--seconds`, 1 s by
default) and `run` cuts longer audio into windows of it. The LSTM remembers the whole past, which a window cuts:
windows overlap by 60% by default (`window_overlap`), and a code near a window's start can still differ from one
long eager run's.

The codebooks are running means (``embed``, learnt by EMA) that transformers starts at zero; synthetic weights
draw them. The bandwidth sets the codebooks: 1.5, 3, 6, 12 and 24 kbps use 2, 4, 8, 16 and 32 of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from ._codec import CodecRecipe
from .errors import LengthRangeError, WeightsError
from .registry import register
from .spec import LengthRange, Variant, tiny_variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import EncodecConfig, PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class EncodecArchitecture:
    """transformers `EncodecConfig`'s hyperparameters (24 kHz mono), and the bandwidth encode uses."""

    hidden_size: int
    num_filters: int
    num_lstm_layers: int
    target_bandwidths: tuple[float, ...]
    bandwidth: float
    """kbps: 0.75 kbps per codebook of 1024 entries at 75 frames a second."""

    def tiny(self) -> EncodecArchitecture:
        """Test size: 32 channels, one LSTM layer, two codebooks (1.5 kbps)."""
        return replace(self, hidden_size=32, num_filters=8, num_lstm_layers=1, target_bandwidths=(1.5,), bandwidth=1.5)


# facebook/encodec_24khz: EncodecConfig's defaults.
_24KHZ = EncodecArchitecture(128, 32, 2, (1.5, 3.0, 6.0, 12.0, 24.0), bandwidth=6.0)


def _at(kbps: float) -> Variant[EncodecArchitecture]:
    codebooks = round(kbps / 0.75)
    return Variant(
        name=f"24khz-{kbps:g}kbps",
        description=f"facebook/encodec_24khz at {kbps:g} kbps: {codebooks} codebooks, 75 frames a second",
        checkpoint="facebook/encodec_24khz",
        architecture=replace(_24KHZ, bandwidth=kbps),
    )


SIX = _at(6.0)


@register
class EncodecRecipe(CodecRecipe[EncodecArchitecture]):
    name = "encodec"
    description = "Meta's EnCodec (transformers EncodecModel): 24 kHz mono waveform to codes and back, in windows"
    variants = (
        SIX,
        _at(1.5),
        _at(3.0),
        _at(12.0),
        _at(24.0),
        tiny_variant("tiny", SIX, "test size of '24khz-6kbps': 32 channels, one LSTM layer, two codebooks"),
    )
    sample_rate = 24_000
    default_length_range = LengthRange.fixed(1.0)
    # Each window starts its LSTMs afresh: windows overlap by 60%, 30% of a window of warm-up before what is kept
    # (the tiny model at 0.5 s windows: 2 codes in 494 differ from one long run, decode at 51 dB; a fifth's overlap,
    # the runtime's default, gave 22 codes and 13 dB).
    window_overlap = 0.6
    transformers_model_type = "encodec"
    transformers_model_class_name = "EncodecModel"
    zero_started_codebooks = "embed"

    def transformers_config(self, architecture: EncodecArchitecture) -> EncodecConfig:
        from transformers import EncodecConfig

        return EncodecConfig(
            hidden_size=architecture.hidden_size,
            num_filters=architecture.num_filters,
            num_lstm_layers=architecture.num_lstm_layers,
            target_bandwidths=list(architecture.target_bandwidths),
        )

    def hop_length(self, config: PretrainedConfig) -> int:
        return int(cast("EncodecConfig", config).hop_length)

    def codebooks(self, config: PretrainedConfig, architecture: EncodecArchitecture) -> tuple[int, int]:
        encodec = cast("EncodecConfig", config)
        if architecture.bandwidth not in encodec.target_bandwidths:
            raise WeightsError(
                f"these EnCodec weights take {', '.join(f'{b:g}' for b in encodec.target_bandwidths)} kbps, not the "
                f"variant's {architecture.bandwidth:g}: choose the variant of one of those"
            )
        return int(architecture.bandwidth * 1000 // _bits_per_codebook_second(encodec)), encodec.codebook_size

    def check_length_range(self, length_range: LengthRange, hop: int, sample_rate: int) -> None:
        if length_range.min_seconds != length_range.max_seconds:
            raise LengthRangeError(
                f"length range {length_range}: EnCodec's LSTM is unrolled at one length, so its program takes one "
                "window: give --seconds S (1 s by default); `run` cuts longer audio into windows of it"
            )

    def export_modules(self, model: PreTrainedModel, codebooks: int) -> tuple[nn.Module, nn.Module]:
        from ._modules import EncodecDecode, EncodecEncode

        bandwidth = codebooks * _bits_per_codebook_second(cast("EncodecConfig", model.config)) / 1000
        return EncodecEncode(model, bandwidth), EncodecDecode(model)


def _bits_per_codebook_second(config: EncodecConfig) -> float:
    """What a codebook adds to the bandwidth, in bits a second (750 at 24 kHz): transformers' own count."""
    return math.ceil(math.log2(config.codebook_size)) * config.frame_rate

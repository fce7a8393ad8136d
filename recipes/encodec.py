"""EnCodec, Meta's neural codec (`encodec`): 24 kHz mono or 48 kHz stereo waveform to codes and back, from
transformers' `EncodecModel` (one program, an ``encode`` and a ``decode`` method: see `_codec`).

At 24 kHz every convolution's weight is computed by `weight_norm`, which the lowering core folds. Its LSTM fixes
the length: `torch.export` unrolls an `nn.LSTM` at the example's length, so a program takes one window
(`--seconds`, 1 s by default) and `run` cuts longer audio into windows of it. The LSTM remembers the whole past,
which a window would cut, and the model is causal, so each method carries the LSTM's state from one window to the
next (`_carried_state`): windows overlap by 8 frames (what the convolutions reach back), and give one long run's
codes and audio. A checkpoint whose convolutions are not causal (and that has no chunks) starts its LSTMs afresh
in each window instead: windows overlap by 60% (`window_overlap`), and a code near a window's start can still
differ from one long run's.

At 48 kHz the model runs on its own chunks (1 s long, overlapping by 10 ms: `chunk_length_s`, `overlap`), each
normalized by its loudness, whose scale travels with the codes; its convolutions are group-normalized, not weight-
normed. The program takes one chunk, so the LSTM sees what it sees in transformers, and the codes are eager's
(`audiodeploy.runtime.ChunkedCodec` pads, cuts and overlap-adds as transformers' feature extractor and model do).

The codebooks are running means (``embed``, learnt by EMA) that transformers starts at zero; synthetic weights
draw them. The bandwidth sets the codebooks: at 24 kHz 1.5, 3, 6, 12 and 24 kbps use 2, 4, 8, 16 and 32 of them;
at 48 kHz 3, 6, 12 and 24 kbps use 2, 4, 8 and 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from audiodeploy.program.description import CodecChunks

from ._codec import CodecRecipe
from .errors import LengthRangeError, WeightsError
from .registry import register
from .spec import LengthRange, Variant, tiny_variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import EncodecConfig, EncodecModel, PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class EncodecArchitecture:
    """transformers `EncodecConfig`'s hyperparameters, and the bandwidth encode uses."""

    hidden_size: int
    num_filters: int
    num_lstm_layers: int
    target_bandwidths: tuple[float, ...]
    bandwidth: float
    """kbps: 10 bits per codebook of 1024 entries, at 75 frames a second (24 kHz) or 150 (48 kHz)."""
    sampling_rate: int = 24_000
    audio_channels: int = 1
    normalize: bool = False
    chunk_length_s: float | None = None
    overlap: float | None = None
    norm_type: str = "weight_norm"
    use_causal_conv: bool = True

    def tiny(self) -> EncodecArchitecture:
        """Test size: 32 channels, one LSTM layer, two codebooks; 48 kHz chunks of 0.1 s."""
        chunk = None if self.chunk_length_s is None else 0.1
        return replace(
            self,
            hidden_size=32,
            num_filters=8,
            num_lstm_layers=1,
            target_bandwidths=self.target_bandwidths[:1],
            bandwidth=self.target_bandwidths[0],
            chunk_length_s=chunk,
        )


# facebook/encodec_24khz: EncodecConfig's defaults.
_24KHZ = EncodecArchitecture(128, 32, 2, (1.5, 3.0, 6.0, 12.0, 24.0), bandwidth=6.0)
# facebook/encodec_48khz: what transformers' conversion script sets for it.
_48KHZ = replace(
    _24KHZ,
    target_bandwidths=(3.0, 6.0, 12.0, 24.0),
    sampling_rate=48_000,
    audio_channels=2,
    normalize=True,
    chunk_length_s=1.0,
    overlap=0.01,
    norm_type="time_group_norm",
    use_causal_conv=False,
)


def _at(kbps: float, of: EncodecArchitecture = _24KHZ) -> Variant[EncodecArchitecture]:
    khz = of.sampling_rate // 1000
    frame_rate = of.sampling_rate // 320
    codebooks = round(kbps * 100 / frame_rate)
    what = "mono" if of.audio_channels == 1 else "stereo, in 1 s chunks"
    return Variant(
        name=f"{khz}khz-{kbps:g}kbps",
        description=f"facebook/encodec_{khz}khz at {kbps:g} kbps: {codebooks} codebooks, {frame_rate} frames a second, {what}",
        checkpoint=f"facebook/encodec_{khz}khz",
        architecture=replace(of, bandwidth=kbps),
    )


SIX = _at(6.0)
STEREO_SIX = _at(6.0, _48KHZ)


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
        _at(3.0, _48KHZ),
        STEREO_SIX,
        _at(12.0, _48KHZ),
        _at(24.0, _48KHZ),
        tiny_variant("tiny", SIX, "test size of '24khz-6kbps': 32 channels, one LSTM layer, two codebooks"),
        tiny_variant(
            "tiny-48khz",
            STEREO_SIX,
            "test size of '48khz-6kbps': 32 channels, one LSTM layer, two codebooks, 0.1 s chunks",
        ),
    )
    sample_rate = 24_000
    default_length_range = LengthRange.fixed(1.0)
    # Where each window starts its LSTMs afresh (a checkpoint with convolutions that are not causal): windows overlap
    # by 60%, 30% of a window of warm-up before what is kept (the tiny model at 0.5 s windows: 2 codes in 494 differ
    # from one long run, decode at 51 dB; a fifth's overlap, the runtime's default, gave 22 codes and 13 dB).
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
            sampling_rate=architecture.sampling_rate,
            audio_channels=architecture.audio_channels,
            normalize=architecture.normalize,
            chunk_length_s=architecture.chunk_length_s,
            overlap=architecture.overlap,
            norm_type=architecture.norm_type,
            use_causal_conv=architecture.use_causal_conv,
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

    def chunks(self, config: PretrainedConfig) -> tuple[CodecChunks, LengthRange] | None:
        encodec = cast("EncodecConfig", config)
        if encodec.chunk_length is None:
            if encodec.normalize:
                raise WeightsError(
                    "this EnCodec normalizes the loudness of its whole input at once (normalize without "
                    "chunk_length_s), which windows of audio cannot reproduce: give a checkpoint that sets both or "
                    "neither"
                )
            return None
        if encodec.chunk_stride is None:
            raise WeightsError(
                "this EnCodec sets chunk_length_s without overlap, which transformers cannot run either: give a "
                "checkpoint whose config.json sets both"
            )
        if encodec.chunk_length % encodec.hop_length:
            raise WeightsError(
                f"this EnCodec's chunks of {encodec.chunk_length} samples are not whole frames of "
                f"{encodec.hop_length}: give a checkpoint whose chunk_length_s is a whole number of frames"
            )
        seconds = encodec.chunk_length / encodec.sampling_rate
        return CodecChunks(stride=encodec.chunk_stride, scaled=bool(encodec.normalize)), LengthRange.fixed(seconds)

    def check_length_range(self, length_range: LengthRange, hop: int, sample_rate: int) -> None:
        if length_range.min_seconds != length_range.max_seconds:
            raise LengthRangeError(
                f"length range {length_range}: EnCodec's LSTM is unrolled at one length, so its program takes one "
                "window: give --seconds S (1 s by default); `run` cuts longer audio into windows of it"
            )

    def export_modules(self, model: PreTrainedModel, codebooks: int) -> tuple[nn.Module, nn.Module]:
        from ._carried_state import EncodecDecodeCarried, EncodecEncodeCarried
        from ._modules import EncodecDecodeChunk, EncodecEncodeChunk

        config = cast("EncodecConfig", model.config)
        bandwidth = codebooks * _bits_per_codebook_second(config) / 1000
        if config.chunk_length is not None:
            return EncodecEncodeChunk(model, bandwidth), EncodecDecodeChunk(model)
        if config.use_causal_conv:
            return EncodecEncodeCarried(model, bandwidth), EncodecDecodeCarried(model)
        # Its convolutions also look ahead, past a window's end: each window starts its LSTMs afresh.
        return _whole_input_modules(model, bandwidth)

    def long_run_modules(self, model: PreTrainedModel, codebooks: int) -> tuple[nn.Module, nn.Module] | None:
        config = cast("EncodecConfig", model.config)
        bandwidth = codebooks * _bits_per_codebook_second(config) / 1000
        if config.chunk_length is not None:
            from ._modules import EncodecDecodeChunks, EncodecEncodeChunks

            encodec = cast("EncodecModel", model)
            return EncodecEncodeChunks(encodec, bandwidth), EncodecDecodeChunks(encodec)
        if not config.use_causal_conv:
            return None
        return _whole_input_modules(model, bandwidth)


def _whole_input_modules(model: PreTrainedModel, bandwidth: float) -> tuple[nn.Module, nn.Module]:
    """transformers' own encode (at `bandwidth` kbps) and decode of a whole input."""
    from ._modules import EncodecDecode, EncodecEncode

    return EncodecEncode(cast("EncodecModel", model), bandwidth), EncodecDecode(cast("EncodecModel", model))


def _bits_per_codebook_second(config: EncodecConfig) -> float:
    """What a codebook adds to the bandwidth, in bits a second (750 at 24 kHz): transformers' own count."""
    return math.ceil(math.log2(config.codebook_size)) * config.frame_rate

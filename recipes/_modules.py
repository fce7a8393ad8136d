"""The export wrappers: the `nn.Module`s a recipe builds around a library model, with the program's input and output.

They subclass torch's `nn.Module`, so they live apart from the declarations: a recipe's build imports this
module, and declaring or listing recipes does not import torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from transformers import DacModel, EncodecModel, MimiModel, SpeechT5HifiGan, UnivNetModel


# Speech encoders (wav2vec2, HuBERT, WavLM and their kin): waveform in, the head's output out.


def _normalize(waveform: torch.Tensor) -> torch.Tensor:
    # transformers' Wav2Vec2FeatureExtractor.zero_mean_unit_var_norm: population variance, epsilon 1e-7.
    mean = waveform.mean(dim=-1, keepdim=True)
    variance = waveform.var(dim=-1, keepdim=True, correction=0)
    return (waveform - mean) / torch.sqrt(variance + 1e-7)


class _WaveformEncoder(nn.Module):
    """`(1, samples)` float32 waveform → the output of `model` (a speech encoder with its head).

    Normalizes the waveform first when the checkpoint expects it, so the exported program takes raw audio.
    """

    def __init__(self, model: nn.Module, normalize_waveform: bool) -> None:
        super().__init__()
        self.model = model
        self.normalize_waveform = normalize_waveform

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        if self.normalize_waveform:
            waveform = _normalize(waveform)
        return self.encode(waveform)

    def encode(self, waveform: torch.Tensor) -> torch.Tensor:
        """The model's output for the (normalized) waveform."""
        raise NotImplementedError


class TransformersEncoder(_WaveformEncoder):
    """`(1, samples)` float32 waveform → one output of a transformers speech encoder, named by `output_name`:
    ``logits`` of a `*ForCTC`, `*ForSequenceClassification` or `*ForAudioFrameClassification`, ``embeddings`` of a
    `*ForXVector`, ``last_hidden_state`` of the base model."""

    def __init__(self, model: nn.Module, normalize_waveform: bool, output_name: str = "logits") -> None:
        super().__init__(model, normalize_waveform)
        self.output_name = output_name

    def encode(self, waveform: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = getattr(self.model(input_values=waveform), self.output_name)
        return output


class TorchaudioCtc(_WaveformEncoder):
    """`(1, samples)` float32 waveform → `(1, frames, vocabulary)` logits through a torchaudio `Wav2Vec2Model`."""

    def encode(self, waveform: torch.Tensor) -> torch.Tensor:
        logits, _ = self.model(waveform)
        return logits


class FbankEncoder(nn.Module):
    """`(1, rows, stride * mel_bins)` stacked log-mel filterbank, unnormalized → one output of a transformers speech
    encoder that takes `input_features` (wav2vec2-bert), named by `output_name`.

    The per-utterance normalization of transformers' `SeamlessM4TFeatureExtractor` happens here, on the program's
    input: each mel bin's mean and variance (`correction=1`, epsilon 1e-7) over every frame of the input (a row
    holds `stride` frames). Done in the program rather than in the runtime, the program takes what the model-free
    front end computes (`audiodeploy.program.mel.Fbank`) and nothing else, as a waveform encoder takes raw samples;
    a recording longer than the program takes is normalized window by window, over at least the program's shortest
    input, where the extractor normalizes over the whole recording. The cost is two reductions over the input.
    """

    def __init__(self, model: nn.Module, mel_bins: int, output_name: str = "logits") -> None:
        super().__init__()
        self.model = model
        self.mel_bins = mel_bins
        self.output_name = output_name

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        batch, rows, size = features.shape
        # (1, rows, stride, bins): one dynamic axis, so that the view is one XNNPACK reshape.
        frames = features.reshape(batch, rows, size // self.mel_bins, self.mel_bins)
        mean = frames.mean(dim=(1, 2), keepdim=True)
        variance = frames.var(dim=(1, 2), keepdim=True, correction=1)
        normalized = ((frames - mean) / torch.sqrt(variance + 1e-7)).reshape(batch, rows, size)
        output: torch.Tensor = getattr(self.model(input_features=normalized), self.output_name)
        return output


# Vocoders (HiFi-GAN, UnivNet): log-mel in, waveform out.


class SpeechT5HifiGanWaveform(nn.Module):
    """`(1, frames, mel_bins)` log-mel → `(1, frames * hop_length)` waveform through `SpeechT5HifiGan`."""

    def __init__(self, model: SpeechT5HifiGan) -> None:
        super().__init__()
        self.model = model

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.model(mel)


class UnivNetWaveform(nn.Module):
    """`(1, frames, mel_bins)` log-mel → `(1, frames * hop_length)` waveform through `UnivNetModel`.

    `noise` is `(1, max_frames, noise_channels)`; each call uses its first `frames` vectors.
    """

    noise: torch.Tensor

    def __init__(self, model: UnivNetModel, noise: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("noise", noise)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        noise = self.noise[:, : mel.shape[1]]
        waveform, _ = self.model(input_features=mel, noise_sequence=noise, return_dict=False)
        return waveform


# Codecs: one program with an encode and a decode method, codes laid out as frames of codebooks (as a mel is frames
# of bins), so that both are cut into windows along their second axis like every other program's frames.


class DacEncode(nn.Module):
    """`(1, samples)` float32 waveform → `(1, frames, codebooks)` int64 codes of transformers' `DacModel`."""

    def __init__(self, model: DacModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        codes: torch.Tensor = self.model.encode(waveform[:, None], return_dict=True).audio_codes
        return codes.transpose(1, 2)


class DacDecode(nn.Module):
    """`(1, frames, codebooks)` int64 codes → `(1, frames * hop)` float32 waveform of transformers' `DacModel`.

    An upsampling by an odd rate (5, at 16 and 24 kHz) gives one sample fewer than rate times its input: 8 fewer
    in all at 16 kHz. They are zeros here, at the end, so that a frame decodes to `hop` samples wherever it is (a
    window of a long input lines up with the next) and audio comes back as long as it went in, as the original
    codec restores it."""

    def __init__(self, model: DacModel) -> None:
        super().__init__()
        self.model = model
        self.hop = math.prod(model.config.downsampling_ratios)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        waveform: torch.Tensor = self.model.decode(audio_codes=codes.transpose(1, 2), return_dict=True).audio_values
        return nn.functional.pad(waveform, (0, codes.shape[1] * self.hop - waveform.shape[-1]))


class MimiEncode(nn.Module):
    """`(1, samples)` float32 waveform → `(1, frames, codebooks)` int64 codes of transformers' `MimiModel`, from
    its first `codebooks` quantizers."""

    def __init__(self, model: MimiModel, codebooks: int) -> None:
        super().__init__()
        self.model = model
        self.codebooks = codebooks

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        codes: torch.Tensor = self.model.encode(waveform[:, None], num_quantizers=self.codebooks).audio_codes
        return codes.transpose(1, 2)


class MimiDecode(nn.Module):
    """`(1, frames, codebooks)` int64 codes → `(1, frames * hop)` float32 waveform of transformers' `MimiModel`."""

    def __init__(self, model: MimiModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        waveform: torch.Tensor = self.model.decode(codes.transpose(1, 2)).audio_values
        return waveform[:, 0]


class EncodecEncode(nn.Module):
    """`(1, samples)` float32 waveform → `(1, frames, codebooks)` int64 codes of transformers' `EncodecModel` at
    `bandwidth` kbps (mono, unchunked: one frame every hop samples)."""

    def __init__(self, model: EncodecModel, bandwidth: float) -> None:
        super().__init__()
        self.model = model
        self.bandwidth = bandwidth

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        codes: torch.Tensor = self.model.encode(waveform[:, None], bandwidth=self.bandwidth).audio_codes[0]
        return codes.transpose(1, 2)


class EncodecEncodeChunk(nn.Module):
    """One chunk `(1, channels, samples)` float32 → `(1, frames, codebooks)` int64 codes at `bandwidth` kbps and,
    for a normalizing model, the chunk's scale `(1, 1)`: transformers' `EncodecModel` at 48 kHz, one chunk.

    It calls the model's own per-chunk step (`_encode_frame`): `encode` loops over chunks in Python on the input's
    length, and also encodes the sliver after the last whole chunk, which the runtime leaves out
    (`audiodeploy.runtime.ChunkedCodec`)."""

    def __init__(self, model: EncodecModel, bandwidth: float) -> None:
        super().__init__()
        self.model = model
        self.bandwidth = bandwidth

    def forward(self, chunk: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        codes, scale = self.model._encode_frame(chunk, self.bandwidth)
        if scale is None:
            return codes.transpose(1, 2)
        return codes.transpose(1, 2), scale


class EncodecDecodeChunk(nn.Module):
    """One chunk's `(1, frames, codebooks)` int64 codes (and, for a normalizing model, its `(1, 1)` scale) →
    `(1, channels, frames * hop)` float32: transformers' `EncodecModel._decode_frame`, the step its `decode` runs on
    each chunk before overlap-adding them (which the runtime does)."""

    def __init__(self, model: EncodecModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, codes: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        waveform: torch.Tensor = self.model._decode_frame(codes.transpose(1, 2), scale)
        return waveform


class EncodecEncodeChunks(nn.Module):
    """`(1, channels, samples)` float32 → transformers' own encode over its chunks, as its feature extractor pads
    the audio to whole chunks: `(chunks, 1, codebooks, frames)` int64 codes and `(chunks, 1)` float32 scales (ones
    for a model that does not normalize). The eager reference of `EncodecEncodeChunk`'s programs on long audio."""

    def __init__(self, model: EncodecModel, bandwidth: float) -> None:
        super().__init__()
        self.model = model
        self.bandwidth = bandwidth

    def forward(self, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        config = self.model.config
        samples = audio.shape[-1]
        # EncodecFeatureExtractor's padding: whole chunks, every `chunk_stride` samples.
        padded = (math.ceil(samples / config.chunk_stride) - 1) * config.chunk_stride + config.chunk_length
        mask = torch.cat([torch.ones(1, samples), torch.zeros(1, padded - samples)], dim=1).long()
        encoded = self.model.encode(nn.functional.pad(audio, (0, padded - samples)), mask, bandwidth=self.bandwidth)
        scales = [torch.ones(1, 1) if s is None else s.reshape(1, 1) for s in encoded.audio_scales]
        return encoded.audio_codes, torch.cat(scales)


class EncodecDecodeChunks(nn.Module):
    """What `EncodecEncodeChunks` gives → transformers' own decode of every chunk, overlap-added: `(1, channels,
    padded samples)`, the padding after the audio included."""

    def __init__(self, model: EncodecModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        chunk_scales = [scale.reshape(1, 1) for scale in scales] if self.model.config.normalize else [None] * len(codes)
        waveform: torch.Tensor = self.model.decode(codes, chunk_scales).audio_values
        return waveform


class EncodecDecode(nn.Module):
    """`(1, frames, codebooks)` int64 codes → `(1, frames * hop)` float32 waveform of transformers' `EncodecModel`."""

    def __init__(self, model: EncodecModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        waveform: torch.Tensor = self.model.decode(codes.transpose(1, 2)[None], [None]).audio_values
        return waveform[:, 0]

"""Bring your own model: transformers' audio models, as a user would lower them, stock ExecuTorch vs audiodeploy.

Each model of issue 22's table, each other transformers audio model with ``weight_norm`` (UnivNet,
WavTokenizer, X-Codec, Higgs Audio v2's tokenizer, Pocket TTS's audio tokenizer), and speech encoders without one
that a user brings the same way (Parakeet's and LASR's CTC models, Moonshine's encoder), is built from its
transformers class with a small configuration (hidden 32, 2 layers, 2 heads, intermediate 64, a 32-channel feature encoder where
it has one; seeded random weights), wrapped so that ``forward`` takes one tensor and returns one, and lowered at a
dynamic length twice, as the README tells a user:

- ``stock``: ``audiodeploy.lower(module, (x,), dynamic_shapes=..., options=audiodeploy.LoweringOptions(fold=False))``,
  stock ExecuTorch lowering to XNNPACK;
- ``audiodeploy``: ``audiodeploy.lower(module, (x,), dynamic_shapes=...)``, the default options.

Each program is loaded with ``audiodeploy.runtime.Program(lowered.buffer)`` and run at two lengths of the range,
the example's and another, and compared with eager PyTorch. Models whose attention goes through transformers'
attention interface are measured twice: with the default attention (``sdpa``) and with
``attn_implementation="eager"``. Nothing is timed but the lowering: the machine's load does not matter here.

Per lowering the record holds: whether it lowered and ran (else the error's first line, where it was raised and the
traceback's last frames), delegates and ops outside them (``lowered.report.methods["forward"]``), folds, GEMMs not
delegated with their reasons, program bytes, lowering seconds, and per length the output shape and the max abs diff
vs eager beside eager's max abs output (for integer outputs, codec codes, also the fraction of codes that differ).

Lengths: waveform models 0.5-4 s at their sampling rate, in multiples of their hop (``320 * Dim("frames", ...)``
for the speech encoders, whose feature encoder strides 320 samples at 16 kHz); codec decoders the frames of the
same range; vocoders 10-100 frames. Run from the repository root::

    python benchmarks/bring_your_own_model.py                        # every model, 20-40 minutes on 2 cores
    python benchmarks/bring_your_own_model.py --only Wav2Vec2ForCTC --only EncodecModel --out /tmp/byom.json
    python benchmarks/bring_your_own_model.py --list

``--only`` takes a name as ``--list`` prints it, or its part before a ``.`` or ``-`` (``EncodecModel`` is its
encode and decode, ``Wav2Vec2ConformerForCTC`` both position embeddings); case-insensitive. The record goes to
``benchmarks/results/bring-your-own-model.json`` unless ``--out`` says otherwise, and the printed table beside it
(``.txt``). The record is written again after each model, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import logging
import math
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import transformers
from torch.export import Dim

import audiodeploy
from audiodeploy._files import atomic_write_text
from audiodeploy.bench.results import ops, size
from audiodeploy.bench.timing import machine_info, set_threads
from audiodeploy.runtime import Program

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = "audiodeploy.bring-your-own-model/1"
LOWERINGS = {
    "stock": audiodeploy.LoweringOptions(fold=False),
    "audiodeploy": audiodeploy.LoweringOptions(),
}
PACKAGES = ("torch", "executorch", "transformers", "torchao", "torchaudio", "numpy", "audiodeploy")
TRACEBACK_FRAMES = 6
"""How many of a failure's innermost traceback frames the record keeps."""
NOTE_CHARS = 240
"""Where the table cuts an error line (symbolic sizes make some of torch.export's very long)."""

# The small configuration of every speech encoder (the brief's sizes); each family adds its feature encoder.
ENCODER_LAYERS = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
ENCODER = {"vocab_size": 32, **ENCODER_LAYERS}
WAV2VEC2_FEATURE_ENCODER = {"conv_dim": (32,) * 7}  # wav2vec2's 7 convolutions (kernels 10,3,3,3,3,2,2), 320 samples
RELATIVE_SHIFT_OUTSIDE = {"hidden_size": 64, "num_attention_heads": 16, "intermediate_size": 64}
SEW_FEATURE_ENCODER = {"conv_dim": (32,) * 13}  # SEW's 13 convolutions (WFE-C), the same 320-sample stride


# --- the wrappers: one tensor in, one tensor out ----------------------------------------------------------------


class OneTensor(torch.nn.Module):
    """``forward(x)`` is ``call(model, x)``: a transformers model as one tensor in, one tensor out."""

    def __init__(self, model: torch.nn.Module, call: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.call = call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.call(self.model, x)


def ctc_logits(model, x):
    return model(input_values=x).logits


def ctc_logits_of_features(model, x):
    return model(input_features=x).logits


def encoder_states(model, x):
    return model.encoder(x).last_hidden_state


def encodec_encode(model, x):
    return model.encode(x).audio_codes[0]  # (1 chunk, batch, codebooks, frames) -> (batch, codebooks, frames)


def encodec_decode(model, codes):
    return model.decode(codes[None], [None]).audio_values


def dac_encode(model, x):
    return model.encode(x).audio_codes


def dac_decode(model, codes):
    return model.decode(audio_codes=codes).audio_values


def mimi_encode(model, x):
    return model.encode(x).audio_codes


def mimi_decode(model, codes):
    return model.decode(codes).audio_values


def vocode(model, mel):
    return model(mel)


def univnet_vocode(model, mel_and_noise):
    """UnivNet takes its Gaussian noise as an input beside the mel frames: one tensor (batch, mel bins + noise
    channels, frames), which UnivNet's own layout (batch, frames, channels) of each is a transpose of."""
    mel, noise = mel_and_noise.split([model.config.num_mel_bins, model.config.model_in_channels], dim=1)
    return model(input_features=mel.transpose(1, 2), noise_sequence=noise.transpose(1, 2)).waveforms


def audio_codes(model, x):
    return model.encode(x).audio_codes


def audio_values(model, codes):
    return model.decode(codes).audio_values


def latents(model, x):
    return model.encode(x).latents


# --- the cases ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Length:
    """The dynamic axis: ``unit * Dim(name, min=low, max=high)`` (``unit`` 1: the Dim itself)."""

    low: int
    high: int
    example: int
    other: int
    unit: int = 1
    name: str = "frames"

    @property
    def fixed(self) -> bool:
        """One length only: lowered without a Dim (a model that fixes its length, run in windows of it)."""
        return self.low == self.high

    def dim(self) -> Any:
        if self.fixed:
            return None
        d = Dim(self.name, min=self.low, max=self.high)
        return d if self.unit == 1 else self.unit * d

    def describe(self) -> str:
        span = f"{self.name} = {self.low}" if self.fixed else f"{self.name} in [{self.low}, {self.high}]"
        return span if self.unit == 1 else f"{self.unit} * {span}"


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    """``encoder``, ``codec`` or ``vocoder``."""
    model_class: str
    """The transformers class built."""
    config: dict[str, Any]
    """The arguments given to the config class; everything else keeps transformers' defaults."""
    call: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
    input_shape: tuple[int, ...]
    """With -1 at the dynamic axis (in ``length.unit`` steps)."""
    length: Length
    input_kind: str
    """``waveform``, ``features``, ``mel`` or ``codes``."""
    attention: bool = False
    """Its attention goes through transformers' attention interface: measured with sdpa and with eager."""
    submodule: str | None = None
    """Lower this attribute of the built model (VITS's ``decoder``) instead of the model."""
    sampling_rate: int | None = None
    notes: str = ""
    config_class: str | None = None
    """The config class, where the model class has no ``config_class`` (SeamlessM4T's HiFi-GAN)."""

    @property
    def axis(self) -> int:
        return self.input_shape.index(-1)

    def shape_at(self, units: int) -> tuple[int, ...]:
        return tuple(units * self.length.unit if s == -1 else s for s in self.input_shape)

    def seconds(self, units: int) -> float | None:
        """Audio seconds of an input ``units`` long (waveforms only)."""
        if self.input_kind != "waveform" or self.sampling_rate is None:
            return None
        return units * self.length.unit / self.sampling_rate


def _waveform_length(
    hop: int, sampling_rate: int, example_s: float = 1.0, other_s: float = 3.5, low_s: float = 0.5
) -> Length:
    """``low_s``-4 s in multiples of ``hop`` samples; the example about ``example_s``, the other about ``other_s``,
    odd."""
    low, high = math.ceil(low_s * sampling_rate / hop), math.floor(4 * sampling_rate / hop)
    other = round(other_s * sampling_rate / hop) | 1
    return Length(low, high, example=round(example_s * sampling_rate / hop), other=other, unit=hop)


def _codes_length(hop: int, sampling_rate: int) -> Length:
    """The frames of a codec's 0.5-4 s."""
    samples = _waveform_length(hop, sampling_rate)
    return Length(samples.low, samples.high, samples.example, samples.other)


SPEECH = _waveform_length(320, 16_000)  # 25-200 frames of 320 samples; 50 (1 s) and 175 (3.5 s)
FEATURES = Length(25, 200, example=50, other=175)  # Wav2Vec2-BERT's 50 feature frames a second
MEL = Length(6, 50, example=13, other=43, unit=8)  # 100 mel frames a second, 8 to an encoder frame: 0.5-4 s
MOONSHINE_SPEECH = _waveform_length(384, 16_000)  # Moonshine's convolutions stride 384 samples
VOCODER = Length(10, 100, example=50, other=87)

ENCODEC_WINDOW = Length(38, 38, example=38, other=38)
"""Half a second at 24 kHz: 38 frames, of 320 samples each for encode (each case keeps its unit) and of codes for
decode; its LSTM fixes the length. (With encode's unit, decode's window was 12,160 frames of codes: an LSTM unrolled
that far took more than 20 minutes to lower.)"""
ENCODEC_WINDOW_NOTES = "at one window length: torch.export unrolls its nn.LSTM at the example's length"
ENCODEC = {"hidden_size": 32, "num_filters": 8, "num_lstm_layers": 1, "target_bandwidths": [1.5]}  # 2 codebooks
# Three encoder and decoder blocks of stride 8 instead of the published 2, 4, 8, 8: the same 512-sample hop, and each
# lowering under a minute here (with four blocks, stock lowering took 57 s, most of it XNNPACK's preprocessing of its
# 31 delegates).
DAC = {
    "encoder_hidden_size": 8,
    "downsampling_ratios": [8, 8, 8],
    "decoder_hidden_size": 64,
    "n_codebooks": 2,
    "codebook_size": 64,
    "codebook_dim": 8,
}
_MIMI_LAYERS = {  # Mimi's, and Pocket TTS's tokenizer's, convolutions and transformer
    "hidden_size": 32,
    "num_filters": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
}
MIMI = {
    **_MIMI_LAYERS,
    "codebook_size": 64,
    "codebook_dim": 32,
    "vector_quantization_hidden_dimension": 32,
    "num_quantizers": 2,
    "upsample_groups": 32,
}
HIFIGAN = {"upsample_initial_channel": 32}
VITS = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "ffn_dim": 64,
    "flow_size": 32,
    "spectrogram_bins": 65,
    "duration_predictor_filter_channels": 32,
    "prior_encoder_num_wavenet_layers": 2,
    "posterior_encoder_num_wavenet_layers": 2,
    "upsample_initial_channel": 32,
}
UNIVNET = {
    "model_hidden_channels": 16,
    "model_in_channels": 16,
    "kernel_predictor_hidden_channels": 16,
    "num_mel_bins": 20,
}
WAVTOKENIZER = {  # the published 600-sample hop (strides 6, 5, 5, 4) and n_fft 2400 of its ISTFT head
    "num_filters": 8,
    "hidden_size": 32,
    "num_lstm_layers": 1,
    "codebook_size": 64,
    "codebook_dim": 32,
    "decoder_hidden_size": 32,
    "decoder_intermediate_size": 64,
    "decoder_num_layers": 2,
    "decoder_attention_num_groups": 8,
}
FLOAT_LENGTH_WINDOW = Length(50, 50, example=50, other=50)
FLOAT_LENGTH_NOTES = (
    "at one length (50 frames): it computes its convolutions' output length in floating point "
    "(`int((L - 1) / stride + 1)`, a resampled length), which torch.export fixes at the example's"
)
WAVTOKENIZER_WINDOW = Length(20, 20, example=20, other=20)
"""Half a second at 24 kHz, 20 frames of 600 samples: its encoder's nn.LSTM fixes the length, as EnCodec's does."""
_SEMANTIC_HUBERT = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "conv_dim": (32,) * 7,
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
}
_ACOUSTIC_DAC = {
    "encoder_hidden_size": 8,
    "decoder_hidden_size": 64,
    "hidden_size": 32,
    "n_codebooks": 2,
    "codebook_size": 64,
    "codebook_dim": 8,
}
# X-Codec: a DAC beside a HuBERT at 16 kHz, both 320 samples a frame.
XCODEC = {
    "acoustic_model_config": {**_ACOUSTIC_DAC, "downsampling_ratios": [8, 5, 4, 2], "upsampling_ratios": [8, 5, 4, 2]},
    "semantic_model_config": _SEMANTIC_HUBERT,
    "codebook_size": 64,
}
XCODEC_CODEBOOKS = 13  # its 4 kbps at 50 frames a second of 6-bit codes (Higgs' too)
# Higgs Audio v2's tokenizer: the same at 24 kHz, 480 samples a frame, its HuBERT reading the audio resampled to 16 kHz.
HIGGS_AUDIO_V2_TOKENIZER = {
    **XCODEC,
    "acoustic_model_config": {**_ACOUSTIC_DAC, "downsampling_ratios": [8, 5, 4, 3], "upsampling_ratios": [8, 5, 4, 3]},
}
# Pocket TTS's audio tokenizer: Mimi's layers, latents instead of codes; 1920 samples a frame.
POCKET_TTS_TOKENIZER = {**_MIMI_LAYERS, "upsample_groups": 32, "latent_dim": 8}
SEAMLESS_M4T_VOCODER = {
    # SeamlessM4THifiGan takes (batch, unit + language + speaker embedding dims, frames); the rest of the
    # configuration (the translation model) is shrunk only so that the config is small, never built.
    "unit_embed_dim": 16,
    "lang_embed_dim": 8,
    "spkr_embed_dim": 8,
    "upsample_initial_channel": 32,
    "hidden_size": 32,
    "vocab_size": 100,
    "t2u_vocab_size": 100,
    "unit_hifi_gan_vocab_size": 100,
}


def _ctc(
    name: str,
    config: dict[str, Any],
    notes: str = "",
    attention: bool = True,
    call: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = ctc_logits,
    length: Length = SPEECH,
) -> Case:
    """A speech encoder of 16 kHz waveforms: the class is the name's part before a ``-`` or a ``.``."""
    return Case(
        name=name,
        group="encoder",
        model_class=name.split("-")[0].split(".")[0],
        config=config,
        call=call,
        input_shape=(1, -1),
        length=length,
        input_kind="waveform",
        attention=attention,
        sampling_rate=16_000,
        notes=notes,
    )


def _window(case: Case, length: Length, notes: str) -> Case:
    """``case`` at the one length of ``length``, in ``case``'s unit: a model that fixes its length."""
    return replace(case, name=f"{case.name}-window", length=replace(length, unit=case.length.unit), notes=notes)


def _encode_window_decode(
    model_class: str,
    config: dict[str, Any],
    hop: int,
    rate: int,
    codebooks: int,
    window: tuple[Length, str] = (FLOAT_LENGTH_WINDOW, FLOAT_LENGTH_NOTES),
    decode_notes: str = "",
) -> tuple[Case, Case, Case]:
    """A codec that fixes its encoder's length: ``encode`` at a dynamic length (which fails), at the one length of
    ``window`` (with its notes), and ``decode`` (``model.encode(x).audio_codes``, ``model.decode(codes)``)."""
    encode = _codec(f"{model_class}.encode", config, audio_codes, hop=hop, rate=rate, codebooks=codebooks)
    decode = _codec(
        f"{model_class}.decode", config, audio_values, hop=hop, rate=rate, codebooks=codebooks, notes=decode_notes
    )
    return encode, _window(encode, *window), decode


def _codec(
    name: str,
    config: dict[str, Any],
    call,
    hop: int,
    rate: int,
    codebooks: int,
    attention=False,
    example_s: float = 1.0,
    low_s: float = 0.5,
    notes: str = "",
) -> Case:
    model_class, method = name.split(".")
    if method == "encode":
        shape, length, kind = (1, 1, -1), _waveform_length(hop, rate, example_s, low_s=low_s), "waveform"
    else:
        shape, length, kind = (1, codebooks, -1), _codes_length(hop, rate), "codes"
    return Case(
        name, "codec", model_class, config, call, shape, length, kind, attention, sampling_rate=rate, notes=notes
    )


CASES: tuple[Case, ...] = (
    _ctc("Wav2Vec2ForCTC", {**ENCODER, **WAV2VEC2_FEATURE_ENCODER}),
    _ctc("UniSpeechForCTC", {**ENCODER, **WAV2VEC2_FEATURE_ENCODER}),
    _ctc("UniSpeechSatForCTC", {**ENCODER, **WAV2VEC2_FEATURE_ENCODER}),
    _ctc("Data2VecAudioForCTC", {**ENCODER, **WAV2VEC2_FEATURE_ENCODER}),
    _ctc("SEWForCTC", {**ENCODER, **SEW_FEATURE_ENCODER}),
    _ctc("SEWDForCTC", {**ENCODER, **SEW_FEATURE_ENCODER}, "disentangled attention of its own", attention=False),
    _ctc(
        "Wav2Vec2ConformerForCTC-relative",
        {**ENCODER, **WAV2VEC2_FEATURE_ENCODER, "position_embeddings_type": "relative"},
    ),
    _ctc(
        "Wav2Vec2ConformerForCTC-relative-16-heads",
        {**ENCODER, **WAV2VEC2_FEATURE_ENCODER, "position_embeddings_type": "relative", **RELATIVE_SHIFT_OUTSIDE},
        "16 heads of 4 features: the sinusoid products would cost 16 times the scores' (rel-pos-large's 16 heads "
        "of 64: 8 times), so the relative shift stays outside the delegate",
    ),
    _ctc(
        "Wav2Vec2ConformerForCTC-rotary",
        {**ENCODER, **WAV2VEC2_FEATURE_ENCODER, "position_embeddings_type": "rotary"},
    ),
    Case(
        name="Wav2Vec2BertForCTC",
        group="encoder",
        model_class="Wav2Vec2BertForCTC",
        config={**ENCODER, "feature_projection_input_dim": 160},
        call=ctc_logits_of_features,
        input_shape=(1, -1, 160),
        length=FEATURES,
        input_kind="features",
        attention=True,
    ),
    *(
        Case(
            name=name,
            group="encoder",
            model_class=name,
            config={"vocab_size": 32, "encoder_config": {**ENCODER_LAYERS, "num_mel_bins": 80, **extra}},
            call=ctc_logits_of_features,
            input_shape=(1, -1, 80),
            length=MEL,
            input_kind="features",
            attention=True,
            notes="no weight norm: a speech encoder a user brings (log-mel frames in, characters out)",
        )
        for name, extra in (
            ("ParakeetForCTC", {"subsampling_conv_channels": 16, "conv_kernel_size": 9}),
            ("LasrForCTC", {}),
        )
    ),
    _ctc(
        "MoonshineModel.encoder",
        {
            "vocab_size": 32,
            "hidden_size": 32,
            "intermediate_size": 64,
            "encoder_num_hidden_layers": 2,
            "decoder_num_hidden_layers": 1,
            "encoder_num_attention_heads": 2,
            "decoder_num_attention_heads": 2,
        },
        "no weight norm: the encoder of a speech-to-text model (partial, interleaved rotary embeddings)",
        call=encoder_states,
        length=MOONSHINE_SPEECH,
    ),
    _codec("EncodecModel.encode", ENCODEC, encodec_encode, hop=320, rate=24_000, codebooks=2),
    _codec("EncodecModel.decode", ENCODEC, encodec_decode, hop=320, rate=24_000, codebooks=2),
    *(
        _window(case, ENCODEC_WINDOW, ENCODEC_WINDOW_NOTES)
        for case in (
            _codec("EncodecModel.encode", ENCODEC, encodec_encode, hop=320, rate=24_000, codebooks=2),
            _codec("EncodecModel.decode", ENCODEC, encodec_decode, hop=320, rate=24_000, codebooks=2),
        )
    ),
    _codec("DacModel.encode", DAC, dac_encode, hop=512, rate=16_000, codebooks=2),
    _codec("DacModel.decode", DAC, dac_decode, hop=512, rate=16_000, codebooks=2),
    _codec(
        "MimiModel.encode",
        MIMI,
        mimi_encode,
        hop=1920,
        rate=24_000,
        codebooks=2,
        attention=True,
        example_s=3.0,
        low_s=2.1,
        # torch's cdist takes another algorithm for 25 rows or fewer, and export keeps the example's branch.
        notes="exported from 3 s: torch.cdist branches on more than 25 frames, so the program holds above 2.08 s",
    ),
    _codec("MimiModel.decode", MIMI, mimi_decode, hop=1920, rate=24_000, codebooks=2, attention=True),
    Case("SpeechT5HifiGan", "vocoder", "SpeechT5HifiGan", HIFIGAN, vocode, (1, -1, 80), VOCODER, "mel"),
    Case(
        "FastSpeech2ConformerHifiGan",
        "vocoder",
        "FastSpeech2ConformerHifiGan",
        HIFIGAN,
        vocode,
        (1, -1, 80),
        VOCODER,
        "mel",
    ),
    Case(
        "VitsModel.decoder",
        "vocoder",
        "VitsModel",
        VITS,
        vocode,
        (1, VITS["flow_size"], -1),
        VOCODER,
        "mel",
        submodule="decoder",
        notes="the HiFi-GAN of VITS alone, on latent frames (batch, flow_size, frames)",
    ),
    Case(
        "VitsModel.flow",
        "vocoder",
        "VitsModel",
        VITS,
        # As text-to-speech runs it, on one utterance: reversed, its padding mask all ones, made from the latents.
        lambda flow, z: flow(z, torch.ones_like(z[:, :1]), global_conditioning=None, reverse=True),
        (1, VITS["flow_size"], -1),
        VOCODER,
        "mel",
        submodule="flow",
        notes="VITS's flow reversed, on latent frames (batch, flow_size, frames), before the decoder",
    ),
    Case(
        "SeamlessM4THifiGan",
        "vocoder",
        "SeamlessM4THifiGan",
        SEAMLESS_M4T_VOCODER,
        vocode,
        (1, sum(SEAMLESS_M4T_VOCODER[k] for k in ("unit_embed_dim", "lang_embed_dim", "spkr_embed_dim")), -1),
        VOCODER,
        "mel",
        notes="the HiFi-GAN inside SeamlessM4TCodeHifiGan, after its unit, language and speaker embeddings "
        "(the duration expansion before it is data-dependent)",
        config_class="SeamlessM4TConfig",
    ),
    Case(
        "UnivNetModel",
        "vocoder",
        "UnivNetModel",
        UNIVNET,
        univnet_vocode,
        (1, UNIVNET["num_mel_bins"] + UNIVNET["model_in_channels"], -1),
        VOCODER,
        "mel",
        notes="mel frames and the Gaussian noise it is given, stacked along the channels (batch, channels, frames)",
    ),
    *_encode_window_decode(
        "WavTokenizerModel",
        WAVTOKENIZER,
        hop=600,
        rate=24_000,
        codebooks=1,
        window=(WAVTOKENIZER_WINDOW, ENCODEC_WINDOW_NOTES),
        decode_notes="its head is Vocos' same-padding ISTFT: irfft frames overlap-added by F.fold",
    ),
    *_encode_window_decode("XcodecModel", XCODEC, hop=320, rate=16_000, codebooks=XCODEC_CODEBOOKS),
    *_encode_window_decode(
        "HiggsAudioV2TokenizerModel", HIGGS_AUDIO_V2_TOKENIZER, hop=480, rate=24_000, codebooks=XCODEC_CODEBOOKS
    ),
    _codec(
        "PocketTTSAudioTokenizerModel.encode",
        POCKET_TTS_TOKENIZER,
        latents,
        hop=1920,
        rate=24_000,
        codebooks=0,
        attention=True,
    ),
    Case(
        "PocketTTSAudioTokenizerModel.decode",
        "codec",
        "PocketTTSAudioTokenizerModel",
        POCKET_TTS_TOKENIZER,
        audio_values,
        (1, -1, POCKET_TTS_TOKENIZER["latent_dim"]),
        _codes_length(1920, 24_000),
        "features",
        attention=True,
        sampling_rate=24_000,
        notes="decodes latents (batch, frames, latent_dim), not codes",
    ),
)


def select(only: list[str]) -> list[Case]:
    if not only:
        return list(CASES)
    wanted = {name.lower() for name in only}
    chosen = [c for c in CASES if {c.name.lower(), _family(c.name).lower()} & wanted]
    known = {c.name.lower() for c in CASES} | {_family(c.name).lower() for c in CASES}
    unknown = sorted(wanted - known)
    if unknown:
        raise SystemExit(f"unknown --only {', '.join(unknown)}; the names: {', '.join(c.name for c in CASES)}")
    return chosen


def _family(name: str) -> str:
    return name.replace("-", ".").split(".")[0]


# --- measuring ----------------------------------------------------------------------------------------------------


def build(case: Case, attention: str | None, seed: int) -> tuple[torch.nn.Module, str | None]:
    """The wrapped model in eval mode, built seeded; and the attention implementation it got."""
    model_cls = _model_class(case.model_class)
    config_cls = getattr(transformers, case.config_class) if case.config_class else model_cls.config_class
    config = config_cls(**case.config, **({"attn_implementation": attention} if attention else {}))
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    got = getattr(model.config, "_attn_implementation", None) if case.attention else None
    if attention is not None and got != attention:
        raise RuntimeError(f"asked for attn_implementation={attention!r}, the model has {got!r}")
    inner = getattr(model, case.submodule) if case.submodule else model
    return OneTensor(inner, case.call).eval(), got


def _model_class(name: str) -> type:
    if hasattr(transformers, name):
        return getattr(transformers, name)
    if name == "SeamlessM4THifiGan":  # not exported at the top level
        from transformers.models.seamless_m4t.modeling_seamless_m4t import SeamlessM4THifiGan

        return SeamlessM4THifiGan
    raise AttributeError(f"transformers has no {name}")


def make_input(case: Case, units: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    shape = case.shape_at(units)
    if case.input_kind == "codes":
        codebook_size = case.config.get("codebook_size", 1024)
        return torch.randint(0, codebook_size, shape, generator=generator)
    x = torch.randn(shape, generator=generator)
    return 0.1 * x if case.input_kind == "waveform" else x


def failure(error: BaseException, stage: str) -> dict[str, Any]:
    """The error's first line, its type, where it was raised, and the traceback's innermost frames."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    frames = traceback.extract_tb(error.__traceback__)
    tail = [f"{_short(f.filename)}:{f.lineno} in {f.name}" for f in frames[-TRACEBACK_FRAMES:]]
    ours = [f for f in frames if "/audiodeploy/" in f.filename or "/recipes/" in f.filename]
    if lines:
        message = f"{type(error).__name__}: {lines[0]}"
    elif frames:  # a bare `assert`: where and what it asserted
        message = f"{type(error).__name__} at {_short(frames[-1].filename)}:{frames[-1].lineno}: {frames[-1].line}"
    else:
        message = type(error).__name__
    return {
        "ok": False,
        "stage": stage,
        "error": message,
        "raised_in": _package(frames[-1].filename) if frames else None,
        "innermost_audiodeploy_frame": (
            f"{_short(ours[-1].filename)}:{ours[-1].lineno} in {ours[-1].name}" if ours else None
        ),
        "traceback_tail": tail,
    }


def _short(filename: str) -> str:
    """A path from its package on (``audiodeploy/lowering/...``, ``torch/export/...``)."""
    for marker in ("/site-packages/", "/work/main/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _package(filename: str) -> str:
    return _short(filename).split("/", 1)[0]


def measure_lowering(
    module: torch.nn.Module,
    case: Case,
    options: audiodeploy.LoweringOptions,
    inputs: dict[int, torch.Tensor],
    expected: dict[int, torch.Tensor],
) -> dict[str, Any]:
    example = inputs[case.length.example]
    dynamic_shapes = None if case.length.fixed else ({case.axis: case.length.dim()},)
    start = time.perf_counter()
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            lowered = audiodeploy.lower(module, (example,), dynamic_shapes=dynamic_shapes, options=options)
    except Exception as error:
        # torch.export prints a failed export's partial graph to stderr (thousands of lines): dropped.
        if not hasattr(error, "partial_fx_graph"):
            sys.stderr.write(printed.getvalue())
        return {**failure(error, "lower"), "lowering_s": time.perf_counter() - start}
    sys.stderr.write(printed.getvalue())
    lowering_s = time.perf_counter() - start
    method = lowered.report.methods["forward"]
    declined = getattr(method, "gemms_not_delegated", ())
    result: dict[str, Any] = {
        "ok": True,
        "delegates": method.delegates,
        "ops_outside_delegates": dict(method.ops_outside_delegates),
        "folds": len(method.folds) if hasattr(method, "folds") else None,
        "gemms_not_delegated": len(declined),
        "gemms_not_delegated_reasons": dict(Counter(g.reason for g in declined)),
        "rewrites": list(getattr(method, "rewrites", ())),
        "program_bytes": len(lowered.buffer),
        "lowering_s": lowering_s,
        "runs": [],
    }
    try:
        program = Program(lowered.buffer, origin=f"{case.name} ({'fold' if options.fold else 'stock'})")
    except Exception as error:
        return {**result, **failure(error, "load")}
    for units, x in inputs.items():
        run: dict[str, Any] = {"units": units, "input_shape": list(x.shape), "seconds": case.seconds(units)}
        try:
            (out,) = program.run([x])
        except Exception as error:
            result["runs"].append({**run, **failure(error, f"run at {units}")})
            result.update(ok=False, stage=f"run at {units}", error=result["runs"][-1]["error"])
            continue
        want = expected[units]
        run["output_shape"] = list(out.shape)
        if out.shape != want.shape:
            run.update(ok=False, error=f"output shape {tuple(out.shape)}, eager gives {tuple(want.shape)}")
            result.update(ok=False, stage=f"run at {units}", error=run["error"])
        else:
            run["ok"] = True
            run["max_abs_diff"] = (out.double() - want.double()).abs().max().item()
            # Tiny random vocoders output near-silence: eager's own scale says what a diff means.
            run["eager_max_abs"] = want.double().abs().max().item()
            if not want.is_floating_point():
                run["codes_differing"] = (out != want).double().mean().item()
        result["runs"].append(run)
    diffs = [r["max_abs_diff"] for r in result["runs"] if "max_abs_diff" in r]
    result["max_abs_diff"] = max(diffs) if diffs else None
    return result


def measure(case: Case, attention: str | None, seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "model": case.name,
        "group": case.group,
        "model_class": case.model_class,
        "attention_requested": attention or ("default" if case.attention else None),
        "config": case.config,
        "input": {
            "kind": case.input_kind,
            "shape": list(case.input_shape),
            "dtype": "int64" if case.input_kind == "codes" else "float32",
            "dynamic": case.length.describe(),
            "lengths": [case.length.example, case.length.other],
            "sampling_rate": case.sampling_rate,
        },
        "notes": case.notes,
    }
    if case.submodule:
        record["submodule"] = case.submodule
    try:
        module, got = build(case, attention, seed)
        record["attention"] = got
        record["parameters"] = sum(p.numel() for p in module.parameters())
        inputs = {u: make_input(case, u, seed + 1 + i) for i, u in enumerate((case.length.example, case.length.other))}
        with torch.no_grad():
            expected = {u: module(x) for u, x in inputs.items()}
        record["eager_output_shapes"] = {str(u): list(y.shape) for u, y in expected.items()}
    except Exception as error:
        record["error"] = failure(error, "build or eager")
        log(f"  build or eager failed: {record['error']['error']}")
        return record
    record["lowerings"] = {}
    for name, options in LOWERINGS.items():
        result = measure_lowering(module, case, options, inputs, expected)
        record["lowerings"][name] = result
        if result["ok"]:
            log(
                f"  {name}: {result['delegates']} delegate(s), outside: {ops(result['ops_outside_delegates'])}; "
                f"{size(result['program_bytes'])}, max diff {result['max_abs_diff']:.1e}, {result['lowering_s']:.1f} s"
            )
        else:
            log(f"  {name}: failed at {result['stage']}: {result['error']}")
            if result.get("innermost_audiodeploy_frame"):
                log(f"    innermost audiodeploy frame: {result['innermost_audiodeploy_frame']}")
    return record


# --- the table ----------------------------------------------------------------------------------------------------


def format_table(record: dict) -> str:
    machine = record["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in record["packages"].items() if v)
    lines = [
        "transformers audio models, small random-weight configs at a dynamic length: stock ExecuTorch vs audiodeploy",
        f"{machine['processor']} ({', '.join(machine['vector_extensions'] or [])}), {machine['cpu_count']} CPUs; "
        f"{versions}; {machine['date']}",
        "",
    ]
    rows = [
        [
            "model",
            "attention",
            "stock delegates",
            "ours delegates",
            "ours ops outside",
            "size ours/stock",
            "max diff ours (stock)",
        ]
    ]
    notes: list[str] = []
    for case in record["cases"]:
        attention = case.get("attention") or "–"
        if "error" in case:
            notes.append(f"{case['model']} [{attention}]: build or eager: {case['error']['error']}")
            rows.append([case["model"], attention, "error", "error", "–", "–", "–"])
            continue
        stock, ours = case["lowerings"]["stock"], case["lowerings"]["audiodeploy"]
        for name, r in (("stock", stock), ("ours", ours)):
            if not r["ok"]:
                notes.append(f"{case['model']} [{attention}], {name}: {r['stage']}: {r['error']}")
        sizes = "–"
        if "program_bytes" in stock and "program_bytes" in ours:
            ratio = ours["program_bytes"] / stock["program_bytes"]
            sizes = f"{ratio:.2f}: {size(ours['program_bytes'])} / {size(stock['program_bytes'])}"
        rows.append(
            [
                case["model"],
                attention,
                _delegates(stock),
                _delegates(ours),
                ops(ours["ops_outside_delegates"]) if "ops_outside_delegates" in ours else "–",
                sizes,
                f"{_diff(ours)} ({_diff(stock)})",
            ]
        )
    lines.append("| " + " | ".join(rows[0]) + " |")
    lines.append("|" + "---|" * len(rows[0]))
    lines.extend("| " + " | ".join(row) + " |" for row in rows[1:])
    if notes:
        lines += ["", f"failures (first line of the error, cut at {NOTE_CHARS} characters; the record has it whole):"]
        lines.extend(f"- {_cut(note)}" for note in notes)
    return "\n".join(lines)


def _cut(text: str) -> str:
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 1] + "…"


def _delegates(r: dict) -> str:
    if "delegates" not in r:
        return f"{r['stage']} failed"
    return str(r["delegates"]) if r["ok"] else f"{r['delegates']}, {r['stage']} failed"


def _diff(r: dict) -> str:
    return "–" if r.get("max_abs_diff") is None else f"{r['max_abs_diff']:.1e}"


# --- main ---------------------------------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="transformers' audio models with small random-weight configs at a dynamic length: stock "
        "ExecuTorch lowering vs audiodeploy's, each run at two lengths against eager.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "bring-your-own-model.json",
        help="where to write the record (JSON); the printed table goes beside it (.txt)",
    )
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="measure only NAME (repeatable)")
    p.add_argument("--list", action="store_true", help="print the models' names and exit")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights; inputs use seed + 1 and seed + 2")
    p.add_argument("--threads", type=int, default=None, help="threads (default: ExecuTorch's threadpool size)")
    return p.parse_args(argv)


@dataclass
class Run:
    record: dict[str, Any]
    out: Path
    cases: list[dict[str, Any]] = field(default_factory=list)

    def save(self) -> None:
        self.record["cases"] = self.cases
        self.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.out, json.dumps(self.record, indent=2) + "\n")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.list:
        for case in CASES:
            print(f"{case.name}  ({case.group}{', sdpa and eager attention' if case.attention else ''})")
        return {}
    cases = select(args.only)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="torch")
    # A failed export's guard warns with the whole graph (thousands of lines); the record keeps the error.
    logging.getLogger("torch.fx.experimental.symbolic_shapes").setLevel(logging.ERROR)
    threads = set_threads(args.threads)
    run = Run(
        record={
            "schema": SCHEMA,
            "benchmark": "bring-your-own-model",
            "description": "transformers audio models, small random-weight configs, lowered at a dynamic length "
            "with audiodeploy.lower (default options: audiodeploy; LoweringOptions(fold=False): stock ExecuTorch), "
            "loaded with audiodeploy.runtime.Program and run at two lengths against eager PyTorch",
            "settings": {"seed": args.seed, "threads": threads, "only": args.only},
            "machine": machine_info(threads),  # before the run: its date is when the run started
            "packages": {name: _version(name) for name in PACKAGES},
            # An editable install can point at another checkout: what was measured is this one.
            "audiodeploy_imported_from": str(Path(audiodeploy.__file__).resolve().parent),
        },
        out=args.out,
    )
    for case in cases:
        for attention in (None, "eager") if case.attention else (None,):
            shown = f" [{attention or 'default'} attention]" if case.attention else ""
            log(f"{case.name}{shown} ...")
            run.cases.append(measure(case, attention, args.seed, log))
            run.save()
    run.record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run.save()
    table = format_table(run.record)
    print(table)
    atomic_write_text(args.out.with_suffix(".txt"), table + "\n")
    log(f"wrote {args.out} and {args.out.with_suffix('.txt')}")
    return run.record


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()

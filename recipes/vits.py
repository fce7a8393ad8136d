"""VITS text to speech (`vits`): MMS-TTS and Piper-sized voices from transformers' `VitsModel`, as one program with
an ``encode`` method (token ids and duration noise to the prior and durations) and a ``decode`` method (latents to
speech), cut where the number of frames starts to depend on the predicted durations (`_vits_modules`). Between
them the host repeats each token's prior for its frames and draws the latents (`audiodeploy.program.tts`).

The weight norm of the flow's WaveNet layers is live in transformers (its checkpoints keep ``weight_g`` and
``weight_v``) and is folded into delegated constants, as the HiFi-GAN decoder's would be. A voice of several speakers
(``num_speakers`` > 1, as VCTK's) conditions the duration predictor, the flow and the decoder on a speaker embedding:
both methods then take the speaker's index as their last input.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .errors import WeightsError
from .registry import Recipe, register
from .spec import (
    SPEECH_OUTPUT,
    BuildRequest,
    BuiltModel,
    BuiltTextEncoder,
    LengthRange,
    Variant,
    latents_input,
    tiny_variant,
)

if TYPE_CHECKING:
    from transformers import VitsConfig, VitsModel

    from audiodeploy.program.tts import TextFrontEnd

    from ._hifigan_generator import ResblockType

# The characters of a lowercase English voice, for synthetic weights (a checkpoint brings its own vocab.json): the
# blank token first, as MMS-TTS's front end intersperses id 0.
_SYNTHETIC_CHARACTERS = ("_", " ", "'", "-", *"abcdefghijklmnopqrstuvwxyz", *"01234567")

# The token counts `encode` takes: with blanks between characters, a sentence of up to 299 characters.
_MIN_TOKENS, _MAX_TOKENS = 2, 599


@dataclass(frozen=True)
class VitsArchitecture:
    """transformers `VitsConfig`'s hyperparameters that differ between voices."""

    sample_rate: int
    hidden_size: int
    num_hidden_layers: int
    ffn_dim: int
    upsample_initial_channel: int
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    resblock: ResblockType = "1"
    """The decoder's residual blocks: HiFi-GAN's type "1" (transformers' `VitsHifiGan`), or type "2" (two dilated
    convolutions a block, Piper's default), which transformers lacks: its blocks are swapped for
    `_hifigan_generator.ResBlock2`, which computes what Piper's do."""
    duration_predictor_num_flows: int = 4
    duration_predictor_filter_channels: int = 192
    prior_encoder_num_wavenet_layers: int = 4
    depth_separable_num_layers: int = 3
    vocab_size: int = len(_SYNTHETIC_CHARACTERS)

    @property
    def hop_length(self) -> int:
        return math.prod(self.upsample_rates)

    def tiny(self) -> VitsArchitecture:
        """Test size: one text-encoder layer, 32 channels, one spline flow in reverse, a two-stage HiFi-GAN of the
        same hop."""
        rates = (16, 16) if self.hop_length == 256 else (self.hop_length,)
        return replace(
            self,
            hidden_size=32,
            num_hidden_layers=1,
            ffn_dim=64,
            upsample_initial_channel=32,
            upsample_rates=rates,
            upsample_kernel_sizes=tuple(2 * rate for rate in rates),
            resblock_kernel_sizes=(3, 5),
            resblock_dilation_sizes=((1, 3), (1, 3)),
            duration_predictor_num_flows=2,
            duration_predictor_filter_channels=32,
            prior_encoder_num_wavenet_layers=2,
            depth_separable_num_layers=2,
        )


# facebook/mms-tts-eng's configuration (transformers VitsConfig's defaults): 16 kHz, a 256-sample hop.
_MMS = VitsArchitecture(16_000, 192, 6, 768, 512, (8, 8, 2, 2), (16, 16, 4, 4))
# Piper's voices by quality (piper_train's `--quality`; its voice list gives their rates). "medium", the default: the
# original VITS text encoder with a lighter HiFi-GAN (type "2" blocks, three stages from 256 channels), at 22.05 kHz;
# "low": the same at 16 kHz; "x-low": "low" with 96 hidden channels and a 384-wide feed-forward (the duration
# predictor keeps its 192); "high": the original VITS whole (MMS-TTS's layout) at 22.05 kHz.
_PIPER_MEDIUM = replace(
    _MMS,
    sample_rate=22_050,
    upsample_initial_channel=256,
    upsample_rates=(8, 8, 4),
    upsample_kernel_sizes=(16, 16, 8),
    resblock_kernel_sizes=(3, 5, 7),
    resblock_dilation_sizes=((1, 2), (2, 6), (3, 12)),
    resblock="2",
)
_PIPER_LOW = replace(_PIPER_MEDIUM, sample_rate=16_000)
_PIPER_X_LOW = replace(_PIPER_LOW, hidden_size=96, ffn_dim=384)
_PIPER_HIGH = replace(_MMS, sample_rate=22_050)

MMS_TTS = Variant(
    name="mms-tts",
    description="MMS-TTS (1,100+ languages, one checkpoint each): 16 kHz, 6-layer text encoder, 36 M parameters",
    checkpoint="facebook/mms-tts-eng",
    architecture=_MMS,
)
PIPER_MEDIUM = Variant(
    name="piper-medium",
    description="the size of Piper's medium voices: 22.05 kHz, 6-layer text encoder, type-2 HiFi-GAN from 256 channels",
    checkpoint=None,
    architecture=_PIPER_MEDIUM,
)
PIPER_LOW = Variant(
    name="piper-low",
    description="the size of Piper's low voices: piper-medium at 16 kHz",
    checkpoint=None,
    architecture=_PIPER_LOW,
)
PIPER_X_LOW = Variant(
    name="piper-x-low",
    description="the size of Piper's x-low voices: piper-low with 96 hidden channels",
    checkpoint=None,
    architecture=_PIPER_X_LOW,
)
PIPER_HIGH = Variant(
    name="piper-high",
    description="the size of Piper's high voices (the original VITS, mms-tts's layout): 22.05 kHz",
    checkpoint=None,
    architecture=_PIPER_HIGH,
)


@register
class VitsRecipe(Recipe[VitsArchitecture]):
    name = "vits"
    description = (
        "VITS text to speech (transformers VitsModel, MMS-TTS): text to the prior (encode), latents to speech (decode)"
    )
    task = "tts"
    sources = ("transformers",)
    variants = (
        MMS_TTS,
        PIPER_MEDIUM,
        PIPER_LOW,
        PIPER_X_LOW,
        PIPER_HIGH,
        tiny_variant("tiny", MMS_TTS, "test size of 'mms-tts': one layer, 32 channels, one spline flow"),
        tiny_variant("tiny-piper", PIPER_MEDIUM, "test size of 'piper-medium': 'tiny' with type-2 residual blocks"),
    )
    sample_rate = 16_000
    input_kind = "text"
    output = SPEECH_OUTPUT
    default_length_range = LengthRange(0.03, 20.0)
    """Seconds of speech per run of ``decode``: a longer sentence is decoded in windows, a shorter one padded (from
    2 frames: a window padded past the end changes its last samples, where eager's convolutions see zeros)."""
    atol = 1e-3
    transformers_model_type = "vits"

    def _build(self, request: BuildRequest[VitsArchitecture]) -> BuiltModel:
        import torch
        from torch.export import Dim

        from audiodeploy.program.tts import TextToSpeech

        from ._transformers import synthetic_or_loaded, transformers_class
        from ._vits_modules import VitsLatentsToWaveform, VitsTextToDurations
        from ._vocoder import audible_synthetic_init

        architecture = request.variant.architecture
        if request.weights is not None and architecture.resblock == "2":
            raise WeightsError(
                f"variant '{request.variant.name}' decodes with type \"2\" residual blocks, which a transformers "
                "VitsModel checkpoint cannot hold: leave out --variant (the checkpoint's config.json sets its size)"
            )
        model_class = transformers_class("VitsModel")

        def synthetic_init(model: VitsModel) -> None:
            if architecture.resblock == "2":
                _swap_in_type2_residual_blocks(model, architecture)
            audible_synthetic_init(model)
            _speech_like_durations(model)

        model, provenance = synthetic_or_loaded(
            request,
            self.name,
            model_class,
            "vits",
            lambda: _config(architecture),
            synthetic_init,
            # The posterior encoder is for training only; a checkpoint without it still speaks.
            needless=lambda name: name.startswith("posterior_encoder."),
        )
        notes: tuple[str, ...] = ()
        if request.weights is None:
            front_end = _synthetic_front_end()
            notes = ("synthetic weights: the speech is noise, and the vocabulary a stand-in for a checkpoint's",)
        else:
            front_end = _checkpoint_front_end(request.weights)
        config = model.config
        if len(front_end.characters) > config.vocab_size:
            raise WeightsError(
                f"weights '{request.weights}': vocab.json has {len(front_end.characters)} tokens, the model embeds "
                f"{config.vocab_size}; give the directory save_pretrained wrote for both"
            )
        model.eval()
        hop, rate = math.prod(config.upsample_rates), int(config.sampling_rate)
        latents = latents_input(rate, hop, config.flow_size, request.length_range)
        built = self._package(request, VitsLatentsToWaveform(model), latents, provenance, notes)
        generator = torch.Generator().manual_seed(request.seed)
        tokens = 41  # a short sentence's tokens with blanks; odd, as the front end makes them
        token_ids = torch.randint(0, len(front_end.characters), (1, tokens), generator=generator)
        noise = torch.randn(1, 2, tokens, generator=generator) * config.noise_scale_duration
        count = Dim("tokens", min=_MIN_TOKENS, max=_MAX_TOKENS)
        # A voice of several speakers: both methods take the speaker's index last (the example's: the last one).
        speaker: tuple[torch.Tensor, ...] = ()
        if config.num_speakers > 1:
            speaker = (torch.tensor([config.num_speakers - 1]),)
            built = replace(
                built,
                example_inputs=built.example_inputs + speaker,
                dynamic_shapes=(*built.dynamic_shapes, {}),
            )
        text = TextToSpeech(
            front_end=front_end,
            min_tokens=_MIN_TOKENS,
            max_tokens=_MAX_TOKENS,
            flow_size=config.flow_size,
            noise_scale=float(config.noise_scale),
            noise_scale_duration=float(config.noise_scale_duration),
            speaking_rate=float(config.speaking_rate),
            speakers=int(config.num_speakers),
        )
        encoder = BuiltTextEncoder(
            module=VitsTextToDurations(model).eval(),
            example_inputs=(token_ids, noise, *speaker),
            dynamic_shapes=({1: count}, {2: count}, *({} for _ in speaker)),
            text=text,
        )
        return replace(built, text_encoder=encoder)


# Frames per token of synthetic weights' durations, and how much their spread is narrowed: about what trained voices
# give (blanks between characters are short), measured on mms-tts: 3.3 frames a token, at most 5.
_SYNTHETIC_FRAMES_PER_TOKEN = 2
_SYNTHETIC_DURATION_SPREAD = 1 / 4


def _swap_in_type2_residual_blocks(model: VitsModel, architecture: VitsArchitecture) -> None:
    """Replace the decoder's residual blocks, in place and in their order (stage by stage, kernel by kernel), with
    type "2" blocks of the same channels, kernels and dilations. `VitsHifiGan.forward` calls each block on the
    stage's activations and averages them, whatever the block; type "2"'s slope is transformers' (0.1) too."""
    from torch import nn

    from ._hifigan_generator import ResBlock2

    decoder = model.decoder
    kernels = len(architecture.resblock_kernel_sizes)
    blocks = []
    for stage in range(len(architecture.upsample_rates)):
        channels = architecture.upsample_initial_channel // 2 ** (stage + 1)
        blocks += [
            ResBlock2(channels, kernel, dilations)
            for kernel, dilations in zip(architecture.resblock_kernel_sizes, architecture.resblock_dilation_sizes)
        ]
    assert len(blocks) == len(decoder.resblocks) == kernels * len(architecture.upsample_rates)
    decoder.resblocks = nn.ModuleList(blocks)


def _speech_like_durations(model: VitsModel) -> None:
    """Shift and narrow synthetic weights' log-durations to about `_SYNTHETIC_FRAMES_PER_TOKEN` frames a token: drawn
    at random, they spread over orders of magnitude, and a sentence lasts a few milliseconds or a minute. In reverse,
    the duration predictor's last flow is ``(x - translate) * exp(-log_scale)`` (`VitsElementwiseAffine`), of which
    the first channel is the log-duration."""
    import torch

    affine = model.duration_predictor.flows[0]
    with torch.no_grad():
        affine.log_scale[0] = -math.log(_SYNTHETIC_DURATION_SPREAD)
        affine.translate[0] = -math.log(_SYNTHETIC_FRAMES_PER_TOKEN) / _SYNTHETIC_DURATION_SPREAD


def _config(architecture: VitsArchitecture) -> VitsConfig:
    from transformers import VitsConfig

    return VitsConfig(
        sampling_rate=architecture.sample_rate,
        vocab_size=architecture.vocab_size,
        hidden_size=architecture.hidden_size,
        num_hidden_layers=architecture.num_hidden_layers,
        ffn_dim=architecture.ffn_dim,
        flow_size=architecture.hidden_size,
        upsample_initial_channel=architecture.upsample_initial_channel,
        upsample_rates=list(architecture.upsample_rates),
        upsample_kernel_sizes=list(architecture.upsample_kernel_sizes),
        resblock_kernel_sizes=list(architecture.resblock_kernel_sizes),
        resblock_dilation_sizes=[list(d) for d in architecture.resblock_dilation_sizes],
        duration_predictor_num_flows=architecture.duration_predictor_num_flows,
        duration_predictor_filter_channels=architecture.duration_predictor_filter_channels,
        prior_encoder_num_wavenet_layers=architecture.prior_encoder_num_wavenet_layers,
        depth_separable_num_layers=architecture.depth_separable_num_layers,
    )


def _synthetic_front_end() -> TextFrontEnd:
    from audiodeploy.program.tts import TextFrontEnd

    return TextFrontEnd(
        characters=_SYNTHETIC_CHARACTERS,
        lowercase=True,
        add_blank=True,
        origin="a stand-in lowercase English character set (synthetic weights)",
    )


def _checkpoint_front_end(weights: str) -> TextFrontEnd:
    """The front end of a `VitsTokenizer` saved beside the weights (vocab.json, tokenizer_config.json)."""
    from audiodeploy.program.tts import TextFrontEnd

    from ._transformers import optional_file

    vocab_path = optional_file(weights, "vocab.json")
    if vocab_path is None:
        raise WeightsError(
            f"weights '{weights}' have no vocab.json: save the checkpoint's tokenizer beside it "
            "(VitsTokenizer.save_pretrained to the same directory)"
        )
    settings: dict[str, object] = {}
    config_path = optional_file(weights, "tokenizer_config.json")
    try:
        with open(vocab_path, encoding="utf-8") as file:
            vocabulary = json.load(file)
        if config_path is not None:
            with open(config_path, encoding="utf-8") as file:
                settings = json.load(file)
        ids = sorted((int(index), str(token)) for token, index in vocabulary.items())
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise WeightsError(f"weights '{weights}': vocab.json is not a token-to-id mapping ({error})") from None
    if [index for index, _ in ids] != list(range(len(ids))):
        raise WeightsError(f"weights '{weights}': vocab.json's ids are not 0 .. {len(ids) - 1}, one token each")
    phonemize = settings.get("phonemize", False) is True
    return TextFrontEnd(
        characters=tuple(token for _, token in ids),
        lowercase=bool(settings.get("normalize", True)),
        add_blank=bool(settings.get("add_blank", True)),
        origin=f"vocab.json of {weights}" + (", read as espeak-ng phonemes" if phonemize else ""),
        phonemize=phonemize,
    )

"""DAC, the Descript Audio Codec (`dac`): waveform to codes and back, from transformers' `DacModel` (one program,
an ``encode`` and a ``decode`` method: see `_codec`).

transformers' DAC checkpoints store plain convolution weights (its conversion removes the original's weight norm),
so nothing is folded; what the lowering core rewrites is the codebook search (`F.normalize` of the latents and the
codebook, squared distances, `argmax`) into GEMMs, a max pooling and an argmax inside the delegate, and the Snake
activations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from ._codec import CodecRecipe
from .registry import register
from .spec import Variant, tiny_variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import DacConfig, PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class DacArchitecture:
    """transformers `DacConfig`'s hyperparameters."""

    sample_rate: int
    encoder_hidden_size: int
    downsampling_ratios: tuple[int, ...]
    """Upsampling takes them in reverse order."""
    decoder_hidden_size: int
    n_codebooks: int
    codebook_size: int
    codebook_dim: int

    @property
    def hop_length(self) -> int:
        """Samples per frame of codes."""
        return math.prod(self.downsampling_ratios)

    def tiny(self) -> DacArchitecture:
        """Test size: the same hop in three blocks instead of four (a lowering's time grows with the layers),
        8 encoder and 64 decoder channels, two codebooks of 64 entries."""
        ratios = (8, 5, 8) if self.hop_length == 320 else (8, 8, 8)
        assert math.prod(ratios) == self.hop_length
        return replace(
            self,
            encoder_hidden_size=8,
            downsampling_ratios=ratios,
            decoder_hidden_size=64,
            n_codebooks=2,
            codebook_size=64,
        )


# The published models (descript-audio-codec 1.0): 64 encoder and 1536 decoder channels, codebooks of 1024 entries
# of dimension 8; they differ in rate, hop and codebook count.
_16KHZ = DacArchitecture(16_000, 64, (2, 4, 5, 8), 1536, 12, 1024, 8)
_24KHZ = DacArchitecture(24_000, 64, (2, 4, 5, 8), 1536, 32, 1024, 8)
_44KHZ = DacArchitecture(44_100, 64, (2, 4, 8, 8), 1536, 9, 1024, 8)

V16KHZ = Variant(
    name="16khz",
    description="16 kHz, 320 samples per frame (50 frames a second), 12 codebooks (6 kbps), 74 M parameters",
    checkpoint="descript/dac_16khz",
    architecture=_16KHZ,
)
V24KHZ = Variant(
    name="24khz",
    description="24 kHz, 320 samples per frame (75 frames a second), 32 codebooks (24 kbps)",
    checkpoint="descript/dac_24khz",
    architecture=_24KHZ,
)
V44KHZ = Variant(
    name="44khz",
    description="44.1 kHz, 512 samples per frame (86 frames a second), 9 codebooks (8 kbps)",
    checkpoint="descript/dac_44khz",
    architecture=_44KHZ,
)


@register
class DacRecipe(CodecRecipe[DacArchitecture]):
    name = "dac"
    description = "Descript Audio Codec (transformers DacModel): waveform to codes (encode) and back (decode)"
    variants = (
        V16KHZ,
        V24KHZ,
        V44KHZ,
        tiny_variant("tiny", V16KHZ, "test size of '16khz': three blocks, 8/64 channels, two codebooks of 64"),
    )
    sample_rate = 16_000
    transformers_model_type = "dac"
    transformers_model_class_name = "DacModel"

    def transformers_config(self, architecture: DacArchitecture) -> DacConfig:
        from transformers import DacConfig

        return DacConfig(
            encoder_hidden_size=architecture.encoder_hidden_size,
            downsampling_ratios=list(architecture.downsampling_ratios),
            decoder_hidden_size=architecture.decoder_hidden_size,
            n_codebooks=architecture.n_codebooks,
            codebook_size=architecture.codebook_size,
            codebook_dim=architecture.codebook_dim,
            sampling_rate=architecture.sample_rate,
        )

    def hop_length(self, config: PretrainedConfig) -> int:
        return math.prod(cast("DacConfig", config).downsampling_ratios)

    def codebooks(self, config: PretrainedConfig, architecture: DacArchitecture) -> tuple[int, int]:
        dac = cast("DacConfig", config)
        return dac.n_codebooks, dac.codebook_size

    def export_modules(self, model: PreTrainedModel, codebooks: int) -> tuple[nn.Module, nn.Module]:
        from ._modules import DacDecode, DacEncode

        return DacEncode(model), DacDecode(model)

"""Mimi, Kyutai's streaming speech codec (`mimi`): waveform to codes and back, from transformers' `MimiModel`.

24 kHz, 12.5 frames of codes a second (1920 samples each); the first codebook is semantic (distilled from WavLM),
the others acoustic. Moshi streams 8 of the 32; the `32-codebooks` variant encodes with all of them. Its encoder and
decoder are causal convolutions around a transformer with a 250-frame sliding window: each method is one delegate
(the banded causal mask is computed in the delegate, the codebook search is a GEMM and an argmax).

torch's `cdist` takes another algorithm for 25 rows or fewer, and `torch.export` keeps the example's: a program
holds above 25 frames only, so the shortest input is 26 frames (2.08 s). The runtime pads a shorter input with
silence at its end, which a causal encoder's earlier frames do not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from ._codec import CodecRecipe
from .errors import LengthRangeError
from .registry import register
from .spec import LengthRange, Variant, tiny_variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import MimiConfig, PretrainedConfig, PreTrainedModel

_MIN_FRAMES = 26
"""Above torch.cdist's 25-row branch (see the module docstring)."""


@dataclass(frozen=True)
class MimiArchitecture:
    """transformers `MimiConfig`'s hyperparameters, and how many of its quantizers encode uses."""

    hidden_size: int
    num_filters: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    codebook_size: int
    codebook_dim: int
    vector_quantization_hidden_dimension: int
    num_quantizers: int
    upsample_groups: int
    codebooks: int
    """Quantizers encode uses (the first ones): the codes' codebooks."""

    def tiny(self) -> MimiArchitecture:
        """Test size: 32 channels, two transformer layers, two codebooks of 64 entries; the same 1920-sample hop."""
        return replace(
            self,
            hidden_size=32,
            num_filters=8,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            codebook_size=64,
            codebook_dim=32,
            vector_quantization_hidden_dimension=32,
            num_quantizers=2,
            upsample_groups=32,
            codebooks=2,
        )


# kyutai/mimi: MimiConfig's defaults.
_MIMI = MimiArchitecture(512, 64, 8, 8, 2048, 2048, 256, 256, 32, 512, codebooks=8)

EIGHT = Variant(
    name="8-codebooks",
    description="kyutai/mimi encoding with its first 8 codebooks, as Moshi streams it (1.1 kbps), 24 kHz",
    checkpoint="kyutai/mimi",
    architecture=_MIMI,
)
ALL = Variant(
    name="32-codebooks",
    description="kyutai/mimi encoding with all 32 codebooks (4.4 kbps), 24 kHz",
    checkpoint="kyutai/mimi",
    architecture=replace(_MIMI, codebooks=32),
)


@register
class MimiRecipe(CodecRecipe[MimiArchitecture]):
    name = "mimi"
    description = "Kyutai's Mimi speech codec (transformers MimiModel): 24 kHz waveform to codes and back"
    variants = (
        EIGHT,
        ALL,
        tiny_variant("tiny", EIGHT, "test size of '8-codebooks': 32 channels, two layers, two codebooks of 64"),
    )
    sample_rate = 24_000
    default_length_range = LengthRange(2.5, 10.0)
    transformers_model_type = "mimi"
    transformers_model_class_name = "MimiModel"
    zero_started_codebooks = "embed_sum"  # divided by cluster_usage (ones) to give the codebook

    def transformers_config(self, architecture: MimiArchitecture) -> MimiConfig:
        from transformers import MimiConfig

        return MimiConfig(
            hidden_size=architecture.hidden_size,
            num_filters=architecture.num_filters,
            num_hidden_layers=architecture.num_hidden_layers,
            num_attention_heads=architecture.num_attention_heads,
            num_key_value_heads=architecture.num_attention_heads,
            intermediate_size=architecture.intermediate_size,
            codebook_size=architecture.codebook_size,
            codebook_dim=architecture.codebook_dim,
            vector_quantization_hidden_dimension=architecture.vector_quantization_hidden_dimension,
            num_quantizers=architecture.num_quantizers,
            upsample_groups=architecture.upsample_groups,
        )

    def hop_length(self, config: PretrainedConfig) -> int:
        return int(cast("MimiConfig", config).frame_size)

    def codebooks(self, config: PretrainedConfig, architecture: MimiArchitecture) -> tuple[int, int]:
        mimi = cast("MimiConfig", config)
        return min(architecture.codebooks, mimi.num_quantizers), mimi.codebook_size

    def check_length_range(self, length_range: LengthRange, hop: int, sample_rate: int) -> None:
        if length_range.min_seconds * sample_rate < _MIN_FRAMES * hop:
            shortest = _MIN_FRAMES * hop / sample_rate
            raise LengthRangeError(
                f"length range {length_range} is too short: Mimi's programs take at least {shortest:.2f} s "
                f"({_MIN_FRAMES} frames; torch.cdist branches at 25), and pad shorter audio: give --min-seconds "
                f"{math.ceil(shortest * 100) / 100:g} or more"
            )

    def export_modules(self, model: PreTrainedModel, codebooks: int) -> tuple[nn.Module, nn.Module]:
        from ._modules import MimiDecode, MimiEncode

        return MimiEncode(model, codebooks), MimiDecode(model)

"""DAC, the Descript Audio Codec (`dac`): waveform to codes and back, from transformers' `DacModel`.

One program with two methods, as a codec is used: ``encode`` takes a mono waveform `(1, samples)` and gives
`(1, frames, codebooks)` int64 codes, one frame every `hop` samples; ``decode`` takes such codes and gives the
waveform `(1, frames * hop)`. The codes are laid out frames first, as a mel is, so that the runtime cuts both
into windows along the same axis; `audiodeploy run` and `Codec.encode` give them as transformers does,
`(codebooks, frames)`.

transformers' DAC checkpoints store plain convolution weights (its conversion removes the original's weight norm),
so nothing is folded; what the lowering core rewrites is the codebook search (`F.normalize` of the latents and the
codebook, squared distances, `argmax`) into GEMMs, a max pooling and an argmax inside the delegate, and the Snake
activations.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ._transformers import load_pretrained, refuse_incomplete
from ._vocoder import audible_synthetic_init
from .registry import Recipe, register
from .spec import (
    CODES_OUTPUT,
    BuildRequest,
    BuiltDecoder,
    BuiltModel,
    InputSpec,
    LengthRange,
    Variant,
    synthetic_provenance,
    tiny_variant,
    waveform_input,
)

if TYPE_CHECKING:
    from transformers import DacConfig


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
class DacRecipe(Recipe[DacArchitecture]):
    name = "dac"
    description = "Descript Audio Codec (transformers DacModel): waveform to codes (encode) and back (decode)"
    task = "codec"
    sources = ("transformers",)
    variants = (
        V16KHZ,
        V24KHZ,
        V44KHZ,
        tiny_variant("tiny", V16KHZ, "test size of '16khz': three blocks, 8/64 channels, two codebooks of 64"),
    )
    sample_rate = 16_000
    input_kind = "waveform"
    output = CODES_OUTPUT
    default_length_range = LengthRange(1.0, 10.0)
    # Decoded waveform samples in [-1, 1]; the codes must be equal.
    atol = 1e-3
    transformers_model_type = "dac"

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

    def _build(self, request: BuildRequest[DacArchitecture]) -> BuiltModel:
        import torch
        from transformers import DacModel

        from ._modules import DacDecode, DacEncode

        notes: tuple[str, ...] = ()
        if request.weights is None:
            torch.manual_seed(request.seed)
            model = DacModel(self.transformers_config(request.variant.architecture))
            # transformers' initialization (std 0.02) gives a near-silent decoder, against which the tolerance
            # would say nothing.
            audible_synthetic_init(model)
            provenance = synthetic_provenance(request.variant, request.seed)
            notes = ("synthetic convolution weights are LeCun-normal (std 1/sqrt(fan-in)): the codes are noise",)
        else:
            model, missing = load_pretrained(DacModel, request.weights, "dac", self.name, None, request.seed)
            refuse_incomplete(request.weights, missing, DacModel, "dac")
            provenance = f"loaded from {request.weights} (transformers DacModel)"
        config = model.config
        hop = math.prod(config.downsampling_ratios)
        spec = waveform_input(config.sampling_rate, hop, request.length_range)
        built = self._package(request, DacEncode(model), spec, provenance, notes)
        codes = InputSpec(
            kind="codes",
            layout=("batch", "frames", "codebooks"),
            sample_rate=config.sampling_rate,
            samples_per_step=hop,
            length_multiple=1,
            min_length=spec.min_length // hop,
            max_length=spec.max_length // hop,
            feature_size=config.n_codebooks,
        )
        decode = DacDecode(model).eval()
        decoder = BuiltDecoder(
            module=decode,
            example_inputs=codes.random_inputs(codes.example_length, request.seed, config.codebook_size),
            dynamic_shapes=codes.dynamic_shapes(),
            input=codes,
            codebook_size=config.codebook_size,
        )
        return dataclasses.replace(built, decoder=decoder)

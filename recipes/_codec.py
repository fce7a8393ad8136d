"""What the codec recipes share: a transformers model built or loaded, and one program with two methods.

``encode`` takes a mono waveform `(1, samples)` and gives `(1, frames, codebooks)` int64 codes, one frame every
`hop` samples; ``decode`` takes such codes and gives the waveform `(1, frames * hop)`. The codes are laid out frames
first, as a mel is, so that the runtime cuts both into windows along the same axis (`runtime.Codec` gives them as
transformers does, `(codebooks, frames)`). A family declares its config, its hop and codebooks, and its two export
wrappers (in `_modules`).

A model that runs on its own chunks (EnCodec at 48 kHz: stereo, 1 s chunks, each normalized by its loudness)
declares them (`chunks`): its methods then take one chunk, `(1, channels, samples)` to codes and the chunk's scale,
and back (`audiodeploy.program.description.CodecChunks`).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from typing import TYPE_CHECKING

from audiodeploy.program.description import CodecChunks

from ._transformers import synthetic_or_loaded, transformers_class
from ._vocoder import audible_synthetic_init
from .errors import LengthRangeError
from .registry import Recipe
from .spec import (
    CODES_OUTPUT,
    ArchitectureT,
    BuildRequest,
    BuiltDecoder,
    BuiltModel,
    InputSpec,
    LengthRange,
    fresh_state,
    waveform_input,
)

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel


class CodecRecipe(Recipe[ArchitectureT]):
    """Shared build logic of the codecs."""

    task = "codec"
    input_kind = "waveform"
    output = CODES_OUTPUT
    sources = ("transformers",)
    default_length_range = LengthRange(1.0, 10.0)
    # Decoded waveform samples in [-1, 1]; the codes must be equal.
    atol = 1e-3

    transformers_model_type: str
    transformers_model_class_name: str
    zero_started_codebooks: str | None = None
    """The name of the buffers that hold a codebook transformers starts at zero (running means, learnt by EMA):
    every code would be 0 and every decoded frame silence, so synthetic weights draw them."""

    @abstractmethod
    def transformers_config(self, architecture: ArchitectureT) -> PretrainedConfig:
        """The transformers config of `architecture`."""

    @abstractmethod
    def hop_length(self, config: PretrainedConfig) -> int:
        """Waveform samples per frame of codes."""

    @abstractmethod
    def codebooks(self, config: PretrainedConfig, architecture: ArchitectureT) -> tuple[int, int]:
        """How many codebooks the codes of `architecture`'s variant have (a checkpoint's `config`), and how many
        entries each."""

    @abstractmethod
    def export_modules(self, model: PreTrainedModel, codebooks: int) -> tuple[nn.Module, nn.Module]:
        """The ``encode`` (to `codebooks` codebooks) and ``decode`` wrappers of `model`."""

    def long_run_modules(self, model: PreTrainedModel, codebooks: int) -> tuple[nn.Module, nn.Module] | None:
        """The model's own encode and decode over a whole input, where `export_modules` take one window that carries
        a state to the next, or one of the model's chunks (the eager reference of the runtime's windows or chunks
        on long audio); None (the default) otherwise."""
        return None

    def synthetic_init(self, model: PreTrainedModel) -> None:
        """Redraw what transformers' initialization leaves silent, from the global RNG: every convolution
        (`audible_synthetic_init`; std 0.02 gives a near-silent decoder, against which the tolerance would say
        nothing), and the `zero_started_codebooks` (unit normal)."""
        import torch

        audible_synthetic_init(model)
        if self.zero_started_codebooks is None:
            return
        for name, buffer in model.named_buffers():
            if name.rpartition(".")[2] == self.zero_started_codebooks:
                with torch.no_grad():
                    buffer.normal_()

    def check_length_range(self, length_range: LengthRange, hop: int, sample_rate: int) -> None:
        """Raise `LengthRangeError` for a range the family cannot export; any range `waveform_input` takes, by
        default."""

    def chunks(self, config: PretrainedConfig) -> tuple[CodecChunks, LengthRange] | None:
        """The model's own chunks and the length of one, when `config` runs on them; None (the default): the
        program takes the requested length range and the runtime cuts windows."""
        return None

    def _build(self, request: BuildRequest[ArchitectureT]) -> BuiltModel:
        import torch

        from ._carried_state import carried_state

        model_class = transformers_class(self.transformers_model_class_name)
        model, provenance = synthetic_or_loaded(
            request,
            self.name,
            model_class,
            self.transformers_model_type,
            lambda: self.transformers_config(request.variant.architecture),
            self.synthetic_init,
        )
        notes: tuple[str, ...] = ()
        if request.weights is None:
            notes = ("synthetic convolution weights are LeCun-normal (std 1/sqrt(fan-in)): the codes are noise",)
        config = model.config
        hop, rate = self.hop_length(config), int(config.sampling_rate)
        chunks = self.chunks(config)
        if chunks is not None:
            if request.length_range not in (self.default_length_range, chunks[1]):
                raise LengthRangeError(
                    f"length range {request.length_range}: this model runs on its own chunks of {chunks[1]}, which "
                    "its program takes one at a time; export it without --seconds, --min-seconds and --max-seconds "
                    f"(bench one chunk: --seconds {chunks[1].max_seconds:g})"
                )
            request = dataclasses.replace(request, length_range=chunks[1])
        self.check_length_range(request.length_range, hop, rate)
        codebooks, codebook_size = self.codebooks(config, request.variant.architecture)
        spec = waveform_input(rate, hop, request.length_range, int(getattr(config, "audio_channels", 1)))
        encode, decode = self.export_modules(model.eval(), codebooks)
        built = self._package(request, encode, spec, provenance, notes)
        encode_carried, decode_carried = carried_state(encode), carried_state(decode)
        long_run = self.long_run_modules(model, codebooks)
        if long_run is not None:
            built = dataclasses.replace(built, long_run=long_run[0].eval())
        if encode_carried is not None:
            # Its windows overlap by the method's lead, which the runtime reads from the carried state.
            built = dataclasses.replace(
                built,
                example_inputs=(*built.example_inputs, *fresh_state(encode_carried)),
                dynamic_shapes=(*built.dynamic_shapes, *({},) * len(encode_carried.input_shapes)),
                carried=encode_carried,
                window_overlap=None,
            )
        codes = InputSpec(
            kind="codes",
            layout=("batch", "frames", "codebooks"),
            sample_rate=rate,
            samples_per_step=hop,
            length_multiple=1,
            min_length=spec.min_length // hop,
            max_length=spec.max_length // hop,
            feature_size=codebooks,
        )
        example_codes = codes.random_inputs(codes.example_length, request.seed, codebook_size)
        scaled = chunks is not None and chunks[0].scaled
        # A scaled decoder also takes the chunk's loudness (a speech level), a carried one its first window's state.
        after = (torch.full((1, 1), 0.1),) if scaled else fresh_state(decode_carried)
        decoder = BuiltDecoder(
            module=decode.eval(),
            example_inputs=(*example_codes, *after),
            dynamic_shapes=(*codes.dynamic_shapes(), *({},) * len(after)),
            input=codes,
            codebook_size=codebook_size,
            chunks=None if chunks is None else chunks[0],
            carried=decode_carried,
            long_run=None if long_run is None else long_run[1].eval(),
        )
        return dataclasses.replace(built, decoder=decoder)

"""What the vocoder recipes share: synthetic or loaded transformers weights, mel input, waveform output.

Declaring a vocoder imports neither transformers nor torch: the build imports them, and the export wrappers
from `_modules`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Protocol, cast

from audiodeploy.program.mel import MelSpectrogram

from ._transformers import synthetic_or_loaded, transformers_class
from .registry import Recipe
from .spec import (
    WAVEFORM_OUTPUT,
    ArchitectureT,
    BuildRequest,
    BuiltModel,
    InputSpec,
    LengthRange,
    Variant,
    mel_input,
)

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel


class _WeightNormed(Protocol):
    def apply_weight_norm(self) -> None: ...


def count_parametrized_convolutions(model: nn.Module, parametrization: type[nn.Module]) -> int:
    """How many convolutions of `model` have their weight computed by a `parametrization` instance."""
    import torch
    from torch import nn

    count = 0
    for module in model.modules():
        if not isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):
            continue
        if not torch.nn.utils.parametrize.is_parametrized(module, "weight"):
            continue
        parametrizations = cast(nn.ModuleDict, module.parametrizations)
        weight = cast(nn.ModuleList, parametrizations["weight"])
        count += any(isinstance(p, parametrization) for p in weight)
    return count


def audible_synthetic_init(model: nn.Module) -> None:
    """Redraw every convolution weight LeCun-normal (std 1/sqrt(fan-in)) and zero its bias, from the global RNG.

    transformers initializes vocoder convolutions with std 0.01 (`initializer_range`), under which a synthetic
    HiFi-GAN outputs about 1e-5 and a tiny one 1e-8: silence, against which any tolerance is vacuous. With
    fan-in scaling the synthetic waveform has speech-like amplitude (standard deviation 0.2-0.6, below tanh
    saturation), so comparisons with a lowered program mean something. The fan-in of a transposed convolution
    is what one output sample sums over: in_channels * kernel / stride. A weight computed by a parametrization
    (EnCodec's `weight_norm`) is assigned, which sets the parameters it is computed from (its `right_inverse`).
    """
    import torch
    from torch import nn
    from torch.nn.utils import parametrize

    for module in model.modules():
        if isinstance(module, nn.ConvTranspose1d):
            fan_in = module.in_channels * module.kernel_size[0] / module.stride[0]
        elif isinstance(module, nn.Conv1d):
            fan_in = module.in_channels // module.groups * module.kernel_size[0]
        else:
            continue
        with torch.no_grad():
            if parametrize.is_parametrized(module, "weight"):
                module.weight = torch.randn_like(module.weight) * fan_in**-0.5
            else:
                module.weight.normal_(0.0, fan_in**-0.5)
            if module.bias is not None:
                module.bias.zero_()


class VocoderRecipe(Recipe[ArchitectureT]):
    """Shared build logic of the vocoders; a family declares its config, front end and export wrapper."""

    task = "vocoder"
    input_kind = "mel"
    output = WAVEFORM_OUTPUT
    sources = ("transformers",)
    # Durations of the synthesized audio; the mel input covers the same span, one frame per hop.
    default_length_range = LengthRange(1.0, 10.0)
    # Waveform samples in [-1, 1] of fp32 XNNPACK against eager PyTorch.
    atol = 1e-3
    # int8-static only, and fp32 stays the default export: every GEMM of a HiFi-GAN is a 1-D or transposed
    # convolution. XNNPACK 1.5.1 runs no transposed one dynamically quantized (the 1-D ones only as the 2-D
    # convolutions passes/conv1d_as_conv2d.py writes), and int8-dynamic is not measured on vocoders.
    # int8-static quantizes all 74 of tiny speecht5-hifigan in one delegate; calibrated on speech-like
    # audio through `mel`, the tiny models keep a waveform SNR of about 25 dB (speecht5-hifigan) to 31 dB (the
    # original HiFi-GAN) on held-out audio, but calibrated on noise mels the original falls to 9 dB: calibrate on
    # real recordings (tests/recipes/test_quantized.py). 25 dB is audible: fp32 stays the default export.
    int8_schemes: tuple[str, ...] = ("int8-static",)

    transformers_model_type: str
    """`model_type` of the family's config.json; weights of another type are refused."""
    transformers_model_class_name: str
    """The family's model class in transformers, e.g. "SpeechT5HifiGan" (see `transformers_model_class`)."""

    @property
    def transformers_model_class(self) -> type[PreTrainedModel]:
        """The class `transformers_model_class_name` names; importing transformers happens here."""
        return transformers_class(self.transformers_model_class_name)

    @abstractmethod
    def transformers_config(self, architecture: ArchitectureT) -> PretrainedConfig:
        """The transformers config of `architecture`."""

    @abstractmethod
    def front_end(self, model: PreTrainedModel, architecture: ArchitectureT) -> MelSpectrogram:
        """The mel front end the model takes, from its (possibly loaded) config."""

    def parametrize_convolutions(self, model: PreTrainedModel, architecture: ArchitectureT) -> None:
        """Compute the convolution weights from parameters as the variant says, in place. By default as trained
        checkpoints store them: transformers' `apply_weight_norm()` puts every convolution of the generator
        under `torch.nn.utils.parametrizations.weight_norm`."""
        cast(_WeightNormed, model).apply_weight_norm()

    @abstractmethod
    def export_module(
        self, model: PreTrainedModel, architecture: ArchitectureT, spec: InputSpec, seed: int
    ) -> nn.Module:
        """Wrap the parametrized model: mel `(1, frames, bins)` in, waveform `(1, samples)` out."""

    def check_loadable(self, variant: Variant[ArchitectureT]) -> None:
        """Raise `WeightsError` when `variant` cannot take loaded weights."""

    def _build(self, request: BuildRequest[ArchitectureT]) -> BuiltModel:
        architecture = request.variant.architecture
        model_class = self.transformers_model_class
        if request.weights is not None:
            self.check_loadable(request.variant)
        model, provenance = synthetic_or_loaded(
            request,
            self.name,
            model_class,
            self.transformers_model_type,
            lambda: self.transformers_config(architecture),
            audible_synthetic_init,
        )
        notes: tuple[str, ...] = ()
        if request.weights is None:
            notes = (
                "synthetic convolution weights are LeCun-normal (std 1/sqrt(fan-in)) so the waveform is audible noise",
            )
        mel = self.front_end(model, architecture)
        spec = mel_input(mel.sample_rate, mel.hop_length, mel.mel_bins, request.length_range)
        self.parametrize_convolutions(model, architecture)
        module = self.export_module(model, architecture, spec, request.seed)
        return self._package(request, module, spec, provenance, notes, mel=mel)

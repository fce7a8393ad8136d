"""SpeechT5's HiFi-GAN vocoder (`speecht5-hifigan`): log-mel spectrogram to 16 kHz waveform, from transformers'
`SpeechT5HifiGan`. (The original HiFi-GAN V1-V3 at 22.05 kHz, in its repository's checkpoint format, is the
`hifigan` recipe, in recipes/hifigan.py.)

The generator is built as trained checkpoints store it: every convolution's weight computed from parameters
by `torch.nn.utils.parametrizations.weight_norm` (transformers' `apply_weight_norm()` uses that
parametrization when torch has it, as torch 2.14 does). The `spectral-norm` variant computes every
convolution's weight with `parametrizations.spectral_norm` instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from audiodeploy.program.mel import MelSpectrogram

from ._vocoder import VocoderRecipe
from .errors import WeightsError
from .registry import register
from .spec import InputSpec, Variant, tiny_variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedModel, SpeechT5HifiGanConfig

ConvolutionNorm = Literal["weight_norm", "spectral_norm"]


@dataclass(frozen=True)
class SpeechT5HifiGanArchitecture:
    """The generator's hyperparameters (transformers `SpeechT5HifiGanConfig` names) and its mel front end."""

    mel_bins: int
    """`model_in_dim`."""
    sample_rate: int
    """`sampling_rate`."""
    upsample_initial_channel: int
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    leaky_relu_slope: float
    normalize_before: bool
    """Standardize the mel with the checkpoint's `mean`/`scale` buffers (identity until weights are loaded)."""
    convolution_norm: ConvolutionNorm
    """Parametrization of every convolution's weight."""
    mel_win_length: int
    """Analysis window in samples (`SpeechT5FeatureExtractor.win_length`, 64 ms)."""
    mel_fmin: float
    mel_fmax: float

    @property
    def hop_length(self) -> int:
        """Samples per mel frame: the product of the upsampling rates."""
        return math.prod(self.upsample_rates)

    def tiny(self) -> SpeechT5HifiGanArchitecture:
        """Test size: the same upsampling, with 32 → 2 channels instead of 512 → 32 and the first two residual
        kernels and dilations (38 convolutions instead of 78: every kind of layer, at half the graph, since a
        lowering's time grows with the node count, not the channels)."""
        return replace(
            self,
            upsample_initial_channel=32,
            resblock_kernel_sizes=self.resblock_kernel_sizes[:2],
            resblock_dilation_sizes=tuple(dilations[:2] for dilations in self.resblock_dilation_sizes[:2]),
        )


# transformers' SpeechT5HifiGanConfig defaults, which are the configuration of microsoft/speecht5_hifigan: the
# HiFi-GAN V1 generator width (512 channels, resblock kernels 3/7/11 with dilations 1/3/5) upsampling 4×4×4×4
# = 256 samples per frame at 16 kHz. The mel front end is SpeechT5FeatureExtractor's defaults.
_V1 = SpeechT5HifiGanArchitecture(
    mel_bins=80,
    sample_rate=16_000,
    upsample_initial_channel=512,
    upsample_rates=(4, 4, 4, 4),
    upsample_kernel_sizes=(8, 8, 8, 8),
    resblock_kernel_sizes=(3, 7, 11),
    resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)),
    leaky_relu_slope=0.1,
    normalize_before=True,
    convolution_norm="weight_norm",
    mel_win_length=1024,
    mel_fmin=80.0,
    mel_fmax=7600.0,
)

V1 = Variant(
    name="v1",
    description="HiFi-GAN V1-size generator, 12.7 M parameters, 78 weight-normalized convolutions, 16 kHz",
    checkpoint="microsoft/speecht5_hifigan",
    architecture=_V1,
)

# Spectral norm caps every convolution's gain at 1, so the synthetic generator's waveform is about 100 times
# quieter (standard deviation ~3e-3) than the weight-normalized one's; its tolerance scales down with it.
_SPECTRAL_NORM_ATOL = 1e-5

SPECTRAL_NORM = Variant(
    name="spectral-norm",
    description="the v1 generator with every convolution spectral-normalized instead (no published weights)",
    checkpoint="microsoft/speecht5_hifigan",
    architecture=replace(_V1, convolution_norm="spectral_norm"),
    atol=_SPECTRAL_NORM_ATOL,
)


@register
class SpeechT5HifiGanRecipe(VocoderRecipe[SpeechT5HifiGanArchitecture]):
    name = "speecht5-hifigan"
    description = "SpeechT5's HiFi-GAN vocoder (transformers SpeechT5HifiGan): 80-bin log-mel to 16 kHz waveform"
    variants = (
        V1,
        SPECTRAL_NORM,
        tiny_variant("tiny", V1, "test size of 'v1': 32 initial channels, two residual kernels, weight norm"),
        tiny_variant(
            "tiny-spectral-norm",
            SPECTRAL_NORM,
            "test size of 'spectral-norm': 32 initial channels, two residual kernels, spectral norm",
        ),
    )
    sample_rate = 16_000
    transformers_model_type = "speecht5_hifigan"
    transformers_model_class_name = "SpeechT5HifiGan"

    def transformers_config(self, architecture: SpeechT5HifiGanArchitecture) -> SpeechT5HifiGanConfig:
        from transformers import SpeechT5HifiGanConfig

        return SpeechT5HifiGanConfig(
            model_in_dim=architecture.mel_bins,
            sampling_rate=architecture.sample_rate,
            upsample_initial_channel=architecture.upsample_initial_channel,
            upsample_rates=list(architecture.upsample_rates),
            upsample_kernel_sizes=list(architecture.upsample_kernel_sizes),
            resblock_kernel_sizes=list(architecture.resblock_kernel_sizes),
            resblock_dilation_sizes=[list(d) for d in architecture.resblock_dilation_sizes],
            leaky_relu_slope=architecture.leaky_relu_slope,
            normalize_before=architecture.normalize_before,
        )

    def front_end(self, model: PreTrainedModel, architecture: SpeechT5HifiGanArchitecture) -> MelSpectrogram:
        config = model.config
        return MelSpectrogram(
            flavor="speecht5",
            sample_rate=config.sampling_rate,
            mel_bins=config.model_in_dim,
            hop_length=math.prod(config.upsample_rates),
            win_length=architecture.mel_win_length,
            fmin=architecture.mel_fmin,
            fmax=architecture.mel_fmax,
        )

    def parametrize_convolutions(self, model: PreTrainedModel, architecture: SpeechT5HifiGanArchitecture) -> None:
        if architecture.convolution_norm == "weight_norm":
            super().parametrize_convolutions(model, architecture)
            return
        from torch import nn
        from torch.nn.utils import parametrizations

        for module in model.modules():
            if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):
                # spectral_norm picks the output-channel dimension itself (dim 1 for transposed convolutions).
                parametrizations.spectral_norm(module)

    def export_module(
        self, model: PreTrainedModel, architecture: SpeechT5HifiGanArchitecture, spec: InputSpec, seed: int
    ) -> nn.Module:
        from ._modules import SpeechT5HifiGanWaveform

        assert isinstance(model, self.transformers_model_class)
        return SpeechT5HifiGanWaveform(model)

    def check_loadable(self, variant: Variant[SpeechT5HifiGanArchitecture]) -> None:
        if variant.architecture.convolution_norm == "spectral_norm":
            # Published HiFi-GAN checkpoints store plain weights; spectral norm would divide them by their
            # largest singular value and change what the checkpoint computes.
            raise WeightsError(
                f"variant '{variant.name}' has no trained weights (spectral norm would change a checkpoint's output): "
                "load weights with --variant v1"
            )

"""UnivNet vocoder: 100-bin log-mel spectrogram to 24 kHz waveform, from transformers' `UnivNetModel`.

Built as trained checkpoints store it: transformers' `apply_weight_norm()` puts every convolution of the
generator and its kernel predictors under `torch.nn.utils.parametrizations.weight_norm`.

UnivNet also takes a Gaussian noise sequence, one vector per mel frame. The exported module draws it once, at
build time from the build seed, for the longest input of the exported range, and uses its first `frames`
vectors: the program takes a mel spectrogram alone and its output is deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from audiodeploy.program.mel import MelSpectrogram

from ._vocoder import VocoderRecipe
from .registry import register
from .spec import InputSpec, Variant, tiny_variant

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedModel, UnivNetConfig


@dataclass(frozen=True)
class UnivNetArchitecture:
    """The generator's hyperparameters (transformers `UnivNetConfig` names) and its mel front end."""

    noise_channels: int
    """`model_in_channels`: size of each noise vector."""
    hidden_channels: int
    """`model_hidden_channels`: 32 for UnivNet-c32."""
    mel_bins: int
    """`num_mel_bins`."""
    resblock_kernel_sizes: tuple[int, ...]
    resblock_stride_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    kernel_predictor_num_blocks: int
    kernel_predictor_hidden_channels: int
    kernel_predictor_conv_size: int
    leaky_relu_slope: float
    sample_rate: int
    """`UnivNetFeatureExtractor.sampling_rate`: the config itself does not record it."""
    mel_win_length: int
    """`UnivNetFeatureExtractor.win_length` (and `filter_length`), in samples."""

    @property
    def hop_length(self) -> int:
        """Samples per mel frame: the product of the residual blocks' strides."""
        return math.prod(self.resblock_stride_sizes)

    def tiny(self) -> UnivNetArchitecture:
        """Test size: the same blocks, strides and kernels with 8 channels everywhere, the first two dilations of
        each block and one kernel-predictor block (every kind of layer, at half the graph: a lowering's time
        grows with the node count, not the channels)."""
        return replace(
            self,
            noise_channels=8,
            hidden_channels=8,
            kernel_predictor_hidden_channels=8,
            resblock_dilation_sizes=tuple(dilations[:2] for dilations in self.resblock_dilation_sizes),
            kernel_predictor_num_blocks=1,
        )


# transformers' UnivNetConfig defaults, documented as the configuration of dg845/univnet-dev (UnivNet-c32
# trained on LibriTTS); the front end is UnivNetFeatureExtractor's defaults (24 kHz, 1024-sample window).
_C32 = UnivNetArchitecture(
    noise_channels=64,
    hidden_channels=32,
    mel_bins=100,
    resblock_kernel_sizes=(3, 3, 3),
    resblock_stride_sizes=(8, 8, 4),
    resblock_dilation_sizes=((1, 3, 9, 27), (1, 3, 9, 27), (1, 3, 9, 27)),
    kernel_predictor_num_blocks=3,
    kernel_predictor_hidden_channels=64,
    kernel_predictor_conv_size=3,
    leaky_relu_slope=0.2,
    sample_rate=24_000,
    mel_win_length=1024,
)

C32 = Variant(
    name="c32",
    description="UnivNet-c32, 14.8 M parameters, 44 weight-normalized convolutions, 24 kHz",
    checkpoint="dg845/univnet-dev",
    architecture=_C32,
)


@register
class UnivNet(VocoderRecipe[UnivNetArchitecture]):
    name = "univnet"
    description = "UnivNet vocoder: 100-bin log-mel spectrogram to 24 kHz waveform"
    variants = (
        C32,
        tiny_variant("tiny", C32, "test size of 'c32': 8 channels, two dilations per block"),
    )
    sample_rate = 24_000
    # No int8: int8-dynamic quantizes no GEMM (1-D convolutions only, see VocoderRecipe), and int8-static gives
    # noise (tiny c32 calibrated on speech-like mels: waveform SNR 2 dB on held-out audio, measured before the
    # location-variable convolution became bmm, when fp32 too had 51 delegates):
    # the kernel predictor's outputs are the location-variable convolutions' weights, so its int8 error multiplies.
    int8_schemes = ()
    # c32 with synthetic weights amplifies fp32 rounding about 10^4-fold: eager fp32 is itself 7-9e-4 from a float64
    # run, and its XNNPACK programs are 0.5-1.6e-3 from eager, before LocationVariableConvAsBmmPass as after it (the
    # export's own check: 1.1e-3 before, 1.3e-3 after), over the vocoders' 1e-3.
    atol = 3e-3
    transformers_model_type = "univnet"
    transformers_model_class_name = "UnivNetModel"

    def transformers_config(self, architecture: UnivNetArchitecture) -> UnivNetConfig:
        from transformers import UnivNetConfig

        return UnivNetConfig(
            model_in_channels=architecture.noise_channels,
            model_hidden_channels=architecture.hidden_channels,
            num_mel_bins=architecture.mel_bins,
            resblock_kernel_sizes=list(architecture.resblock_kernel_sizes),
            resblock_stride_sizes=list(architecture.resblock_stride_sizes),
            resblock_dilation_sizes=[list(d) for d in architecture.resblock_dilation_sizes],
            kernel_predictor_num_blocks=architecture.kernel_predictor_num_blocks,
            kernel_predictor_hidden_channels=architecture.kernel_predictor_hidden_channels,
            kernel_predictor_conv_size=architecture.kernel_predictor_conv_size,
            leaky_relu_slope=architecture.leaky_relu_slope,
        )

    def front_end(self, model: PreTrainedModel, architecture: UnivNetArchitecture) -> MelSpectrogram:
        config = model.config
        return MelSpectrogram(
            flavor="univnet",
            sample_rate=architecture.sample_rate,
            mel_bins=config.num_mel_bins,
            hop_length=math.prod(config.resblock_stride_sizes),
            win_length=architecture.mel_win_length,
            fmin=0.0,
            fmax=None,
        )

    def export_module(
        self, model: PreTrainedModel, architecture: UnivNetArchitecture, spec: InputSpec, seed: int
    ) -> nn.Module:
        import torch

        from ._modules import UnivNetWaveform

        assert isinstance(model, self.transformers_model_class)
        generator = torch.Generator().manual_seed(seed)
        noise = torch.randn((1, spec.max_length, model.config.model_in_channels), generator=generator)
        return UnivNetWaveform(model, noise)

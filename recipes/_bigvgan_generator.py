"""The BigVGAN generator (Lee et al., 2022; NVIDIA/BigVGAN v2), written here from the published architecture.

The module and parameter names are those of NVIDIA/BigVGAN's `bigvgan.py`, so its `bigvgan_generator.pt`
(`{"generator": state_dict}`) loads with `load_state_dict` as it is:

    conv_pre                        Conv1d(mels → C, 7, padding 3)
    ups.i.0                         ConvTranspose1d(C/2^i → C/2^(i+1), kernel k_i, stride u_i, padding (k_i - u_i) / 2)
    resblocks.(i * K + j)           the j-th of the K anti-aliased multi-periodicity (AMP) blocks after ups.i:
        AMPBlock1: convs1.m         Conv1d(dilation d_j[m]) and convs2.m Conv1d(dilation 1);
                   activations.n    2 per m: x += convs2.m(act(convs1.m(act(x))))
        AMPBlock2: convs.m          Conv1d(dilation d_j[m]), activations.m: x += convs.m(act(x))
    activation_post                 an anti-aliased activation
    conv_post                       Conv1d(C/2^n → 1, 7, padding 3, bias only with use_bias_at_final)

    forward: conv_pre; per stage i: ups.i (no activation before it, unlike HiFi-GAN), the mean of its K AMP
    blocks; activation_post; conv_post; tanh (use_tanh_at_final) or a clamp to [-1, 1].

Every anti-aliased activation (`Activation1d`, alias_free_activation/torch) upsamples 2x, applies Snake or
SnakeBeta, and downsamples 2x:

    upsample.filter                 [1, 1, 12] kaiser-sinc low-pass (cutoff 1/4, half width 0.3), a buffer
    upsample                        replicate-pad 5 each side, depthwise conv_transpose1d (stride 2) of the filter,
                                    times 2, the first and last 15 samples dropped: 2T samples from T
    act.alpha (act.beta)            [C] Snake: x + sin(alpha x)^2 / (alpha + 1e-9); SnakeBeta: ... / (beta + 1e-9);
                                    with snake_logscale, alpha = exp(act.alpha) and beta = exp(act.beta)
    downsample.lowpass.filter       [1, 1, 12] the same low-pass, a buffer
    downsample                      replicate-pad 5 left and 6 right, depthwise conv1d (stride 2) of the filter

Written to compute what the original computes, operation for operation, with three restatements that
give the same bits (checked against NVIDIA/BigVGAN's modules: a difference of 0.0):

- the upsampler's transposed convolution crops through its `padding` argument rather than a slice of its
  output (a transposed convolution's padding is that crop, and XNNPACK declines a slice of a dynamic
  length), and it pads 3 rather than 5 and crops 11 rather than 15: the two outermost replicated samples
  reach only cropped outputs (and with padding 15 the lowering could not split the transposed convolution
  into its phases without a crop);
- the upsampler's gain of 2 multiplies its filter rather than its output (scaling by a power of two is
  exact, and it saves a pass over every upsampled signal);
- the filters reach the convolutions as `[C, 1, 12]` tensors (`depthwise`, not saved: the state dict
  holds the `[1, 1, 12]` filters as the original does), expanded from the loaded filter on every
  `load_state_dict`. The original expands the filter in `forward`; XNNPACK takes a depthwise convolution
  only with a static `[C, 1, K]` weight, and the lowering's fold of computed weights refuses one that grows
  the program (a `[1, 1, 12]` source written as `[C, 1, 12]`).

Weight norm is the legacy `torch.nn.utils.weight_norm` (parameters `weight_g`, `weight_v`; dim 0, also for the
transposed convolutions), applied by `apply_weight_norm` after the plain convolutions are built, so that
synthetic weights can be drawn on plain weights first.

This module imports torch; recipes import it when they build.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ._hifigan_generator import HifiGanGenerator, _conv, upsampling_padding

ResblockType = Literal["1", "2"]
ActivationType = Literal["snake", "snakebeta"]

# The anti-aliased activation's resampling (Activation1d's defaults, which BigVGAN never changes).
RESAMPLE_RATIO = 2
RESAMPLE_KERNEL_SIZE = 12
# activations.py: `self.no_div_by_zero`.
SNAKE_EPSILON = 1e-9


def kaiser_sinc_filter(cutoff: float, half_width: float, kernel_size: int) -> torch.Tensor:
    """`[1, 1, kernel_size]` Kaiser-windowed sinc low-pass, normalized to sum 1 (filter.py
    `kaiser_sinc_filter1d`, after julius' `LowPassFilters`)."""
    even = kernel_size % 2 == 0
    half_size = kernel_size // 2
    # Kaiser's formula for the window's beta from the transition band's attenuation.
    delta_f = 4 * half_width
    attenuation = 2.285 * (half_size - 1) * math.pi * delta_f + 7.95
    if attenuation > 50.0:
        beta = 0.1102 * (attenuation - 8.7)
    elif attenuation >= 21.0:
        beta = 0.5842 * (attenuation - 21) ** 0.4 + 0.07886 * (attenuation - 21.0)
    else:
        beta = 0.0
    window = torch.kaiser_window(kernel_size, beta=beta, periodic=False)
    time = torch.arange(-half_size, half_size) + 0.5 if even else torch.arange(kernel_size) - half_size
    if cutoff == 0:
        return torch.zeros(1, 1, kernel_size)
    taps = 2 * cutoff * window * torch.sinc(2 * cutoff * time)
    return (taps / taps.sum()).view(1, 1, kernel_size)


class _DepthwiseFilter(nn.Module):
    """Holds `filter` ([1, 1, K], a saved buffer) and `depthwise` ([C, 1, K], an attribute that is not saved),
    kept equal on every load and conversion.

    `depthwise` is a plain tensor attribute, which `torch.export` lifts as a constant, rather than a
    non-persistent buffer: ExecuTorch 1.5.1 fails to lower a non-persistent buffer that a delegated
    convolution reads ("Non-persistent buffer ... is in the state dict").
    """

    filter: torch.Tensor

    def __init__(self, channels: int, taps: torch.Tensor, gain: float = 1.0) -> None:
        super().__init__()
        self.channels = channels
        self.gain = gain
        self.register_buffer("filter", taps)
        self.depthwise = self._expanded()

    def _expanded(self) -> torch.Tensor:
        return (self.gain * self.filter.detach()).expand(self.channels, -1, -1).contiguous()

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.depthwise = self._expanded()

    def _apply(self, fn: Any, recurse: bool = True) -> _DepthwiseFilter:
        super()._apply(fn, recurse)
        self.depthwise = self._expanded()
        return self


class UpSample1d(_DepthwiseFilter):
    """`[B, C, T]` → `[B, C, 2T]`: replicate-pad, depthwise transposed convolution of the low-pass, crop."""

    def __init__(self, channels: int, ratio: int = RESAMPLE_RATIO, kernel_size: int = RESAMPLE_KERNEL_SIZE) -> None:
        if ratio & (ratio - 1):
            # The gain is applied to the filter, which equals scaling the output only for a power of two.
            raise ValueError(f"the upsampling ratio should be a power of two, not {ratio}")
        super().__init__(channels, kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel_size), gain=ratio)
        self.ratio = ratio
        pad = kernel_size // ratio - 1
        # The original slices [pad_left : -pad_right] off the transposed convolution's output; with the kernel's
        # even size both are the same, which is what a transposed convolution's padding crops.
        pad_left = pad * ratio + (kernel_size - ratio) // 2
        pad_right = pad * ratio + (kernel_size - ratio + 1) // 2
        if pad_left != pad_right:
            raise ValueError(f"an upsampling kernel of {kernel_size} at ratio {ratio} crops unevenly")
        # The outermost replicated samples reach only cropped outputs (the first kept output reads from padded
        # sample ceil((crop - K + 1) / ratio) on): pad by that many fewer, and crop ratio times as many fewer.
        unread = max(0, -(-(pad_left - kernel_size + 1) // ratio))
        self.pad = pad - unread
        self.crop = pad_left - ratio * unread

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (self.pad, self.pad), mode="replicate")
        channels = x.shape[1]
        return F.conv_transpose1d(x, self.depthwise, stride=self.ratio, padding=self.crop, groups=channels)


class LowPassFilter1d(_DepthwiseFilter):
    """Replicate-pad, then the depthwise low-pass convolution with `stride` (filter.py `LowPassFilter1d`)."""

    def __init__(self, channels: int, cutoff: float, half_width: float, stride: int, kernel_size: int) -> None:
        super().__init__(channels, kaiser_sinc_filter(cutoff, half_width, kernel_size))
        even = kernel_size % 2 == 0
        self.pad_left = kernel_size // 2 - int(even)
        self.pad_right = kernel_size // 2
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (self.pad_left, self.pad_right), mode="replicate")
        return F.conv1d(x, self.depthwise, stride=self.stride, groups=x.shape[1])


class DownSample1d(nn.Module):
    """`[B, C, 2T]` → `[B, C, T]` through `lowpass` (its state-dict prefix in the original)."""

    def __init__(self, channels: int, ratio: int = RESAMPLE_RATIO, kernel_size: int = RESAMPLE_KERNEL_SIZE) -> None:
        super().__init__()
        self.lowpass = LowPassFilter1d(channels, 0.5 / ratio, 0.6 / ratio, ratio, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lowpass(x)


class Snake(nn.Module):
    """`x + sin(alpha x)^2 / (alpha + 1e-9)` per channel; `alpha = exp(self.alpha)` in log scale."""

    def __init__(self, channels: int, logscale: bool) -> None:
        super().__init__()
        self.logscale = logscale
        # As the original initializes them: log-scale parameters at 0, linear ones at 1 (alpha = 1 either way).
        self.alpha = nn.Parameter(torch.zeros(channels) if logscale else torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        if self.logscale:
            alpha = torch.exp(alpha)
        return x + (1.0 / (alpha + SNAKE_EPSILON)) * torch.pow(torch.sin(x * alpha), 2)


class SnakeBeta(nn.Module):
    """`x + sin(alpha x)^2 / (beta + 1e-9)` per channel: Snake with its magnitude apart from its frequency."""

    def __init__(self, channels: int, logscale: bool) -> None:
        super().__init__()
        self.logscale = logscale
        initial = torch.zeros(channels) if logscale else torch.ones(channels)
        self.alpha = nn.Parameter(initial.clone())
        self.beta = nn.Parameter(initial.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        beta = self.beta.unsqueeze(0).unsqueeze(-1)
        if self.logscale:
            alpha = torch.exp(alpha)
            beta = torch.exp(beta)
        return x + (1.0 / (beta + SNAKE_EPSILON)) * torch.pow(torch.sin(x * alpha), 2)


def periodic_activation(kind: ActivationType, channels: int, logscale: bool) -> nn.Module:
    return Snake(channels, logscale) if kind == "snake" else SnakeBeta(channels, logscale)


class Activation1d(nn.Module):
    """The anti-aliased activation: upsample 2x, Snake or SnakeBeta, downsample 2x (act.py `Activation1d`)."""

    def __init__(self, activation: nn.Module, channels: int) -> None:
        super().__init__()
        self.act = activation
        self.upsample = UpSample1d(channels)
        self.downsample = DownSample1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.downsample(self.act(self.upsample(x)))


class AMPBlock1(nn.Module):
    """Pairs of a dilated and an undilated convolution, each behind an anti-aliased activation; each pair a
    residual step."""

    def __init__(
        self, channels: int, kernel_size: int, dilations: Sequence[int], activation: ActivationType, logscale: bool
    ) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_conv(channels, kernel_size, d) for d in dilations)
        self.convs2 = nn.ModuleList(_conv(channels, kernel_size, 1) for _ in dilations)
        self.activations = nn.ModuleList(
            Activation1d(periodic_activation(activation, channels, logscale), channels)
            for _ in range(2 * len(dilations))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second = self.activations[::2], self.activations[1::2]
        for dilated, plain, act1, act2 in zip(self.convs1, self.convs2, first, second):
            x = plain(act2(dilated(act1(x)))) + x
        return x


class AMPBlock2(nn.Module):
    """Dilated convolutions, each behind an anti-aliased activation and a residual step."""

    def __init__(
        self, channels: int, kernel_size: int, dilations: Sequence[int], activation: ActivationType, logscale: bool
    ) -> None:
        super().__init__()
        self.convs = nn.ModuleList(_conv(channels, kernel_size, d) for d in dilations)
        self.activations = nn.ModuleList(
            Activation1d(periodic_activation(activation, channels, logscale), channels) for _ in dilations
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, act in zip(self.convs, self.activations):
            x = conv(act(x)) + x
        return x


class BigVGANGenerator(nn.Module):
    """`(batch, mels, frames)` log-mel → `(batch, 1, frames * prod(upsample_rates))` waveform in [-1, 1].

    Built with plain convolutions; `apply_weight_norm()` puts each under the legacy weight norm, as the
    published checkpoints store it, and `remove_weight_norm()` undoes it.
    """

    def __init__(
        self,
        num_mels: int,
        resblock: ResblockType,
        upsample_rates: Sequence[int],
        upsample_kernel_sizes: Sequence[int],
        upsample_initial_channel: int,
        resblock_kernel_sizes: Sequence[int],
        resblock_dilation_sizes: Sequence[Sequence[int]],
        activation: ActivationType,
        snake_logscale: bool,
        use_tanh_at_final: bool,
        use_bias_at_final: bool,
    ) -> None:
        super().__init__()
        block = AMPBlock1 if resblock == "1" else AMPBlock2
        self.num_kernels = len(resblock_kernel_sizes)
        self.use_tanh_at_final = use_tanh_at_final
        self.conv_pre = nn.Conv1d(num_mels, upsample_initial_channel, 7, 1, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        channels = upsample_initial_channel
        for rate, kernel in zip(upsample_rates, upsample_kernel_sizes):
            # A list of one per stage, as the original holds it (state-dict keys ups.i.0.*).
            padding, output_padding = upsampling_padding(kernel, rate)
            upsample = nn.ConvTranspose1d(
                channels, channels // 2, kernel, rate, padding=padding, output_padding=output_padding
            )
            self.ups.append(nn.ModuleList([upsample]))
            channels //= 2
            for kernel_size, dilations in zip(resblock_kernel_sizes, resblock_dilation_sizes):
                self.resblocks.append(block(channels, kernel_size, dilations, activation, snake_logscale))
        self.activation_post = Activation1d(periodic_activation(activation, channels, snake_logscale), channels)
        self.conv_post = nn.Conv1d(channels, 1, 7, 1, padding=3, bias=use_bias_at_final)
        self.hop_length = math.prod(upsample_rates)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        for stage, upsamplers in enumerate(self.ups):
            for upsample in upsamplers:
                x = upsample(x)
            blocks = self.resblocks[stage * self.num_kernels : (stage + 1) * self.num_kernels]
            fused = blocks[0](x)
            for block in blocks[1:]:
                fused = fused + block(x)
            x = fused / self.num_kernels
        x = self.conv_post(self.activation_post(x))
        if self.use_tanh_at_final:
            return torch.tanh(x)
        return torch.clamp(x, min=-1.0, max=1.0)

    # The same walk over the convolutions and the same legacy weight norm as the original HiFi-GAN's, which
    # BigVGAN's generator derives from (the activations' low-pass filters are no convolution modules).
    convolutions = HifiGanGenerator.convolutions
    apply_weight_norm = HifiGanGenerator.apply_weight_norm
    remove_weight_norm = HifiGanGenerator.remove_weight_norm

    def periodic_activations(self) -> Iterator[nn.Module]:
        """Every Snake or SnakeBeta, in state-dict order."""
        return (m for m in self.modules() if isinstance(m, (Snake, SnakeBeta)))


class BigVGANWaveform(nn.Module):
    """`(1, frames, mel_bins)` log-mel → `(1, frames * hop_length)` waveform through `BigVGANGenerator`."""

    def __init__(self, generator: BigVGANGenerator) -> None:
        super().__init__()
        self.generator = generator

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.generator(mel.transpose(1, 2)).squeeze(1)

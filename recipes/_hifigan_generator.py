"""The original HiFi-GAN generator (Kong, Kim and Bae, 2020), written here from the published architecture.

The module and parameter names are those of the original repository's checkpoints (jik876/hifi-gan), so its
`{"generator": state_dict}` files load with `load_state_dict` as they are:

    conv_pre                     Conv1d(mels → C, 7, padding 3)
    ups.i                        ConvTranspose1d(C/2^i → C/2^(i+1), kernel k_i, stride u_i, padding (k_i - u_i) / 2;
                                 see `upsampling_padding` where k_i - u_i is odd)
    resblocks.(i * K + j)        the j-th of the K residual blocks after ups.i, kernel size k_j, dilations d_j:
        type "1": convs1.m       Conv1d(dilation d_j[m]) and convs2.m Conv1d(dilation 1), m = 0, 1, 2;
                                 x += convs2.m(lrelu(convs1.m(lrelu(x))))
        type "2": convs.m        Conv1d(dilation d_j[m]), m = 0, 1; x += convs.m(lrelu(x))
    conv_post                    Conv1d(C/2^n → 1, 7, padding 3)

    forward: conv_pre; per stage i: lrelu(0.1), ups.i, the mean of its K residual blocks (the multi-receptive-
    field fusion); lrelu(0.01, torch's default slope, as the original calls it); conv_post; tanh.

Every convolution is padded to keep its length ("same" padding, (k - 1) * d / 2). Weight norm is the legacy
`torch.nn.utils.weight_norm` (parameters `weight_g`, `weight_v`; dim 0, also for the transposed convolutions,
as the original applies it), applied by `apply_weight_norm` after the plain convolutions are built, so that
synthetic weights can be drawn on plain weights first.

This module imports torch; recipes import it when they build.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

ResblockType = Literal["1", "2"]

LRELU_SLOPE = 0.1
# The original's last activation is `F.leaky_relu(x)` without a slope: torch's default.
FINAL_LRELU_SLOPE = 0.01


def upsampling_padding(kernel: int, rate: int) -> tuple[int, int]:
    """The padding and output padding of an upsampler of `kernel` taps at `rate` that gives exactly `rate` samples
    per input sample: the original's (k - u) / 2 where k - u is even; where it is odd (16 kHz configurations such
    as rates 8, 5, 2, 2 with kernels 16, 10, 4, 4, which the original cannot build), one more sample of padding and
    one of output padding, as the forks that train them do (padding u // 2 + u % 2, output padding u % 2: the
    same where k = 2u)."""
    excess = kernel - rate
    return (excess + 1) // 2, excess % 2


def _same_padding(kernel_size: int, dilation: int) -> int:
    return (kernel_size * dilation - dilation) // 2


def _conv(channels: int, kernel_size: int, dilation: int) -> nn.Conv1d:
    padding = _same_padding(kernel_size, dilation)
    return nn.Conv1d(channels, channels, kernel_size, 1, dilation=dilation, padding=padding)


class ResBlock1(nn.Module):
    """Type "1": three pairs of a dilated and an undilated convolution, each pair a residual step."""

    def __init__(self, channels: int, kernel_size: int, dilations: Sequence[int]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_conv(channels, kernel_size, d) for d in dilations[:3])
        self.convs2 = nn.ModuleList(_conv(channels, kernel_size, 1) for _ in dilations[:3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for dilated, plain in zip(self.convs1, self.convs2):
            x = x + plain(F.leaky_relu(dilated(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
        return x


class ResBlock2(nn.Module):
    """Type "2" (V3): two dilated convolutions, each a residual step."""

    def __init__(self, channels: int, kernel_size: int, dilations: Sequence[int]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(_conv(channels, kernel_size, d) for d in dilations[:2])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, LRELU_SLOPE))
        return x


class HifiGanGenerator(nn.Module):
    """`(batch, mels, frames)` log-mel → `(batch, 1, frames * prod(upsample_rates))` waveform in [-1, 1].

    Built with plain convolutions; `apply_weight_norm()` puts each under the legacy weight norm, as the
    original's checkpoints store it, and `remove_weight_norm()` undoes it, as the original's inference does.
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
    ) -> None:
        super().__init__()
        block = ResBlock1 if resblock == "1" else ResBlock2
        self.num_kernels = len(resblock_kernel_sizes)
        self.conv_pre = nn.Conv1d(num_mels, upsample_initial_channel, 7, 1, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        channels = upsample_initial_channel
        for rate, kernel in zip(upsample_rates, upsample_kernel_sizes):
            padding, output_padding = upsampling_padding(kernel, rate)
            self.ups.append(
                nn.ConvTranspose1d(
                    channels, channels // 2, kernel, rate, padding=padding, output_padding=output_padding
                )
            )
            channels //= 2
            for kernel_size, dilations in zip(resblock_kernel_sizes, resblock_dilation_sizes):
                self.resblocks.append(block(channels, kernel_size, dilations))
        self.conv_post = nn.Conv1d(channels, 1, 7, 1, padding=3)
        self.hop_length = math.prod(upsample_rates)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        for stage, upsample in enumerate(self.ups):
            x = upsample(F.leaky_relu(x, LRELU_SLOPE))
            blocks = self.resblocks[stage * self.num_kernels : (stage + 1) * self.num_kernels]
            fused = blocks[0](x)
            for block in blocks[1:]:
                fused = fused + block(x)
            x = fused / self.num_kernels
        x = self.conv_post(F.leaky_relu(x, FINAL_LRELU_SLOPE))
        return torch.tanh(x)

    def convolutions(self) -> Iterator[nn.Module]:
        """Every convolution, in state-dict order."""
        return (m for m in self.modules() if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)))

    def apply_weight_norm(self) -> None:
        """Every convolution's weight as `weight_g * weight_v / ||weight_v||` (legacy `weight_norm`, dim 0)."""
        with warnings.catch_warnings():
            # torch deprecates the legacy hook in favour of the parametrization, whose parameter names
            # (parametrizations.weight.original0/1) are not the checkpoints'.
            warnings.filterwarnings("ignore", r".*torch\.nn\.utils\.weight_norm.* is deprecated", FutureWarning)
            for conv in self.convolutions():
                torch.nn.utils.weight_norm(conv)

    def remove_weight_norm(self) -> None:
        """Fold every convolution's weight norm into a plain weight (what the original's inference calls)."""
        for conv in self.convolutions():
            torch.nn.utils.remove_weight_norm(conv)


class HifiGanGeneratorWaveform(nn.Module):
    """`(1, frames, mel_bins)` log-mel → `(1, frames * hop_length)` waveform through `HifiGanGenerator`."""

    def __init__(self, generator: HifiGanGenerator) -> None:
        super().__init__()
        self.generator = generator

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.generator(mel.transpose(1, 2)).squeeze(1)

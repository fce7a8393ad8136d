"""The Vocos vocoder (Siuzdak, 2023) with its ConvNeXt backbone and ISTFT head, written here from the published
architecture.

The module and parameter names are those of gemelo-ai/vocos (`vocos/models.py` `VocosBackbone`,
`vocos/modules.py` `ConvNeXtBlock`, `vocos/heads.py` `ISTFTHead`, `vocos/spectral_ops.py` `ISTFT`), so the
`backbone.*` and `head.*` entries of a released `pytorch_model.bin` load with `load_state_dict` as they are:

    backbone.embed               Conv1d(mels → dim, 7, padding 3)
    backbone.norm                LayerNorm(dim, eps 1e-6)
    backbone.convnext.i          ConvNeXt block: x + gamma * pwconv2(gelu(pwconv1(norm(dwconv(x)))))
        dwconv                   Conv1d(dim → dim, 7, padding 3, groups dim): depthwise
        norm                     LayerNorm(dim, eps 1e-6)
        pwconv1, pwconv2         Linear(dim → intermediate), Linear(intermediate → dim)
        gamma                    (dim,) layer scale, initialized to 1 / num_layers
    backbone.final_layer_norm    LayerNorm(dim, eps 1e-6)
    head.out                     Linear(dim → n_fft + 2): log-magnitude and phase of n_fft / 2 + 1 bins
    head.istft.window            (n_fft,) periodic Hann window (a buffer)

    head: mag = exp(m).clip(max=100), S = mag · (cos p + i sin p),
          audio = torch.istft(S, n_fft, hop, n_fft, window, center=True)   (padding "center")

Two writings differ from the original's and compute the same values. The head splits the linear's output into
magnitude and phase before transposing it, not after (the values are the same; the split of a linear then
becomes two linears, see `SplitAsLinearsPass`). And the spectrum is built as `torch.complex(mag · cos p,
mag · sin p)` rather than `mag * (cos p + 1j * sin p)`: the two are equal bit for bit (the imaginary unit's
zero real part adds exact zeros), and `torch.complex` is what `InverseStftAsConvolutionPass` takes apart.

Only what mel-to-waveform inference runs is here: no AdaLayerNorm (the EnCodec model's bandwidth conditioning),
no ResNet backbone, no IMDCT heads, no "same" padding (`recipes/vocos.py` refuses checkpoints that use them).

This module imports torch; recipes import it when they build.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# The original's LayerNorm epsilon, everywhere.
LAYER_NORM_EPS = 1e-6
# `torch.clip(mag, max=1e2)`: "safeguard to prevent excessively large magnitudes".
MAX_MAGNITUDE = 100.0


class ConvNeXtBlock(nn.Module):
    """`(batch, dim, frames)` → the same: depthwise convolution, LayerNorm, MLP, layer scale, residual."""

    def __init__(self, dim: int, intermediate_dim: int, layer_scale_init_value: float) -> None:
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        # As the original: no layer scale (and no `gamma` parameter) when the initial value is not positive.
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale_init_value)) if layer_scale_init_value > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        x = self.dwconv(x).transpose(1, 2)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        if self.gamma is not None:
            x = self.gamma * x
        return residual + x.transpose(1, 2)


class VocosBackbone(nn.Module):
    """`(batch, mels, frames)` log-mel → `(batch, frames, dim)` features, one per frame."""

    def __init__(
        self, input_channels: int, dim: int, intermediate_dim: int, num_layers: int, layer_scale_init_value: float
    ) -> None:
        super().__init__()
        self.embed = nn.Conv1d(input_channels, dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.convnext = nn.ModuleList(
            ConvNeXtBlock(dim, intermediate_dim, layer_scale_init_value) for _ in range(num_layers)
        )
        self.final_layer_norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.embed(x).transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x)
        return self.final_layer_norm(x.transpose(1, 2))

    def published_init(self) -> None:
        """The original's `_init_weights`, from the global RNG: convolution and linear weights truncated-normal
        with std 0.02 (truncated at ±2, i.e. ±100 std), zero biases."""
        for module in self.modules():
            if isinstance(module, (nn.Conv1d, nn.Linear)):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)


class ISTFT(nn.Module):
    """`torch.istft(center=True)` with a periodic Hann window of `n_fft` (the original's padding "center")."""

    def __init__(self, n_fft: int, hop_length: int) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, spectrum: torch.Tensor) -> torch.Tensor:
        return torch.istft(spectrum, self.n_fft, self.hop_length, self.n_fft, self.window, center=True)


class ISTFTHead(nn.Module):
    """`(batch, frames, dim)` → `(batch, (frames - 1) * hop_length)` waveform through the predicted spectrum."""

    def __init__(self, dim: int, n_fft: int, hop_length: int) -> None:
        super().__init__()
        self.out = nn.Linear(dim, n_fft + 2)
        self.istft = ISTFT(n_fft, hop_length)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        log_magnitude, phase = self.out(x).chunk(2, dim=-1)
        magnitude = torch.exp(log_magnitude).clip(max=MAX_MAGNITUDE)
        real = (magnitude * torch.cos(phase)).transpose(1, 2)
        imaginary = (magnitude * torch.sin(phase)).transpose(1, 2)
        return self.istft(torch.complex(real, imaginary))


class Vocos(nn.Module):
    """The backbone and the head under the original's names (the feature extractor lives in the program's
    description, `MelSpectrogram(flavor="vocos")`)."""

    def __init__(
        self,
        input_channels: int,
        dim: int,
        intermediate_dim: int,
        num_layers: int,
        layer_scale_init_value: float,
        n_fft: int,
        hop_length: int,
    ) -> None:
        super().__init__()
        self.backbone = VocosBackbone(input_channels, dim, intermediate_dim, num_layers, layer_scale_init_value)
        self.head = ISTFTHead(dim, n_fft, hop_length)

    def decode(self, features: torch.Tensor) -> torch.Tensor:
        """The original's `Vocos.decode`: `(batch, mels, frames)` → `(batch, (frames - 1) * hop_length)`."""
        return self.head(self.backbone(features))


class VocosWaveform(nn.Module):
    """`(1, frames, mel_bins)` log-mel → `(1, frames * hop_length)` waveform: `Vocos.decode`, then `hop_length`
    zeros.

    A centred inverse STFT of `frames` frames gives `(frames - 1) * hop_length` samples (the mel of
    `k * hop_length` samples has `k + 1` frames). The program promises `hop_length` samples per frame, which its
    windowed runtime stitches by; the last frame's are silence.
    """

    def __init__(self, vocos: Vocos) -> None:
        super().__init__()
        self.vocos = vocos

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        audio = self.vocos.decode(mel.transpose(1, 2))
        return F.pad(audio, (0, self.vocos.head.istft.hop_length))

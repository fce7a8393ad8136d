"""An inverse real DFT of frames, windowed and overlap-added, as convolutions over frames with constant kernels.

Shared by the passes that take an inverse STFT apart (:mod:`inverse_stft_as_convolution` for ``torch.istft``,
:mod:`overlap_add_of_irfft_frames_as_convolution` for ``irfft`` frames overlap-added by ``F.fold``): frame ``t``
of ``n_fft`` samples contributes ``Re X_t · C + Im X_t · S`` to samples ``t·hop ... t·hop + n_fft``; read ``hop``
samples at a time, that overlap-add is a 1-D convolution over the frames whose ``hop`` output channels are one
block of output samples (:class:`Blocks`).
"""

from __future__ import annotations

import math

import torch
from torch.export import ExportedProgram

from audiodeploy.lowering.passes._graph import add_constant, insert_op

aten = torch.ops.aten

NOLA_THRESHOLD = 1e-11
"""torch.istft refuses a window whose envelope falls below this anywhere in its output (the NOLA check)."""


class Blocks:
    """An overlap-add by `hop` of frames of `n_fft` samples, trimmed by `trim` samples on each side, as a
    convolution over frames with `hop` output channels (one per sample of a block of `hop` output samples).

    A kernel shifted right by `shift` (< hop) samples makes the trim `trim + shift` a whole number `d` of blocks;
    the frame's `taps` blocks of the shifted kernel are the convolution's taps. Output block `b` is then the sum
    over `m` of frame `b + d - m`'s block `m`: a correlation over padded frames with the taps reversed.
    """

    def __init__(self, n_fft: int, hop: int, trim: int) -> None:
        self.hop = hop
        self.shift = -trim % hop
        self.taps = -(-(n_fft + self.shift) // hop)
        whole_blocks = (trim + self.shift) // hop
        self.padding_left = self.taps - 1 - whole_blocks
        # Output blocks: T - 1 + (n_fft - 2 trim) / hop = T + left + right - taps + 1.
        self.padding_right = (n_fft - 2 * trim) // hop + self.taps - 2 - self.padding_left

    def weight(self, kernel: torch.Tensor) -> torch.Tensor:
        """`kernel [C, n_fft]` → the convolution weight `[hop, C, taps]`."""
        channels, n_fft = kernel.shape
        shifted = torch.zeros(channels, self.taps * self.hop, dtype=kernel.dtype)
        shifted[:, self.shift : self.shift + n_fft] = kernel
        return shifted.view(channels, self.taps, self.hop).permute(2, 0, 1).flip(-1)

    def convolution(
        self, ep: ExportedProgram, x: torch.fx.Node, kernel: torch.Tensor, name: str, *, origin: torch.fx.Node
    ) -> torch.fx.Node:
        """`x [B, C, T]` → `[B, hop, blocks]`: each frame times `kernel [C, n_fft]`, overlap-added, trimmed, in
        blocks of `hop` samples (a constant named after `name` holds the weight)."""
        graph = ep.graph
        weight = add_constant(ep, graph, name, self.weight(kernel).to(torch.float32))
        padding = self.padding_left
        if self.padding_left != self.padding_right:
            pads = [self.padding_left, self.padding_right]
            x = insert_op(graph, aten.constant_pad_nd.default, (x, pads, 0.0), origin=origin)
            padding = 0
        return insert_op(graph, aten.conv1d.default, (x, weight, None, [1], [padding], [1], 1), origin=origin)

    def inverse_dft(
        self,
        ep: ExportedProgram,
        real: torch.fx.Node,
        imaginary: torch.fx.Node,
        window: torch.Tensor,
        scale: float,
        name: str,
        *,
        floor: float | None = None,
        origin: torch.fx.Node,
    ) -> torch.fx.Node:
        """Frames of a one-sided spectrum, `real` and `imaginary` `[B, n_fft / 2 + 1, T]`, to `[B, hop, blocks]`:
        each frame's inverse real DFT times `scale` and `window`, overlap-added, trimmed, and divided by the
        overlap-added square of the window (at least `floor`, if given). The envelope is computed, not stored: it
        is periodic inside and smaller at both ends, and its length is the program's. Its row of ones is a 1x1
        convolution of the real part with zero weights and a bias of one, so that it has the frames' (dynamic)
        length inside the delegate."""
        graph = ep.graph
        real_kernel, imaginary_kernel = inverse_dft_kernels(window, scale)
        real_part = self.convolution(ep, real, real_kernel, f"{name}_real", origin=origin)
        imaginary_part = self.convolution(ep, imaginary, imaginary_kernel, f"{name}_imaginary", origin=origin)
        waveform = insert_op(graph, aten.add.Tensor, (real_part, imaginary_part), origin=origin)
        bins = real_kernel.shape[0]
        zeros = add_constant(ep, graph, f"{name}_zeros", torch.zeros(1, bins, 1))
        one = add_constant(ep, graph, f"{name}_one", torch.ones(1))
        ones = insert_op(graph, aten.conv1d.default, (real, zeros, one), origin=origin)
        square = (window.to(torch.float64) ** 2)[None]
        divisor = self.convolution(ep, ones, square, f"{name}_envelope", origin=origin)
        if floor is not None:
            divisor = insert_op(graph, aten.clamp.default, (divisor, floor), origin=origin)
        return insert_op(graph, aten.div.Tensor, (waveform, divisor), origin=origin)


def inverse_dft_kernels(window: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`[n_fft / 2 + 1, n_fft]` matrices taking a frame's real and imaginary parts to its windowed `irfft`."""
    n_fft = window.numel()
    bins = torch.arange(n_fft // 2 + 1, dtype=torch.float64)[:, None]
    angle = 2 * math.pi * bins * torch.arange(n_fft, dtype=torch.float64)[None, :] / n_fft
    # irfft counts each bin between DC and Nyquist twice (its conjugate twin) and ignores the imaginary parts
    # of the DC bin and, for an even n_fft, the Nyquist bin.
    count = torch.full((n_fft // 2 + 1, 1), 2.0, dtype=torch.float64)
    count[0] = 1.0
    if n_fft % 2 == 0:
        count[-1] = 1.0
    real = count * torch.cos(angle) * scale * window
    imaginary = -count * torch.sin(angle) * scale * window
    imaginary[count[:, 0] == 1.0] = 0.0
    return real, imaginary


def envelope(window: torch.Tensor, hop: int, trim: int, frames: int) -> torch.Tensor:
    """The overlap-added square of `window` over `frames` frames, `trim` samples cut from each end (float64)."""
    n_fft = window.numel()
    overlap_added = torch.zeros((frames - 1) * hop + n_fft, dtype=torch.float64)
    square = window.to(torch.float64) ** 2
    for frame in range(frames):
        overlap_added[frame * hop : frame * hop + n_fft] += square
    return overlap_added[trim : overlap_added.numel() - trim]


def envelope_is_nonzero(window: torch.Tensor, hop: int, trim: int, frame_counts: list[int] | None) -> bool:
    """Whether the envelope over the trimmed output stays above torch.istft's threshold for each of
    `frame_counts` frames; None: for every count from 2 (each output sample is covered by at most
    `n_fft / hop + 1` frames, so counts past twice that repeat the envelopes of shorter ones at both ends)."""
    n_fft = window.numel()
    if frame_counts is None:
        frame_counts = list(range(2, 2 * (-(-n_fft // hop) + 1) + 1))
    for frames in frame_counts:
        trimmed = envelope(window, hop, trim, frames)
        if trimmed.numel() and float(trimmed.min()) < NOLA_THRESHOLD:
            return False
    return True

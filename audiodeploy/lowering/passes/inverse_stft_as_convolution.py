"""Write an inverse STFT of a spectrum built by ``torch.complex`` as convolutions with constant kernels.

``torch.export`` keeps ``torch.istft`` whole (``aten.istft``, on a complex tensor).
ExecuTorch 1.5.1 cannot lower it at all (``to_edge`` refuses ``aten.complex``, which
is not core ATen), and nothing in its XNNPACK backend takes complex tensors, an FFT
or an overlap-add (``col2im``): a vocoder that predicts a spectrum (Vocos) has no
program without this pass. The inverse STFT's three steps are linear in the
spectrum or fixed by the window, so they can be precomputed:

- the inverse real DFT of each frame times the window is a matrix: frame ``t``
  contributes ``Re X_t · C + Im X_t · S`` to the samples ``t·hop ... t·hop + n_fft``,
  with ``C[k, n] = c_k cos(2πkn / n_fft) w[n] / n_fft`` and ``S[k, n] = -c_k sin(...) w[n] / n_fft``
  (``c_k`` = 1 for the DC and Nyquist bins, 2 for the others, as ``irfft`` sums them);
- the overlap-add of those frames, read ``hop`` samples at a time, is a 1-D
  convolution over the frames: output block ``b`` (samples ``b·hop ... b·hop + hop``)
  is the sum over ``m`` of frame ``b + d - m``'s ``m``-th block of ``hop`` samples, so
  ``C`` and ``S`` cut into ``M`` blocks of ``hop`` are convolution kernels with
  ``hop`` output channels and ``M`` taps, and the centre trim (``n_fft // 2`` samples
  on each side for ``center=True``; ``d`` whole blocks once the kernels are shifted
  by less than a hop) is the convolution's padding;
- the window envelope ``Σ_t w²[n + n_fft // 2 - t·hop]`` that the result is divided
  by is the same convolution of a row of ones with ``w²``. It is periodic inside
  and smaller at both ends, where fewer frames overlap, so it is computed, not
  stored: its length is the program's. The row of ones is a 1x1 convolution of
  the real part with zero weights and a bias of one, so that it has the
  frames' (dynamic) length::

    before

    re [B, F, T] ─┐
    im [B, F, T] ─┴─ complex ── istft(n_fft, hop, window, center) ── y [B, L]        F = n_fft / 2 + 1

    after

    re ── conv1d(C' [hop, F, M], padding p) ──┐
    im ── conv1d(S' [hop, F, M], padding p) ──┴─ add ──────────────────┐
    re ── conv1d(0 [1, F, 1], bias 1) ── conv1d(E [hop, 1, M], padding p) ─┴─ div ─┐
          a row of ones [B, 1, T]        the envelope [B, hop, T - 1]              │
                                                                                   │ [B, hop, T - 1]
          y [B, (T - 1)·hop] ── view(B, -1) ── permute(0, 2, 1) ───────────────────┘

``C'``, ``S'`` and ``E`` are ``C``, ``S`` and ``w²`` cut into blocks of ``hop`` and
reversed along the blocks (a convolution correlates); the padding ``p`` trims the
centre. (``T - 1`` blocks is the centred output of an even ``n_fft``; Vocos' is
``n_fft`` 1024, ``hop`` 256: ``M`` = 4 taps, ``p`` = 1.) With two different
paddings left and right, a ``constant_pad_nd`` pads the inputs instead. Every op
is delegated, whatever the number of frames: no slice of a dynamic length
(XNNPACK 1.5.1 declines those). A window constant that nothing else reads is
dropped from the program: its values are in the kernels.

The result equals ``torch.istft``'s up to float32 rounding (summation order, and
kernels rounded from float64), for finite spectra: an infinite value makes the
row of ones NaN (``0 * inf``) over the samples its frame covers, where
``torch.istft`` gives infinities or NaN over the same samples.

The pass leaves an inverse STFT as it is, and does nothing on a program without
one, unless its input is ``torch.complex(real, imag)`` of two float32
``[batch, n_fft / 2 + 1, frames]`` tensors with a fixed batch, it is one-sided
with real output and no ``length``, its window is a constant (or none), the
trimmed output is a whole number of hops long and its trim no longer than the
convolution's reach, and the window envelope stays above ``torch.istft``'s
1e-11 (which would otherwise refuse it) for every number of frames.
"""

from __future__ import annotations

import math

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    insert_op,
    insert_reshape,
    is_static,
    value,
)

aten = torch.ops.aten

# torch.istft refuses a window whose envelope falls below this anywhere in its output (the NOLA check).
_NOLA_THRESHOLD = 1e-11


class InverseStftAsConvolutionPass(NodeRewritePass):
    targets = frozenset({aten.istft.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        spectrum = given["input"]
        if not isinstance(spectrum, torch.fx.Node) or spectrum.target != aten.complex.default:
            return Skip("its spectrum is not built by torch.complex(real, imag)")
        real, imaginary = spectrum.args[:2]
        shape = _spectrum_shape(real, imaginary)
        if shape is None:
            return Skip("real and imaginary parts are not two float32 [batch, bins, frames] tensors of one shape")
        batch, bins, frames = shape
        if not is_static(batch):
            return Skip("its batch size is dynamic: the output's [batch, samples] would have two dynamic sizes")
        n_fft = given["n_fft"]
        hop = given["hop_length"] or n_fft // 4
        win_length = given["win_length"] or n_fft
        center = given["center"]
        if given["onesided"] is False or given["return_complex"]:
            return Skip("it takes a two-sided spectrum or returns a complex signal")
        if given["length"] is not None:
            return Skip("it is given an output length: pad or cut its output instead")
        if bins != n_fft // 2 + 1:
            return Skip(f"its spectrum has {bins} bins, not n_fft / 2 + 1 = {n_fft // 2 + 1}")
        window = self._window(given["window"], win_length, n_fft)
        if window is None:
            return Skip(f"its window is not a constant of {win_length} float32 values (or none)")
        trim = n_fft // 2 if center else 0
        if (n_fft - 2 * trim) % hop:
            length = f"(frames - 1) * {hop} + {n_fft - 2 * trim}"
            return Skip(f"its output, {length} samples, is not a whole number of hops")
        blocks = _Blocks(n_fft, hop, trim)
        if blocks.padding_right < 0:
            return Skip(f"its trim of {trim} samples reaches past the last of the {blocks.taps} blocks of a frame")
        if not _envelope_is_nonzero(window, hop, trim, [frames] if is_static(frames) else None):
            return Skip("its window's overlap-added square falls to zero: torch.istft refuses such a window (NOLA)")

        scale = 1 / math.sqrt(n_fft) if given["normalized"] else 1 / n_fft
        real_kernel, imaginary_kernel = _inverse_dft_kernels(window, scale)
        real_part = self._overlap_add(real, real_kernel, blocks, node)
        imaginary_part = self._overlap_add(imaginary, imaginary_kernel, blocks, node)
        waveform = insert_op(self.graph, aten.add.Tensor, (real_part, imaginary_part), origin=node)
        ones = insert_op(
            self.graph,
            aten.conv1d.default,
            (real, self._constant(node, "zeros", torch.zeros(1, bins, 1)), self._constant(node, "one", torch.ones(1))),
            origin=node,
        )
        envelope = self._overlap_add(ones, (window**2)[None], blocks, node)
        normalized_blocks = insert_op(self.graph, aten.div.Tensor, (waveform, envelope), origin=node)
        samples = insert_op(self.graph, aten.permute.default, (normalized_blocks, [0, 2, 1]), origin=node)
        return insert_reshape(self.graph, samples, [int(batch), -1], origin=node)

    def _window(self, window: torch.fx.Node | None, win_length: int, n_fft: int) -> torch.Tensor | None:
        """The window as torch.istft applies it, zero-padded to `n_fft` and centred, in float64; None if it is not
        a constant of `win_length` float32 values."""
        if window is None:
            data = torch.ones(win_length, dtype=torch.float64)
        else:
            constant = self.constants.get(window)
            if constant is None or constant.dtype != torch.float32 or tuple(constant.shape) != (win_length,):
                return None
            data = constant.to(torch.float64)
            # A window only the inverse STFTs read is in their kernels now: its bytes need not stay in the program.
            self.release_constant(window)
        left = (n_fft - win_length) // 2
        return torch.nn.functional.pad(data, (left, n_fft - win_length - left))

    def _overlap_add(
        self, x: torch.fx.Node, kernel: torch.Tensor, blocks: _Blocks, node: torch.fx.Node
    ) -> torch.fx.Node:
        """`x [B, C, T]` → `[B, hop, blocks]`: each frame times `kernel [C, n_fft]`, overlap-added, trimmed, in
        blocks of `hop` samples."""
        weight = self._constant(node, "blocks", blocks.weight(kernel))
        padding = blocks.padding_left
        if blocks.padding_left != blocks.padding_right:
            pads = [blocks.padding_left, blocks.padding_right]
            x = insert_op(self.graph, aten.constant_pad_nd.default, (x, pads, 0.0), origin=node)
            padding = 0
        return insert_op(self.graph, aten.conv1d.default, (x, weight, None, [1], [padding], [1], 1), origin=node)

    def _constant(self, node: torch.fx.Node, name: str, data: torch.Tensor) -> torch.fx.Node:
        return add_constant(self.exported_program, self.graph, f"{node.name}_{name}", data.to(torch.float32))


class _Blocks:
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


def _inverse_dft_kernels(window: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
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


def _spectrum_shape(real: object, imaginary: object) -> tuple[int | torch.SymInt, int, int | torch.SymInt] | None:
    """`(batch, bins, frames)` of two float32 parts of one 3-D shape with a fixed number of bins, else None."""
    parts = [value(real), value(imaginary)]
    if any(p is None or p.dtype != torch.float32 or p.dim() != 3 for p in parts):
        return None
    first, second = parts
    assert first is not None and second is not None
    if not all(statically_known_true(a == b) for a, b in zip(first.shape, second.shape)):
        return None
    batch, bins, frames = first.shape
    return (batch, bins, frames) if is_static(bins) else None


def _envelope_is_nonzero(window: torch.Tensor, hop: int, trim: int, frame_counts: list[int] | None) -> bool:
    """Whether the envelope over the trimmed output stays above torch.istft's threshold for each of
    `frame_counts` frames; None: for every count from 2 (each output sample is covered by at most
    `n_fft / hop + 1` frames, so counts past twice that repeat the envelopes of shorter ones at both ends)."""
    n_fft = window.numel()
    if frame_counts is None:
        frame_counts = list(range(2, 2 * (-(-n_fft // hop) + 1) + 1))
    square = window**2
    for frames in frame_counts:
        envelope = torch.zeros((frames - 1) * hop + n_fft, dtype=torch.float64)
        for frame in range(frames):
            envelope[frame * hop : frame * hop + n_fft] += square
        trimmed = envelope[trim : envelope.numel() - trim]
        if trimmed.numel() and float(trimmed.min()) < _NOLA_THRESHOLD:
            return False
    return True

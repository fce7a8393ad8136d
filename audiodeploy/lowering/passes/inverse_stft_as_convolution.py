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
    arguments,
    insert_op,
    insert_reshape,
    is_static,
    value,
)
from audiodeploy.lowering.passes._overlap_add import Blocks, envelope_is_nonzero

aten = torch.ops.aten


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
        blocks = Blocks(n_fft, hop, trim)
        if blocks.padding_right < 0:
            return Skip(f"its trim of {trim} samples reaches past the last of the {blocks.taps} blocks of a frame")
        if not envelope_is_nonzero(window, hop, trim, [frames] if is_static(frames) else None):
            return Skip("its window's overlap-added square falls to zero: torch.istft refuses such a window (NOLA)")

        scale = 1 / math.sqrt(n_fft) if given["normalized"] else 1 / n_fft
        normalized_blocks = blocks.inverse_dft(
            self.exported_program, real, imaginary, window, scale, f"{node.name}_istft", origin=node
        )
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

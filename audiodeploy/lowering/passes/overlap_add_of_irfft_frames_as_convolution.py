"""Write frames of ``irfft``, windowed and overlap-added by ``F.fold``, as convolutions with constant kernels.

Vocos' "same"-padding ISTFT (and heads copied from it: transformers' WavTokenizer) does not call ``torch.istft``,
which has no such padding: it takes ``irfft`` of each frame of a spectrum whose frequencies are the last axis,
multiplies the frames by the window, overlap-adds them with ``F.fold`` (``col2im``), trims ``(n_fft - hop) / 2``
samples from each end, and divides by the window's square overlap-added the same way. ``torch.export`` keeps
``torch.polar`` (the spectrum from magnitudes and phases), ``fft_irfft`` and ``col2im``: none is core ATen or
has an XNNPACK kernel, and ExecuTorch 1.5.1 cannot build the program at all. Every step is linear in the spectrum
or fixed by the window, as for :mod:`inverse_stft_as_convolution`, whose convolutions this pass emits
(:class:`._overlap_add.Blocks`)::

    before

    magnitude, phase [B, T, F] ── polar ── fft_irfft(n_fft, dim=-1) ── transpose(1, 2) ── mul(window [1, n_fft, 1])
        ── col2im([1, L], kernel [1, n_fft], stride [1, hop]) ── select(1, 0) ── select(1, 0) ── slice(trim, -trim) ──┐
    window ── square ── expand [1, T, n_fft] ── transpose ── col2im ── squeeze ── slice ── clamp(min) ── the envelope ─┴─
        div ── y [B, L - 2 trim]                                                                 L = (T - 1) hop + n_fft

    after

    magnitude ── mul(cos(phase)) ── permute ── re [B, F, T] ─┬─ the convolutions of :class:`._overlap_add.Blocks` ──
    magnitude ── mul(sin(phase)) ── permute ── im [B, F, T] ─┘   (the envelope computed, clamped at the same min)
        ── [B, hop, T'] ── permute(0, 2, 1) ── view(B, -1) ── y

``torch.complex(real, imag)`` stands for ``polar`` as well. The envelope the model divides by is computed from the
window and the length alone; the pass checks its values against the window's overlap-added square at the ends of
the exported range before replacing it. The result equals the model's up to float32 rounding, as
:mod:`inverse_stft_as_convolution`'s equals ``torch.istft``'s.

The pass leaves the frames as they are, and does nothing on a program without them, unless ``col2im`` overlap-adds
``[B, n_fft, T]`` frames one row high with no padding or dilation into ``(T - 1) * hop + n_fft`` samples, the frames
are ``irfft`` of ``n_fft`` samples along the last axis of a float32 ``[B, T, n_fft / 2 + 1]`` spectrum built by
``polar`` or ``complex`` with a fixed batch, times a constant window (or none), each step read only by the next,
the overlap-added row is selected, trimmed equally at both ends to a whole number of hops, and divided by a value
of the length alone that equals the window's overlap-added square (clamped below, or not).
"""

from __future__ import annotations

import math

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Rewrite,
    Skip,
    ancestors,
    arguments,
    evaluated_at,
    insert_op,
    insert_reshape,
    is_pure,
    is_static,
    length_range,
    value,
)
from audiodeploy.lowering.passes._overlap_add import Blocks, envelope

aten = torch.ops.aten

_NORM_SCALES = {  # what irfft multiplies its sums by, per norm
    None: lambda n: 1 / n,
    "backward": lambda n: 1 / n,
    "ortho": lambda n: 1 / math.sqrt(n),
    "forward": lambda n: 1.0,
}
_TRANSPOSES = frozenset({aten.transpose.int, aten.permute.default})
_ENVELOPE_RTOL = 1e-5


class OverlapAddOfIrfftFramesAsConvolutionPass(NodeRewritePass):
    targets = frozenset({aten.col2im.default})

    def rewrite(self, node: torch.fx.Node) -> Rewrite:
        geometry = _overlap_add_geometry(node)
        if isinstance(geometry, Skip):
            return geometry
        n_fft, hop = geometry
        frames = self._windowed_frames(node.args[0], n_fft)
        if isinstance(frames, Skip):
            return frames
        spectrum, window, scale = frames
        parts = _spectrum_parts(spectrum, n_fft)
        if isinstance(parts, Skip):
            return parts
        batch, frame_count = parts
        output = _trimmed_row(node)
        if isinstance(output, Skip):
            return output
        division, trim = output
        if (n_fft - 2 * trim) % hop or trim < 0:
            return Skip(f"its output, (frames - 1) * {hop} + {n_fft - 2 * trim} samples, is not a whole number of hops")
        blocks = Blocks(n_fft, hop, trim)
        if blocks.padding_right < 0:
            return Skip(f"its trim of {trim} samples reaches past the last of the {blocks.taps} blocks of a frame")
        floor = self._envelope_floor(division.args[1], window, hop, trim, frame_count)
        if isinstance(floor, Skip):
            return floor

        with self.graph.inserting_before(division):
            real, imaginary = self._real_and_imaginary(spectrum, division)
            normalized = blocks.inverse_dft(
                self.exported_program, real, imaginary, window, scale, f"{node.name}_irfft", floor=floor, origin=node
            )
            samples = insert_op(self.graph, aten.permute.default, (normalized, [0, 2, 1]), origin=node)
            return {division: insert_reshape(self.graph, samples, [int(batch), -1], origin=node)}

    def _windowed_frames(self, frames: object, n_fft: int) -> tuple[torch.fx.Node, torch.Tensor, float] | Skip:
        """The spectrum the frames are computed from, the window (float64, ones if none) and the irfft's scale."""
        window = torch.ones(n_fft, dtype=torch.float64)
        if isinstance(frames, torch.fx.Node) and frames.target == aten.mul.Tensor and len(frames.users) == 1:
            for transposed, other in (frames.args, frames.args[::-1]):
                constant = self.constant_value(other) if isinstance(other, torch.fx.Node) else None
                if constant is not None and constant[0].numel() == n_fft and isinstance(transposed, torch.fx.Node):
                    data, source = constant
                    if tuple(data.shape) not in ((1, n_fft, 1), (n_fft, 1)):
                        return Skip(f"its window has shape {tuple(data.shape)}, not one per frame sample")
                    window = data.reshape(-1).to(torch.float64)
                    # Its values are in the kernels now: its bytes need not stay in the program.
                    self.release_constant(source)
                    frames = transposed
                    break
            else:
                return Skip("its frames are multiplied by more than a constant window")
        if not (isinstance(frames, torch.fx.Node) and frames.target in _TRANSPOSES and len(frames.users) == 1):
            return Skip("its frames are not irfft frames moved to [batch, n_fft, frames]")
        if frames.target == aten.transpose.int and sorted(d % 3 for d in frames.args[1:3]) != [1, 2]:
            return Skip("its frames are not irfft frames moved to [batch, n_fft, frames]")
        if frames.target == aten.permute.default and list(frames.args[1]) != [0, 2, 1]:
            return Skip("its frames are not irfft frames moved to [batch, n_fft, frames]")
        irfft = frames.args[0]
        if not (isinstance(irfft, torch.fx.Node) and irfft.target == aten.fft_irfft.default and len(irfft.users) == 1):
            return Skip("its frames are not computed by irfft")
        given = arguments(irfft)
        if given["n"] != n_fft or given["dim"] not in (-1, 2) or given["norm"] not in _NORM_SCALES:
            return Skip(f"its irfft is not of {n_fft} samples along the last axis with a known norm")
        spectrum = given["input"]
        if not isinstance(spectrum, torch.fx.Node) or len(spectrum.users) != 1:
            return Skip("its spectrum is read by more than its irfft")
        return spectrum, window, _NORM_SCALES[given["norm"]](n_fft)

    def _envelope_floor(
        self, divisor: object, window: torch.Tensor, hop: int, trim: int, frame_count: int | torch.SymInt
    ) -> float | None | Skip:
        """The divisor's floor (a clamp's min; None without one) if the divisor is the window's overlap-added
        square at the ends of the exported range; else why not."""
        if not isinstance(divisor, torch.fx.Node):
            return Skip("it is divided by a number, not by the window's envelope")
        computation = ancestors([divisor], expand=lambda n: n not in self.constants and n.target != aten.sym_size.int)
        if any(n not in self.constants and not (n.op == "call_function" and is_pure(n.target)) for n in computation):
            return Skip("it is divided by a value computed from more than constants and the length")
        floor = None
        if divisor.target == aten.clamp.default and len(divisor.args) == 2 and isinstance(divisor.args[1], float):
            floor = divisor.args[1]
        symbol = None
        at = {int(frame_count): int(frame_count)} if isinstance(frame_count, int) else {}  # symbol value -> frames
        if isinstance(frame_count, torch.SymInt):
            lengths = length_range(self.exported_program, frame_count)
            if isinstance(lengths, Skip):
                return lengths
            symbol, low, high = lengths
            at = {bound: int(frame_count.node.expr.subs(symbol, bound)) for bound in (low, high)}
        order = [n for n in self.graph.nodes if n in computation]
        for count, frames in at.items():
            got = evaluated_at(order, divisor, self.constants, symbol, count).double().reshape(-1)
            want = envelope(window, hop, trim, frames)
            if floor is not None:
                want = want.clamp(min=floor)
            if got.shape != want.shape or not torch.allclose(got, want, rtol=_ENVELOPE_RTOL, atol=0.0):
                return Skip(f"it is divided by a value that is not the window's overlap-added square ({frames} frames)")
        return floor

    def _real_and_imaginary(
        self, spectrum: torch.fx.Node, origin: torch.fx.Node
    ) -> tuple[torch.fx.Node, torch.fx.Node]:
        """The spectrum's real and imaginary parts as `[B, F, T]`."""
        first, second = spectrum.args[:2]
        if spectrum.target == aten.polar.default:
            cosine = insert_op(self.graph, aten.cos.default, (second,), origin=origin)
            sine = insert_op(self.graph, aten.sin.default, (second,), origin=origin)
            first, second = (insert_op(self.graph, aten.mul.Tensor, (first, t), origin=origin) for t in (cosine, sine))
        real, imaginary = (
            insert_op(self.graph, aten.permute.default, (part, [0, 2, 1]), origin=origin) for part in (first, second)
        )
        return real, imaginary


def _overlap_add_geometry(node: torch.fx.Node) -> tuple[int, int] | Skip:
    """`(n_fft, hop)` of a `col2im` that overlap-adds `[B, n_fft, T]` frames one row high into `(T - 1) hop + n_fft`
    samples; else why not."""
    frames, output_size, kernel_size, dilation, padding, stride = node.args[:6]
    if list(kernel_size)[0] != 1 or list(output_size)[0] != 1 or list(stride)[0] != 1:
        return Skip("it folds more than one row")
    if list(dilation) != [1, 1] or list(padding) != [0, 0]:
        return Skip(f"it folds with dilation {list(dilation)} and padding {list(padding)}")
    n_fft, hop = int(kernel_size[1]), int(stride[1])
    frames_value = value(frames) if isinstance(frames, torch.fx.Node) else None
    if frames_value is None or frames_value.dim() != 3 or frames_value.shape[1] != n_fft:
        return Skip(f"its input is not [batch, {n_fft}, frames]")
    count, length = frames_value.shape[2], output_size[1]
    if isinstance(length, torch.fx.Node):
        length = length.meta.get("val")
    if length is None or not statically_known_true(length == (count - 1) * hop + n_fft):
        return Skip("its output is not the frames' overlap-added length")
    return n_fft, hop


def _spectrum_parts(spectrum: torch.fx.Node, n_fft: int) -> tuple[int, int | torch.SymInt] | Skip:
    """`(batch, frames)` of a spectrum built by polar or complex from two float32 `[B, T, n_fft / 2 + 1]` tensors
    of one shape with a fixed batch; else why not."""
    if spectrum.target not in (aten.polar.default, aten.complex.default):
        return Skip("its spectrum is not built by torch.polar or torch.complex")
    parts = [value(a) if isinstance(a, torch.fx.Node) else None for a in spectrum.args[:2]]
    if any(p is None or p.dtype != torch.float32 or p.dim() != 3 for p in parts):
        return Skip("its spectrum is not built from two float32 [batch, frames, bins] tensors")
    first, second = parts
    assert first is not None and second is not None
    if not all(statically_known_true(a == b) for a, b in zip(first.shape, second.shape)):
        return Skip("its spectrum's two parts differ in shape")
    batch, frames, bins = first.shape
    if not is_static(batch):
        return Skip("its batch size is dynamic: the output's [batch, samples] would have two dynamic sizes")
    if bins != n_fft // 2 + 1:
        return Skip(f"its spectrum has {bins} bins, not n_fft / 2 + 1 = {n_fft // 2 + 1}")
    return int(batch), frames


def _trimmed_row(node: torch.fx.Node) -> tuple[torch.fx.Node, int] | Skip:
    """The division of the overlap-added row, selected and trimmed equally at both ends, and the trim."""
    current = node
    for _ in range(2):
        user = _only_user(current)
        if user is None or user.target != aten.select.int or list(user.args[1:]) != [1, 0]:
            return Skip("its row of samples is not selected as [batch, samples]")
        current = user
    trim = 0
    user = _only_user(current)
    if user is not None and user.target == aten.slice.Tensor:
        dim, start, end = (list(user.args[1:]) + [0, None, None])[:3]
        if dim not in (1, -1) or not isinstance(start, int) or not isinstance(end, int) or end != -start:
            return Skip("its samples are not trimmed equally at both ends")
        trim = start
        current = user
        user = _only_user(current)
    if user is None or user.target != aten.div.Tensor or user.args[0] is not current:
        return Skip("its samples are not divided by the window's envelope")
    return user, trim


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    """The one node that reads `node`; None if several or none do."""
    return next(iter(node.users)) if len(node.users) == 1 else None

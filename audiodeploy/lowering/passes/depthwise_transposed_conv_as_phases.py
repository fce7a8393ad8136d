"""Write a depthwise transposed convolution with stride ``s`` as ``s`` stride-1 depthwise convolutions, interleaved.

XNNPACK runs a depthwise transposed convolution (``groups`` = channels, one
channel per group: BigVGAN's 2x upsampling by a 12-tap low-pass in each of its
109 anti-aliased activations) as a grouped deconvolution, one tiny GEMM per
channel: on the machine of issue 13, about 40 times slower than a stride-1
depthwise convolution doing the same multiplications (92 ms against 2.3 ms for
48 channels of 11,136 samples). Output ``s t + r`` of a transposed
convolution sums the taps ``w[s j + rho_r]`` times the inputs ``x[t + q_r - j]``
(``rho_r``, ``q_r``: the remainder and quotient of ``r + padding`` by ``s``), a
stride-1 convolution with every ``s``-th tap, reversed. Each phase ``r`` is
such a depthwise convolution over the input zero-padded once by ``(P_L, P_R)``,
its kernel set in a window of ``K'`` taps common to the phases (zeros elsewhere),
and the phases are interleaved by a concatenation on the width of one-column
images (time on the height, as XNNPACK runs a ``conv1d``)::

    before

    x [N, C, T] ── conv_transpose1d(w [C, 1, K], b, stride s, padding p, groups C) ── y [N, C, s (T + e)]

    after

    x ── unsqueeze(-1) ── constant_pad_nd([0, 0, P_L, P_R]) ─┬─ conv2d(w_0 [C, 1, K', 1], b, groups C) ─┐
                                                             ├─ ...                                    ├─ cat(-1) ─┐
                                                             └─ conv2d(w_s-1, b, groups C) ────────────┘           │
                                                                          [N, C, T + e, s] ── view [N, C, -1] ── y

XNNPACK runs the images channels-last: the phases read one transposed input,
and the concatenation interleaves them in blocks of ``C`` samples. A
concatenation of ``[N, C, T, 1]`` signals on their last dimension in the
contiguous layout copies one sample at a time: 3.5 ms of a 10 ms anti-aliased
activation of 96 channels and 5,504 samples (ETDump, 2-core AMD EPYC), where all
three of its concatenations take 0.5 ms channels-last.

A crop of the output that is its only use (``y[..., a : L - b]``; causal EnCodec and Mimi
drop ``b = K - s``) is taken in as padding ``p + a`` and output padding ``q + a - b``: the
phases pad their input less on the right, and the slice, which XNNPACK declines at a
symbolic length, is gone.

Every output sums the products the transposed convolution sums (and zeros), so
the result equals it to rounding. The taps are reordered on the constant weight,
which is then dropped.

The pass leaves a transposed convolution as it is, and does nothing on a program
without one, unless it is a float32 1-D depthwise one (``groups`` equal to its
input and output channels) with a constant weight only it reads, stride above one,
dilation one, numeric padding,
an output of ``s`` times a length (``K - s - 2 p + output_padding`` a multiple of
``s``), and padding small enough that no phase needs its input cropped
(``P_R >= 0``: a crop would be a slice of a dynamic length).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    OutputCrop,
    Rewrite,
    Skip,
    TransposedConv1d,
    add_constant,
    constant_sources,
    convolves_float32_signal,
    insert_op,
    insert_reshape,
    static_view_sizes,
    tensor_of,
)

aten = torch.ops.aten


@dataclass(frozen=True)
class _Phases:
    """Where each phase's taps go in the common window, and the padding the window needs."""

    stride: int
    kernel_size: int
    taps: tuple[tuple[tuple[int, int], ...], ...]
    """Per phase: (window position, transposed-convolution tap) pairs."""
    window: int
    pad_left: int
    pad_right: int

    @classmethod
    def of(cls, kernel_size: int, stride: int, padding: int, output_padding: int) -> _Phases | Skip:
        excess = kernel_size - stride - 2 * padding + output_padding
        if excess % stride:
            return Skip(f"its output is not {stride} times a length (K - s - 2p + output_padding = {excess})")
        extra = excess // stride  # each phase is T + extra long
        # Phase r reads x[t + q - j] through tap s j + rho, j = 0 .. J - 1.
        reads = []
        for phase in range(stride):
            rho, q = (phase + padding) % stride, (phase + padding) // stride
            reads.append([(q - j, stride * j + rho) for j in range(-(-(kernel_size - rho) // stride))])
        offsets = [offset for phase in reads for offset, _ in phase]
        pad_left = max(0, -min(offsets))
        window = pad_left + max(offsets) + 1
        pad_right = extra + window - 1 - pad_left
        if pad_right < 0:
            return Skip(f"a phase would need its input cropped by {-pad_right} (a slice of a dynamic length)")
        taps = tuple(tuple((offset + pad_left, tap) for offset, tap in phase) for phase in reads)
        return cls(stride, kernel_size, taps, window, pad_left, pad_right)

    def kernels(self, weight: torch.Tensor) -> list[torch.Tensor]:
        """Each phase's ``[C, 1, K']`` kernel from the transposed convolution's ``[C, 1, K]`` weight."""
        kernels = []
        for phase in self.taps:
            kernel = weight.new_zeros(weight.shape[0], 1, self.window)
            for position, tap in phase:
                kernel[:, :, position] = weight[:, :, tap]
            kernels.append(kernel)
        return kernels


class DepthwiseTransposedConvAsPhasesPass(NodeRewritePass):
    targets = frozenset({aten.conv_transpose1d.default})

    def rewrite(self, node: torch.fx.Node) -> Rewrite:
        conv = TransposedConv1d.of(node)
        x, weight, bias = conv.x, conv.weight, conv.bias
        stride, padding, output_padding = conv.stride, conv.padding, conv.output_padding
        groups, dilation = conv.groups, conv.dilation
        if not convolves_float32_signal(node):
            return Skip("not a float32 transposed convolution of a [N, C, T] tensor")
        x_val, w_val, out_val = tensor_of(x), tensor_of(weight), tensor_of(node)
        channels = x_val.shape[1]
        if groups != channels or tuple(w_val.shape[:2]) != (channels, 1):
            return Skip("not depthwise (one input and one output channel per group)")
        if not all(isinstance(v, int) for v in (stride, padding, output_padding, dilation)):
            return Skip("its stride, padding or dilation is not one number")
        if stride < 2 or dilation != 1:
            return Skip("stride one, or dilated")
        crop = OutputCrop.of(node)
        cropped = conv.cropped(crop) if crop is not None else None
        phases = _Phases.of(int(w_val.shape[2]), stride, cropped.padding, cropped.output_padding) if cropped else None
        if not isinstance(phases, _Phases):
            crop, phases = None, _Phases.of(int(w_val.shape[2]), stride, padding, output_padding)
        if isinstance(phases, Skip):
            return phases
        sizes = static_view_sizes(out_val.shape if crop is None else tensor_of(crop.slice).shape)
        if sizes is None:
            return Skip("its output has more than one symbolic size")
        kernels = self._phase_kernels(weight, phases)
        if kernels is None:
            return Skip("its weight is not a constant only it reads (a computed one would need its taps reordered)")
        # A one-column image [N, C, T, 1] (time on the height, as XNNPACK runs a conv1d): the phases' outputs are
        # channels-last inside the delegate, where a concatenation on the width interleaves blocks of C samples.
        image = insert_op(self.graph, aten.unsqueeze.default, (x, -1), origin=node)
        if phases.pad_left or phases.pad_right:
            padding = [0, 0, phases.pad_left, phases.pad_right]
            image = insert_op(self.graph, aten.constant_pad_nd.default, (image, padding, 0.0), origin=node)
        interleaved = []
        for kernel in kernels:
            args = (image, kernel, bias, [1, 1], [0, 0], [1, 1], groups)
            interleaved.append(insert_op(self.graph, aten.conv2d.default, args, origin=node))
        stacked = insert_op(self.graph, aten.cat.default, (interleaved, -1), origin=node)
        y = insert_reshape(self.graph, stacked, sizes, origin=node)
        return y if crop is None else {crop.slice: y}

    def _phase_kernels(self, weight: torch.fx.Node, phases: _Phases) -> list[torch.fx.Node] | None:
        """A constant kernel per phase; None unless the weight is a constant only this convolution reads."""
        ep = self.exported_program
        sources = constant_sources(ep)
        if weight not in sources or len(weight.users) != 1:
            return None
        self.release_constant(weight)
        kernels = phases.kernels(sources[weight])
        return [add_constant(ep, self.graph, f"{weight.name}_phase", k.unsqueeze(-1)) for k in kernels]

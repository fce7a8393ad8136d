"""Write a strided 1-D transposed convolution as one stride-1 convolution and an interleave of its phases.

XNNPACK runs ``conv_transpose1d`` as a deconvolution through its indirect GEMM;
HiFi-GAN's upsampling layers (kernel ``2s``, stride ``s``, padding ``s / 2``)
took 1.5 to 1.9 times eager PyTorch's time in a delegate (interleaved timing,
2 cores). Output step ``t = m * s + r`` (phase ``r``) of a transposed convolution
is a stride-1 convolution of the input around step ``m``, with the taps
``W[:, :, r + p - o * s]`` at input offsets ``o``; with ``s`` dividing ``k``, every
phase has ``k / s`` taps, and phases whose taps sit at the same offsets form a
group. One grouped convolution computes every phase, each group reading the
input padded for its offsets, and a reshape-transpose-reshape interleaves the
phases, all with a symbolic length (no slice: XNNPACK 1.5.1 declines a slice of
symbolic size)::

    before

    x [N, Ci, T] ── conv_transpose1d(W [Ci, Co, k], b, stride s, padding p, output_padding q) ── y [N, Co, L]

    after (G groups of s / G phases; HiFi-GAN: G = 2, offsets -1..0 and 0..1)

    x ─┬─ constant_pad_nd([l_0, r_0]) ─┐
       ├─ ...                          ├─ cat(dim 1) ── conv1d(P [Co * s, Ci, k / s], b', groups G) ── [N, Co * s, L / s]
       └─ constant_pad_nd([l_G-1, ...])┘
           ── view [N, G, Co, s / G, -1] ── permute(0, 2, 4, 1, 3) ── view [N, Co, -1] ── y

    P = index_select(W, 2, J).view(Ci, Co, G, s / G, k / s).permute(2, 1, 3, 0, 4).reshape(Co * s, Ci, k / s)
    b' = b repeated per phase

Phase groups of unequal sizes (DAC's stride 5: padding 3 puts phases 0-1 at offsets -1..0 and 2-4 at 0..1) become
a group of each phase, each reading its own copy of the padded input (``s`` copies where two would do: a copy costs
far less than the GEMM; DAC 16 kHz's 768 -> 384, kernel 10, stayed a deconvolution at 49 GFLOP/s, 17% of its
decoder's time). An output a few steps short of ``s`` times the input (``L = s T - c``,
``0 < c < s``: DAC's odd strides, padding ``ceil(s / 2)``) is computed with ``c`` more steps of output padding and
cut by a depthwise convolution of one tap in ``c + 1``, which keeps the first ``L`` steps exactly and, unlike a
slice, takes a symbolic length inside the delegate::

    before   x ── conv_transpose1d(W, b, stride s, padding p, output_padding q) ── y [N, Co, s T - c]
    after    the phases of conv_transpose1d(W, b, stride s, padding p, output_padding q + c) ── [N, Co, s T]
                 ── conv1d(E [Co, 1, c + 1] (1 at tap 0, else 0), groups Co) ── y

A crop of the output that is the transposed convolution's only use (``y[..., a : L - b]``;
causal EnCodec and Mimi drop ``b = k - s``) is taken in: it is padding ``p + a`` and output
padding ``q + a - b``, whose phases read the input padded less on the right, and the
slice, which XNNPACK declines at a symbolic length, is gone::

    before   x ── conv_transpose1d(W, b, stride s, padding p, output_padding q) ── slice(-1, a, L - b) ── y
    after    the phases of conv_transpose1d(W, b, stride s, padding p + a, output_padding q + a - b) ── y

``P`` holds exactly the values of ``W`` (no zero taps), so a computed ``W``
(``weight_norm``) gets the reorder as three more ops of its computation, which
:mod:`fold_computed_gemm_weights` folds without growing the program; a constant
``W`` read by nothing else is replaced by the reordered constant.

The pass leaves a transposed convolution as it is, and does nothing on a program
without one, unless it is a float32 ``conv_transpose1d`` with one group, dilation
one, stride ``s > 1`` dividing the kernel, a static batch size, an output length
``L`` that is a multiple of ``s`` no shorter than ``s * T`` or short of ``s * T`` by
less than ``s``, a bias that is absent or a constant only it
reads, a weight that is computed or a constant only it reads, and at least
:data:`MIN_OUT_CHANNELS` output channels or a crop it takes in.
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
    insert_op,
    insert_reshape,
    is_static,
    tensor_of,
    value,
)

aten = torch.ops.aten

MIN_OUT_CHANNELS = 64
"""Narrower layers stay deconvolutions: for 64->32, kernel 4, stride 2 on 11008 steps (HiFi-GAN's last
upsampling) the interleave's transposes of the wide output cost more than the GEMM saves (1.3x slower). Not where
a crop is taken in: the slice it removes would cut the delegate and copy the whole output outside it."""


@dataclass(frozen=True)
class _Phases:
    """How a transposed convolution's output phases are computed: which taps of ``W`` each phase group's
    stride-1 convolution takes, and how each group pads the input."""

    stride: int
    padding: int
    batch: int
    out_channels: int
    windows: list[tuple[int, list[int]]]
    """The phases grouped by their highest input offset (:func:`_phase_windows`)."""
    per_group: int
    taps: int
    pads: list[list[int]]
    """``[left, right]`` padding of the input each group reads."""
    cut: int
    """Steps cut from the end of the interleaved output (``c``)."""

    @property
    def groups(self) -> int:
        return len(self.windows)

    def tap_index(self) -> torch.Tensor:
        """The taps of ``W`` in ``P``'s order: by group, phase, then offset from the lowest, ``high - taps + 1``."""
        return torch.tensor(
            [
                r + self.padding - (high - self.taps + 1 + t) * self.stride
                for high, phases in self.windows
                for r in phases
                for t in range(self.taps)
            ]
        )


def _phases(conv: TransposedConv1d, *, cropped: bool = False) -> _Phases | Skip:
    """The phases of ``conv``, or why they cannot be computed by one grouped convolution without a slice;
    ``cropped``: ``conv`` takes in a crop of the output (:meth:`TransposedConv1d.cropped`)."""
    stride, padding, output_padding = conv.stride, conv.padding, conv.output_padding
    groups, dilation = conv.groups, conv.dilation
    x_val, w_val = value(conv.x), value(conv.weight)
    if x_val is None or w_val is None or x_val.dtype != torch.float32 or w_val.dtype != torch.float32:
        return Skip("not float32")
    if not all(isinstance(v, int) for v in (stride, padding, output_padding)) or groups != 1 or dilation != 1:
        return Skip(f"stride {stride}, padding {padding}, groups {groups}, dilation {dilation}: only dense, undilated")
    _, out_channels, kernel = (int(s) for s in w_val.shape)
    if stride < 2 or kernel % stride:
        return Skip(f"stride {stride} does not divide kernel {kernel} with stride above one")
    if out_channels < MIN_OUT_CHANNELS and not cropped:
        return Skip(f"{out_channels} output channels, fewer than {MIN_OUT_CHANNELS}: the interleave costs more")
    if not is_static(x_val.shape[0]):
        return Skip("symbolic batch size: the interleave's views would have two inferred sizes")
    # L = s T + beyond: a multiple of s at least s T, or short of s T by fewer than s steps, cut after the phases.
    beyond = kernel - 2 * padding + output_padding - stride
    cut = -beyond if -stride < beyond < 0 else 0
    extra, remainder = divmod(beyond + cut, stride)
    if remainder or extra < 0:
        return Skip("the output length is not a multiple of the stride, nor short of stride times the input's by less")
    windows = _phase_windows(stride, padding)
    per_group = stride // len(windows) if stride % len(windows) == 0 else 0
    if any(len(phases) != per_group for _, phases in windows):
        # Unequal groups: a group of each phase, equal again, each reading its copy of the padded input.
        windows, per_group = [(high, [phase]) for high, phases in windows for phase in phases], 1
    taps = kernel // stride
    pads = [[taps - 1 - high, high + extra] for high, _ in windows]
    if any(min(pad) < 0 for pad in pads):
        return Skip("a phase reads beyond the padded input: its output would need a slice")
    return _Phases(stride, padding, int(x_val.shape[0]), out_channels, windows, per_group, taps, pads, cut)


class TransposedConvAsPolyphasePass(NodeRewritePass):
    targets = frozenset({aten.conv_transpose1d.default})

    def rewrite(self, node: torch.fx.Node) -> Rewrite:
        conv = TransposedConv1d.of(node)
        crop = OutputCrop.of(node)
        cropped = conv.cropped(crop) if crop is not None else None
        phases = _phases(cropped, cropped=True) if cropped is not None else None
        if not isinstance(phases, _Phases):
            crop, phases = None, _phases(conv)
        if isinstance(phases, Skip):
            return phases
        weight, bias = conv.weight, conv.bias
        sources = self.constants
        if bias is not None and bias not in sources:
            return Skip("a computed bias: only a constant bias is repeated per phase")
        if any(operand in sources and len(operand.users) > 1 for operand in (weight, bias) if operand is not None):
            return Skip("its weight or bias is also read elsewhere: reordering it would store it twice")
        poly_weight = self._polyphase_weight(node, weight, phases)
        poly_bias = None if bias is None else self._phase_bias(bias, phases)
        y = self._interleaved_phases(node, conv.x, poly_weight, poly_bias, phases)
        # The transposed convolution was their only reader: dropped once it is replaced.
        for operand in (weight, bias):
            if operand in sources:
                self.release_constant(operand)
        return y if crop is None else {crop.slice: y}

    def _polyphase_weight(self, node: torch.fx.Node, weight: torch.fx.Node, phases: _Phases) -> torch.fx.Node:
        """``P [Co * s, Ci, k / s]``: a constant for a constant ``W``, else ops on the computed ``W``."""
        in_channels, out_channels = (int(s) for s in tensor_of(weight).shape[:2])
        split = [in_channels, out_channels, phases.groups, phases.per_group, phases.taps]
        order = [2, 1, 3, 0, 4]
        final = [out_channels * phases.groups * phases.per_group, in_channels, phases.taps]
        index = phases.tap_index()
        if weight in self.constants:
            data = self.constants[weight].index_select(2, index).view(split).permute(order).reshape(final)
            return add_constant(self.exported_program, self.graph, f"{weight.name}_polyphase", data)
        index_node = add_constant(self.exported_program, self.graph, f"{node.name}_taps", index)
        selected = insert_op(self.graph, aten.index_select.default, (weight, 2, index_node), origin=node)
        viewed = insert_op(self.graph, aten.view.default, (selected, split), origin=node)
        permuted = insert_op(self.graph, aten.permute.default, (viewed, order), origin=node)
        return insert_op(self.graph, aten.reshape.default, (permuted, final), origin=node)

    def _phase_bias(self, bias: torch.fx.Node, phases: _Phases) -> torch.fx.Node:
        """``b'``: the constant bias repeated for each phase of ``P``'s output channels."""
        data = self.constants[bias].view(1, phases.out_channels, 1)
        data = data.expand(phases.groups, phases.out_channels, phases.per_group)
        return add_constant(self.exported_program, self.graph, f"{bias.name}_phases", data.reshape(-1))

    def _interleaved_phases(
        self,
        node: torch.fx.Node,
        x: torch.fx.Node,
        poly_weight: torch.fx.Node,
        poly_bias: torch.fx.Node | None,
        phases: _Phases,
    ) -> torch.fx.Node:
        """``y``: every group's phases by one grouped convolution of the padded inputs, interleaved by views (and
        cut at the end: :attr:`_Phases.cut`)."""
        graph = self.graph
        padded = [insert_op(graph, aten.constant_pad_nd.default, (x, pad, 0.0), origin=node) for pad in phases.pads]
        grouped = padded[0] if len(padded) == 1 else insert_op(graph, aten.cat.default, (padded, 1), origin=node)
        args = (grouped, poly_weight, poly_bias, [1], [0], [1], phases.groups)
        convolved = insert_op(graph, aten.conv1d.default, args, origin=node)
        sizes = [phases.batch, phases.groups, phases.out_channels, phases.per_group, -1]
        split = insert_reshape(graph, convolved, sizes, origin=node)
        moved = insert_op(graph, aten.permute.default, (split, [0, 2, 4, 1, 3]), origin=node)
        y = insert_reshape(graph, moved, [phases.batch, phases.out_channels, -1], origin=node)
        if not phases.cut:
            return y
        first_tap = torch.zeros(phases.out_channels, 1, phases.cut + 1)
        first_tap[:, :, 0] = 1.0
        keep = add_constant(self.exported_program, graph, f"{node.name}_cut", first_tap)
        return insert_op(graph, aten.conv1d.default, (y, keep, None, [1], [0], [1], phases.out_channels), origin=node)


def _phase_windows(stride: int, padding: int) -> list[tuple[int, list[int]]]:
    """The phases grouped by their highest input offset, in phase order: ``[(offset, [phase, ...]), ...]``.

    Phase ``r`` reads offsets ``o`` with ``0 <= r + p - o * s < k``; the highest is ``(r + p) // s``,
    the lowest ``k / s - 1`` below it.
    """
    windows: list[tuple[int, list[int]]] = []
    for phase in range(stride):
        high = (phase + padding) // stride
        if windows and windows[-1][0] == high:
            windows[-1][1].append(phase)
        else:
            windows.append((high, [phase]))
    return windows

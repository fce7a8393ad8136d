"""Write a strided 1-D convolution whose kernel spans whole strides as GEMMs over frames of the input.

Codecs downsample with kernels of twice the stride (EnCodec, DAC, Mimi: strides 2 to 8, kernels 4 to 16) on 64
to 1024 channels. :mod:`strided_conv_as_gemm` gathers each of the ``k`` taps with a depthwise convolution of
width ``k`` whose kernel is one-hot: ``k * k`` multiplies per gathered value, which at ``k = 16`` took longer
than the GEMM it feeds (Mimi's encoder, 140 ms of 790 at 10 s on AMD EPYC). A kernel of ``m`` strides reads
``m`` consecutive frames of ``s`` samples, and a frame is a row once the signal is channels-last, so the taps
need no gathering: ``m`` GEMMs over the frames, each against the ``s`` taps of one stride, summed one frame
apart::

    before

    x [N, C, L] ── conv1d(W [Co, C, m*s], b, stride s, padding p) ── y [N, Co, To]      L + 2p = (To + m - 1) * s

    after

    x ── pad(p, p) ── permute [N, L', C] ── view [N, To + m - 1, s*C] ─┬─ linear(W_0, b) ── permute ── conv1d(E_0) ─┐
                                                                      ├─ ...                                       ├─ add ── y
                                                                      └─ linear(W_m-1) ── permute ── conv1d(E_m-1) ─┘
    W_j = W.view(Co, C, m, s).permute(2, 0, 3, 1).reshape(m, Co, s*C)[j]

``E_j`` is a depthwise kernel ``[Co, 1, m]`` with a one in tap ``j``: frame ``t + j`` to output ``t``, ``m``
multiplies per output where the gathering took ``k`` per tap. With ``m == 1`` (kernel equal to the stride)
there is nothing to shift, and the linear's output is permuted back. On AMD EPYC, one thread, one such
convolution against the tap gathering: 2.6x faster at 512 to 1024 channels with ``k = 16``, 1.5-2x at 128 to
256 channels, 1.2x at 64, equal where ``k == s``. Against XNNPACK's own (indirect GEMM) convolution, which now
takes the strided convolutions this pass leaves, on AMD EPYC (AVX-512), two threads: 1.4x faster at 512 to 1024
channels with ``k = 16``, equal at 256 to 512 with ``k = 8``, 0.6x at 64 to 128 with ``k = 4``. Those figures
leave out the layout: frames are rows of a signal, so in a chain of convolutions that XNNPACK keeps as one
channels-last image (:mod:`conv_chains_as_images`) they cost two transposes of the input and two of each GEMM's
output. Mimi's encoder at 10 s, where ELUs and causal paddings join each strided convolution to its neighbours:
372 ms with its four strided convolutions as frames, 297 ms as XNNPACK's on the image. The result equals the
convolution's for finite inputs; an infinite input makes every output of its frames NaN (``0 * inf`` in the
shifts).

A constant ``W`` read by nothing else is replaced by the ``m`` reordered constants. A computed ``W``
(``weight_norm``: EnCodec's and DAC's) stays XNNPACK's convolution, its weight folded: its ``m`` GEMMs would share one
computation, and :mod:`fold_computed_gemm_weights` folds a computation that feeds one GEMM only. One GEMM of
all ``m`` strides (the foldable form) needs its ``m`` column blocks summed one frame apart, which XNNPACK 1.5.1
does as a grouped convolution (slower than the tap gathering at 64 channels) or, written as a gathering of
frames before a 1x1 GEMM, at most 1.1x faster at 512 channels (both measured as above).

The pass leaves a convolution to :mod:`strided_conv_as_gemm` (one input channel) or to XNNPACK, and does nothing on a program without one,
unless it is a float32 ``conv1d`` with stride above one, a kernel of whole strides, dilation one, one group,
a numeric padding, more than one input channel, a static batch, a padded length of exactly ``To + m - 1``
frames at every length of the exported range (no samples left over past the last window), a weight that is
a constant only it reads, and no elementwise ops or paddings that join it to another convolution.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    dense_strided_conv1d,
    insert_op,
    insert_reshape,
    is_static,
    joined_through_image_ops,
    sizes_always,
    tensor_of,
)

aten = torch.ops.aten


class StridedConvAsFrameGemmsPass(NodeRewritePass):
    targets = frozenset({aten.conv1d.default})

    def rewrite(self, conv: torch.fx.Node) -> torch.fx.Node | Skip:
        """GEMMs over the input's frames in place of ``conv``."""
        geometry = dense_strided_conv1d(conv)
        if isinstance(geometry, Skip):
            return geometry
        stride, padding = geometry
        x, weight = conv.args[:2]
        bias = arguments(conv)["bias"]
        x_val, w_val = tensor_of(x), tensor_of(weight)
        out_channels, channels, taps = (int(s) for s in w_val.shape)
        if taps % stride:
            return Skip(f"kernel {taps} is not a whole number of strides of {stride}")
        if channels == 1:
            return Skip("one input channel: a frame is a GEMM only the stride deep")
        batch, length = x_val.shape[0], x_val.shape[2]
        if not is_static(batch):
            return Skip("a symbolic batch: the frames' view would have two symbolic sizes")
        strides_per_kernel = taps // stride
        frames = tensor_of(conv).shape[2] + strides_per_kernel - 1
        if not sizes_always(operator.eq, length + 2 * padding, frames * stride):
            return Skip(
                "the padded length is not a whole number of frames at every length: samples past the last window"
            )
        if weight not in self.constants:
            return Skip("a computed weight: its GEMM per stride would share one computation, which is not folded")
        if len(weight.users) > 1:
            return Skip("its weight is also read elsewhere: reordering it would store it twice")
        if joined_through_image_ops(conv, _is_convolution):
            return Skip(
                "elementwise ops or paddings join it to another convolution: as XNNPACK's convolution it keeps their "
                "channels-last image, where its frames would transpose the signal in and out"
            )

        if padding:
            x = insert_op(self.graph, aten.constant_pad_nd.default, (x, [padding, padding], 0.0), origin=conv)
        channels_last = insert_op(self.graph, aten.permute.default, (x, [0, 2, 1]), origin=conv)
        rows = insert_reshape(self.graph, channels_last, [int(batch), -1, stride * channels], origin=conv)
        summed: torch.fx.Node | None = None
        for stride_index, stride_weight in enumerate(self._weights_per_stride(weight, strides_per_kernel)):
            gemm_bias = bias if stride_index == 0 else None
            gemm = insert_op(self.graph, aten.linear.default, (rows, stride_weight, gemm_bias), origin=conv)
            part = insert_op(self.graph, aten.permute.default, (gemm, [0, 2, 1]), origin=conv)
            if strides_per_kernel > 1:
                one_hot = torch.zeros(out_channels, 1, strides_per_kernel)
                one_hot[:, 0, stride_index] = 1
                shift = add_constant(self.exported_program, self.graph, f"{conv.name}_frame{stride_index}", one_hot)
                part = insert_op(
                    self.graph, aten.conv1d.default, (part, shift, None, [1], [0], [1], out_channels), origin=conv
                )
            summed = part if summed is None else insert_op(self.graph, aten.add.Tensor, (summed, part), origin=conv)
        assert summed is not None  # at least one stride per kernel
        return summed

    def _weights_per_stride(self, weight: torch.fx.Node, count: int) -> list[torch.fx.Node]:
        """``W.view(Co, C, m, s).permute(2, 0, 3, 1).reshape(m, Co, s*C)[j]`` for each ``j``, as constants."""
        out_channels, channels, taps = (int(s) for s in tensor_of(weight).shape)
        self.release_constant(weight)  # the convolution was its only reader
        data = self.constants[weight].reshape(out_channels, channels, count, taps // count).permute(2, 0, 3, 1)
        data = data.reshape(count, out_channels, taps // count * channels)
        return [
            add_constant(self.exported_program, self.graph, f"{weight.name}_stride{j}", data[j].contiguous())
            for j in range(count)
        ]


def _is_convolution(node: torch.fx.Node) -> bool:
    """A convolution of a signal or an image, or the squeeze of an image (one a rewrite before this pass wrote)."""
    if node.op != "call_function":
        return False
    if node.target == aten.squeeze.dim:
        node = node.args[0]
    return node.target in (aten.conv1d.default, aten.conv2d.default)

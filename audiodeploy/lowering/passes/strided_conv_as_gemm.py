"""Write a strided 1-D convolution of a one-channel signal as one tap gathering and one GEMM (a 1x1 convolution).

The first layer of a speech encoder convolves the samples themselves (wav2vec2: 512 output channels, kernel 10,
stride 5), one input channel wide: a GEMM ``k`` deep. The pass gathers the ``k`` taps of each output step with one
convolution whose kernel is the identity, and multiplies them by the weight in one GEMM (a 1x1 convolution,
XNNPACK's plain GEMM; 4 ms of wav2vec2 base's 750 at 10 s of audio), on a one-column image ``[N, C, T, 1]`` as
XNNPACK and :mod:`.conv_chains_as_images` write a ``conv1d``, so that the layers after it (its normalization,
activation and the next convolutions) stay one image without a layout change::

    before

    x [N, 1, T] ── conv1d(W [Co, 1, k], b, stride s, padding p) ── y [N, Co, To]

    after

    x ── unsqueeze(-1) ── conv2d(E [k, 1, k, 1], stride (s, 1), padding (p, 0)) ── [N, k, To, 1] ──
        ── conv2d(W' [Co, k, 1, 1], b) ── squeeze(-1) ── y                          W' = W.reshape(Co, k, 1, 1)

A wider input (the layers after it) is left to XNNPACK's indirect GEMM, chained by :mod:`.conv_chains_as_images`:
on AMD EPYC (AVX-512) it runs wav2vec2 base's 512-channel kernel-3 stride-2 layers at its GEMM's rate (220 against
215 GFLOP/s), where gathering their taps with one-hot depthwise convolutions first cost a fifth more time (145
against 114 ms for the second layer at 10 s of audio) and 95 MiB more memory. (On the AVX2 machine of issue 5 the
indirect GEMM measured half its GEMM's rate, and gathering won there: re-measure on such a CPU.) The result equals
the convolution's for finite inputs; an infinite sample makes every output whose window holds it NaN (``0 * inf``)
where the convolution gives an infinity or NaN.

A constant ``W`` read by nothing else is replaced by the reordered constant; a computed ``W`` (``weight_norm``)
gets the reorder as ops of its computation, which :mod:`fold_computed_gemm_weights` then folds.

The pass leaves a convolution as it is, and does nothing on a program without one, unless it is a float32
``conv1d`` of one input channel with stride above one, dilation one, one group, a numeric padding, at most
:data:`MAX_TAPS` taps, and a weight that is either computed or a constant only it reads.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    dense_strided_conv1d,
    gather_taps,
    insert_op,
    tensor_of,
)

aten = torch.ops.aten

MAX_TAPS = 16
"""Widest kernel gathered: the gathered taps take ``k / stride`` times the input's memory."""


class StridedConvAsGemmPass(NodeRewritePass):
    targets = frozenset({aten.conv1d.default})

    def rewrite(self, conv: torch.fx.Node) -> torch.fx.Node | Skip:
        """Tap selections and a GEMM in place of ``conv``."""
        geometry = dense_strided_conv1d(conv)
        if isinstance(geometry, Skip):
            return geometry
        stride, padding = geometry
        x, weight = conv.args[:2]
        bias = arguments(conv)["bias"]
        w_val = tensor_of(weight)
        _, channels, taps = (int(s) for s in w_val.shape)
        if channels > 1:
            return Skip(f"{channels} input channels: XNNPACK's indirect GEMM convolves them at its GEMM's rate")
        if taps > MAX_TAPS:
            return Skip(f"{taps} taps, more than {MAX_TAPS}")
        if weight in self.constants and len(weight.users) > 1:
            return Skip("its weight is also read elsewhere: reordering it would store it twice")

        image = insert_op(self.graph, aten.unsqueeze.default, (x, -1), origin=conv)
        gathered = gather_taps(
            self.exported_program, self.graph, image, taps, stride, padding, 1, f"{conv.name}_tap", origin=conv,
            time_dim=2,
        )  # fmt: skip
        gemm = insert_op(
            self.graph, aten.conv2d.default, (gathered, self._reordered_weight(conv, weight), bias), origin=conv
        )
        return insert_op(self.graph, aten.squeeze.dim, (gemm, -1), origin=conv)

    def _reordered_weight(self, conv: torch.fx.Node, weight: torch.fx.Node) -> torch.fx.Node:
        """``W.permute(0, 2, 1).reshape(Co, k * C, 1, 1)``: a constant, or ops on a computed weight."""
        gemm_shape = [int(tensor_of(weight).shape[0]), -1, 1, 1]
        if weight in self.constants:
            self.release_constant(weight)  # the convolution was its only reader
            data = self.constants[weight].permute(0, 2, 1).reshape(gemm_shape)
            return add_constant(self.exported_program, self.graph, f"{weight.name}_gemm", data)
        permuted = insert_op(self.graph, aten.permute.default, (weight, [0, 2, 1]), origin=conv)
        return insert_op(self.graph, aten.reshape.default, (permuted, gemm_shape), origin=conv)

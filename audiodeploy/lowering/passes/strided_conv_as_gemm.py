"""Write a strided 1-D convolution as tap selections and one GEMM (a 1x1 convolution).

XNNPACK runs a convolution whose kernel is wider than one step, or whose stride
is not one, through its indirect GEMM with an indirection buffer; on the AVX2
machine of issue 5 that runs at about half the speed of its plain GEMM (a linear
or a 1x1 stride-1 convolution): wav2vec2's 512->512 kernel-3 stride-2 feature
encoder convolutions took twice ONNX Runtime's time. The pass gathers the ``k``
taps of each output step with depthwise convolutions whose weights are one-hot
(memory-bound: a multiply by one and ``k - 1`` by zero per gathered value),
concatenates them along the channels, and multiplies by the weight in one GEMM
(a 1x1 convolution, which XNNPACK runs as its plain GEMM)::

    before

    x [N, C, T] ── conv1d(W [Co, C, k], b, stride s, padding p) ── y [N, Co, To]

    after, C > 1 (images of one row: XNNPACK keeps them channels-last from op to op)

    x ── unsqueeze(2) ─┬─ conv2d(E_0 [C, 1, 1, k], stride (1, s), padding (0, p), groups C) ─┐  tap 0 of each channel
                       ├─ ...                                                               ├─ cat(dim 1) ─┐
                       └─ conv2d(E_k-1, ...) ───────────────────────────────────────────────┘              │
                                                         [N, k*C, 1, To] ── conv2d(·, W', b) ── squeeze(2) ── y
                                        W' = W.permute(0, 2, 1).reshape(Co, k*C, 1, 1) ──┘

    after, C == 1 (the first layer, on samples): one conv2d(E [k, 1, 1, k]) gathers all taps

``E_j`` holds a one in tap ``j``. With ``C > 1`` the taps are separate depthwise
convolutions because XNNPACK's depthwise kernel takes one output channel per
group (a channel multiplier of ``k`` runs as a slow grouped GEMM). Consecutive
rewritten layers leave ``squeeze(2) ── gelu ── unsqueeze(2)`` between them, which
:mod:`squeeze_unsqueeze_pairs` removes. The result equals the convolution's for
finite inputs; an infinite input makes every output whose window holds it NaN
(``0 * inf``) where the convolution gives an infinity or NaN.

A constant ``W`` read by nothing else is replaced by the reordered constant; a
computed ``W`` (``weight_norm``) gets the reorder as two more ops of its
computation, which :mod:`fold_computed_gemm_weights` then folds.

The pass leaves a convolution as it is, and does nothing on a program without
one, unless it is a float32 ``conv1d`` with stride above one, dilation one, one
group, a numeric padding, at most :data:`MAX_TAPS` taps, and a weight that is
either computed or a constant only it reads.
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
        if taps > MAX_TAPS:
            return Skip(f"{taps} taps, more than {MAX_TAPS}")
        if weight in self.constants and len(weight.users) > 1:
            return Skip("its weight is also read elsewhere: reordering it would store it twice")

        x_4d = insert_op(self.graph, aten.unsqueeze.default, (x, 2), origin=conv)
        gathered = gather_taps(
            self.exported_program, self.graph, x_4d, taps, stride, padding, 1, f"{conv.name}_tap", origin=conv
        )
        gemm = insert_op(
            self.graph, aten.conv2d.default, (gathered, self._reordered_weight(conv, weight), bias), origin=conv
        )
        return insert_op(self.graph, aten.squeeze.dim, (gemm, 2), origin=conv)

    def _reordered_weight(self, conv: torch.fx.Node, weight: torch.fx.Node) -> torch.fx.Node:
        """``W.permute(0, 2, 1).reshape(Co, k * C, 1, 1)``: a constant, or ops on a computed weight."""
        gemm_shape = [int(tensor_of(weight).shape[0]), -1, 1, 1]
        if weight in self.constants:
            self.release_constant(weight)  # the convolution was its only reader
            data = self.constants[weight].permute(0, 2, 1).reshape(gemm_shape)
            return add_constant(self.exported_program, self.graph, f"{weight.name}_gemm", data)
        permuted = insert_op(self.graph, aten.permute.default, (weight, [0, 2, 1]), origin=conv)
        return insert_op(self.graph, aten.reshape.default, (permuted, gemm_shape), origin=conv)

"""Write a concatenation of (negated) slices of one tensor's last dimension as a linear with a constant weight.

Rotary position embeddings rotate each head's features by halves ("rotate half"):
``cat((-x[..., h:], x[..., :h]), -1)``. At a dynamic length ExecuTorch 1.5.1's
XNNPACK partitioner declines a ``slice_copy`` whose input has a symbolic size,
whichever dimension it slices, so both halves run outside the delegate and cut it
in every attention layer. Picking and negating features along the last dimension
is a product with a constant signed selection matrix, which XNNPACK delegates::

    before                                           after

    x [..., D] ── slice(-1, h, D) ── neg ──┐         x [..., D] ── linear(W) ──
    x [..., D] ── slice(-1, 0, h) ─────────┴─ cat(-1)    W [D', D]: W[o + j, a + j] = ±1 for the piece at
                                                         output offset o that is x[..., a:b], sign its neg

Each output feature is one input feature times ±1 plus zeros: exact for finite
values (a non-finite feature makes its ``0 *`` terms NaN in the other outputs of
that row), at ``D`` multiply-adds per output element, small next to the
projections a head of ``D`` features goes through.

The pass leaves a concatenation as it is, and does nothing on a program without
one, when it concatenates along another dimension than the last, the tensor is
not float32, its shape is static (XNNPACK slices a static tensor), a piece is not
a slice (or the negation of a slice) of the same tensor along that dimension with
integer bounds (any step), or that dimension's size is symbolic.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    FeatureSlice,
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    feature_slice,
    insert_op,
    selection_weight,
    value,
)

aten = torch.ops.aten


class ConcatOfSlicesAsLinearPass(NodeRewritePass):
    targets = frozenset({aten.cat.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        pieces, out = given["tensors"], value(node)
        if out is None or out.dtype != torch.float32:
            return Skip("not a float32 tensor")
        dim = given["dim"] % out.dim()
        if dim != out.dim() - 1:
            return Skip("concatenates along another dimension than the last")
        picked: list[tuple[FeatureSlice, int]] = []  # (slice, sign)
        for piece in pieces:
            sign = 1
            if isinstance(piece, torch.fx.Node) and piece.target == aten.neg.default:
                piece, sign = piece.args[0], -1
            taken = feature_slice(piece)
            if isinstance(taken, Skip):
                return Skip(f"a piece is not a slice or the negation of a slice of the last dimension ({taken.reason})")
            picked.append((taken, sign))
        x = picked[0][0].x
        if any(taken.x is not x for taken, _ in picked):
            return Skip("its pieces slice different tensors")
        x_val = value(x)
        assert x_val is not None
        if all(isinstance(size, int) for size in x_val.shape):
            return Skip("the tensor's shape is static: XNNPACK slices it")
        features = [(feature, sign) for taken, sign in picked for feature in taken.features]
        weight = selection_weight(features, x_val.shape[-1])
        constant = add_constant(self.exported_program, self.graph, f"{node.name}_selection", weight)
        return insert_op(self.graph, aten.linear.default, (x, constant), origin=node)

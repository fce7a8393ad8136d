"""Write a product with a constant matrix on the right as a ``linear``, so XNNPACK packs each constant one way.

XNNPACK packs a GEMM's constant for the kernel that reads it. ExecuTorch 1.5.1 serializes ``linear(x, W)`` as a
fully-connected operator on ``W [N, K]`` as it is, and ``x @ M`` (``matmul``/``mm``) with a constant ``M [K, N]``
as the same operator on ``M``'s bytes with XNNPACK's transposed-weights flag, which packs them the other way.
The runtime's weight cache (on in audiodeploy's runtime and native runner: it packs a constant read by many
operators once, as the steps of an unrolled LSTM read theirs) keys a packing by the bytes' name alone. So one
constant read both ways is packed twice under one name, and the cache's bookkeeping (1.5.1) then frees one
program's packing when another program that read it is destroyed. A residual vector quantizer reads its codebook
both ways when it searches it written ``x @ embed.t()`` (EnCodec) and looks the picked code up as a one-hot GEMM
(:mod:`.embedding_as_one_hot_gemm` emits ``linear(one_hot, embed.t())``, ``embed.t()`` being a contiguous copy,
the same bytes as ``embed.t()`` the search multiplies by)::

    before

    x [.., K] ── matmul(M [K, N], a constant, or a view of one) ── [.., N]

    after

    x [.., K] ── linear(M^T [N, K], a contiguous copy) ── [.., N]

Every constant GEMM weight is then a ``linear``'s, read one way: equal bytes are packed alike. The numbers are
the product's own (the same multiply-adds); where nothing else reads ``M``, the program stores ``M^T`` instead
of ``M``, so it grows only by a constant read by both kinds of product (EnCodec's codebooks: 4 MiB of 64).

The pass leaves a product as it is, and does nothing on a program without one, unless its right operand is a
constant float matrix (a parameter, buffer or constant the program does not compute, or a view of one) and its
left operand a float tensor of at least one dimension: a constant on the left, or a batch of constant matrices,
is another product.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, add_constant, insert_op, value

aten = torch.ops.aten


class ConstantMatmulAsLinearPass(NodeRewritePass):
    targets = frozenset({aten.matmul.default, aten.mm.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        x, right = node.args[:2]
        found = self.constant_value(right) if isinstance(right, torch.fx.Node) else None
        if found is None:
            return Skip("its right operand is not a constant")
        matrix, source = found
        if matrix.dim() != 2 or not matrix.dtype.is_floating_point:
            return Skip(f"its right operand is a {matrix.dim()}-D {matrix.dtype} constant, not a float matrix")
        val = value(x) if isinstance(x, torch.fx.Node) else None
        if val is None or val.dim() < 1 or val.dtype != matrix.dtype:
            return Skip("its left operand is not a float tensor of the constant's dtype")
        weight = add_constant(self.exported_program, self.graph, "matmul_weight", matrix.t())
        self.release_constant(source)
        return insert_op(self.graph, aten.linear.default, (x, weight), origin=node)

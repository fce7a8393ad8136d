"""Write the Euclidean distances to a constant codebook as a GEMM XNNPACK delegates.

A codebook search (``torch.cdist(x, codebook).argmin(-1)``, the nearest-code
lookup of vector-quantized codecs) exports as ``aten.cdist``, which ExecuTorch
1.5.1's XNNPACK partitioner has no config for. With the codebook ``c [K, D]`` a
constant, ``|x - c_k|^2 = |x|^2 - 2 x . c_k + |c_k|^2`` is one linear with the
constant weight ``-2 c`` and the constant bias ``|c_k|^2``, plus the sum of the
squares of ``x`` (a linear with a ``[1, D]`` weight of ones), all delegated::

    before

    x [.., M, D] ── cdist(c [K, D], p=2) ── [.., M, K]

    after

    x [.., M, D] ─┬─ linear(-2 c, bias |c|^2) ─────────┐
                  └─ mul(x, x) ── linear(ones [1, D]) ─┴─ add ── clamp(min=0) ── sqrt ── [.., M, K]

The ``argmin`` (or ``max(..).indices``) that picks the code, which XNNPACK
1.5.1 does not delegate, is :mod:`.argmax_as_max_pooling`'s. The expanded form (the same
sum written out in the model) needs no rewrite: its codebook norms are constants
the earlier passes store, and its matrix product has a constant weight.

The distances differ from ``cdist``'s own by rounding: the expansion cancels
``|x|^2`` against ``2 x . c_k``, as ``cdist``'s matrix-product mode (the one it
picks for more than 25 rows) does too; the clamp keeps a rounding below zero
from becoming NaN.

The pass leaves a ``cdist`` as it is, and does nothing on a program without one,
unless it is a float32 2-norm distance from a tensor to a constant ``[K, D]``
codebook (a parameter, buffer or constant the program does not compute, or a view
of one; or ``[1, K, D]``, with no more dimensions than the tensor), ``D`` fixed.
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, add_constant, arguments, insert_op, value

aten = torch.ops.aten


class CdistAsGemmPass(NodeRewritePass):
    targets = frozenset({aten.cdist.default, aten._cdist_forward.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        x, codes = given["x1"], given["x2"]
        val = value(x)
        if val is None or val.dtype != torch.float32 or val.dim() < 2:
            return Skip("its first operand is not a float32 tensor of two or more dimensions")
        if given["p"] != 2:
            return Skip(f"a {given['p']!r}-norm distance, not Euclidean")
        codebook, source = self.constant_value(codes) or (None, None)
        if codebook is None or codebook.dtype != torch.float32 or not 2 <= codebook.dim() <= val.dim():
            return Skip("its second operand is not a constant float32 [K, D] codebook")
        if any(size != 1 for size in codebook.shape[:-2]):
            return Skip(f"a batch of {list(codebook.shape[:-2])} codebooks, not one")
        codebook = codebook.reshape(codebook.shape[-2:])  # Mimi's codebook[None]: [1, K, D] broadcasts as [K, D]
        if not isinstance(val.shape[-1], int) or val.shape[-1] != codebook.shape[1]:
            return Skip("the vector size of its first operand is not fixed")
        weight = add_constant(self.exported_program, self.graph, "cdist_weight", -2.0 * codebook)
        bias = add_constant(self.exported_program, self.graph, "cdist_bias", codebook.pow(2).sum(1))
        ones = add_constant(self.exported_program, self.graph, "cdist_ones", torch.ones(1, codebook.shape[1]))
        products = insert_op(self.graph, aten.linear.default, (x, weight, bias), origin=node)
        squares = insert_op(self.graph, aten.mul.Tensor, (x, x), origin=node)
        norms = insert_op(self.graph, aten.linear.default, (squares, ones), origin=node)
        distances = insert_op(self.graph, aten.add.Tensor, (products, norms), origin=node)
        clamped = insert_op(self.graph, aten.clamp.default, (distances, 0.0), origin=node)
        self.release_constant(source)
        return insert_op(self.graph, aten.sqrt.default, (clamped,), origin=node)

"""In an fp16 program, write a mean or sum of a square as the negated reduction of ``x * -x``.

XNNPACK rewrites ``mul(x, x)`` as ``square(x)``, and a ``mean`` or ``sum`` that reads a
square as one ``mean_squared`` / ``sum_squared`` operator. That operator has no fp16
kernel, so XNNPACK runs it in fp32; its fp32 output then makes every operator after it
run in fp32 too (XNNPACK's fp16-to-fp32 fallback carries an operator's dtype to its
users), with conversions around them. One group norm over time at the start of
wav2vec2 (its first feature layer) ran every GEMM of the fp16 program in fp32: slower
than the fp32 program. Multiplying by the negation instead gives XNNPACK two
different values, which it neither squares nor fuses::

    before                                  after

    x ── mul(x, x) ── mean(dims) ──         x ─┬──────────── mul ── mean(dims) ── neg ──
                                               └── neg(x) ────┘

The negation is exact, so the result is the same. It costs one elementwise pass over
``x``, where the fused reduction saved one: fp32 programs keep the fused form, and
:func:`~audiodeploy.lowering.half_precision.as_float16` runs this pass.

The pass leaves a reduction as it is, and does nothing on a program without one, when
its input is not a square (``mul(x, x)``, ``pow(x, 2)``) or not float32, or when the
square is read by anything else (it stays computed, so negating it would add a pass).
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, insert_op, value

aten = torch.ops.aten


class ReducedSquaresAsNegatedProductsPass(NodeRewritePass):
    targets = frozenset({aten.mean.dim, aten.sum.dim_IntList})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        square = node.args[0]
        assert isinstance(square, torch.fx.Node)
        base = _squared(square)
        if base is None:
            return Skip("its input is not a square")
        if len(square.users) > 1:
            return Skip("the square is read elsewhere too")
        val = value(base)
        if val is None or val.dtype != torch.float32:
            return Skip("not a float32 tensor")
        negated = insert_op(self.graph, aten.neg.default, (base,), origin=node)
        product = insert_op(self.graph, aten.mul.Tensor, (base, negated), origin=square)
        reduced = insert_op(self.graph, node.target, (product, *node.args[1:]), dict(node.kwargs), origin=node)
        return insert_op(self.graph, aten.neg.default, (reduced,), origin=node)


def _squared(node: torch.fx.Node) -> torch.fx.Node | None:
    """What ``node`` squares, if it is ``mul(x, x)`` or ``pow(x, 2)``."""
    if node.op != "call_function":
        return None
    if node.target is aten.mul.Tensor and len(node.args) == 2 and node.args[0] is node.args[1]:
        base = node.args[0]
    elif node.target is aten.pow.Tensor_Scalar and node.args[1] == 2:
        base = node.args[0]
    else:
        return None
    return base if isinstance(base, torch.fx.Node) else None

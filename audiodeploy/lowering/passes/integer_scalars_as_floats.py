"""Write an integer scalar of float32 arithmetic as the float it stands for.

``2 * x`` (DAC's ``2 * encodings @ codebook.t()``), ``x / 4`` and ``x - 1`` export as ``mul.Tensor(x, 2)`` and
so on, with a Python ``int``. Edge lowering makes that scalar an ``int64`` constant and casts it to float32 with
``_to_dim_order_copy``, which ExecuTorch 1.5.1's XNNPACK partitioner declines (a dtype conversion): each one runs
on a portable kernel at every call and hands the delegate one more input. PyTorch computes a float32 tensor's
arithmetic with an integer scalar in float32 with that scalar's value, as with the float of the same value::

    before                       after

    x float32 ── mul(2) ──       x float32 ── mul(2.0) ──

Exact for integers up to 2^24, which float32 holds; the pass leaves larger ones as they are. It also leaves an
op as it is, and does nothing on a program without one, unless the op is an ``add``, ``sub``, ``mul`` or ``div``
of a float32 tensor and a Python ``int`` (``bool`` excepted).
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import FLOAT32_EXACT_INTEGERS, NodeRewritePass, Skip, insert_op, value

aten = torch.ops.aten


class IntegerScalarsAsFloatsPass(NodeRewritePass):
    targets = frozenset({aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if len(node.args) != 2:
            return Skip("not an op of two operands")
        integers = [i for i, a in enumerate(node.args) if isinstance(a, int) and not isinstance(a, bool)]
        tensors = [value(a) for a in node.args if isinstance(a, torch.fx.Node)]
        if len(integers) != 1 or len(tensors) != 1 or tensors[0] is None or tensors[0].dtype != torch.float32:
            return Skip("not arithmetic of a float32 tensor and an integer scalar")
        (position,) = integers
        scalar = node.args[position]
        assert isinstance(scalar, int)
        if abs(scalar) > FLOAT32_EXACT_INTEGERS:
            return Skip("its integer is not exact as a float32")
        args = list(node.args)
        args[position] = float(scalar)
        return insert_op(self.graph, node.target, tuple(args), dict(node.kwargs), origin=node)

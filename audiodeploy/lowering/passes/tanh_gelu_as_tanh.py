"""Write the tanh-approximated GELU in the ops PyTorch computes it with, which XNNPACK delegates.

ExecuTorch 1.5.1's XNNPACK lowering ignores ``gelu``'s ``approximate`` argument:
``F.gelu(x, approximate="tanh")`` (transformers' ``gelu_pytorch_tanh``) would be
delegated and computed as the erf GELU, 2e-4 off near ``x = -2``.
:class:`~audiodeploy.lowering.partitioner.ExactGeluConfig` declines it, so it
would cut the delegate; this pass writes it as PyTorch's CPU kernel computes it,
``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x³)))``, in products, sums
and a ``tanh``, all delegated::

    before                              after

    x ── gelu(approximate="tanh") ──    x ─┬─ mul(x) ── mul(x) ── mul(0.044715) ──┐
                                           ├──────────────────────────────────────┴─ add ── mul(sqrt(2 / pi)) ──
                                           │      ── tanh ── add(1) ──┐
                                           └─ mul(0.5) ───────────────┴─ mul ──

The results are PyTorch's up to the rounding of XNNPACK's ``tanh`` (a few
units in the last place; the ``1 + tanh`` of a large negative ``x`` cancels in
both alike).

The pass runs after the passes that carry a ``gelu`` along a chain of
convolutions as one elementwise op. It leaves a ``gelu`` as it is, and does
nothing on a program without one, when it is the erf GELU (XNNPACK's own) or
its input is not float32.
"""

from __future__ import annotations

import math

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, arguments, insert_op, value

aten = torch.ops.aten

# The constants of PyTorch's GeluKernelImpl (aten/src/ATen/native/cpu/Activation.cpp), GeluType::Tanh.
_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
_KAPPA = 0.044715


class TanhGeluAsTanhPass(NodeRewritePass):
    targets = frozenset({aten.gelu.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        given = arguments(node)
        if given["approximate"] != "tanh":
            return Skip("the erf GELU, which XNNPACK computes")
        x = given["input"]
        val = value(x)
        if val is None or val.dtype != torch.float32:
            return Skip("not a float32 tensor")

        def op(target: torch._ops.OpOverload, *args: object) -> torch.fx.Node:
            return insert_op(self.graph, target, args, origin=node)

        cube = op(aten.mul.Tensor, op(aten.mul.Tensor, x, x), x)
        inner = op(aten.mul.Tensor, op(aten.add.Tensor, x, op(aten.mul.Tensor, cube, _KAPPA)), _BETA)
        one_plus_tanh = op(aten.add.Tensor, op(aten.tanh.default, inner), 1.0)
        return op(aten.mul.Tensor, op(aten.mul.Tensor, x, 0.5), one_plus_tanh)

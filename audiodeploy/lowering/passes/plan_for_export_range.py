"""Memory-plan every dynamic tensor for the input range the user exported, not a narrower one.

ExecuTorch sizes each dynamic tensor's buffer at the upper bound of its symbolic
shape, read from the shape environment. In 1.5.1 with torch 2.14, lowering to
XNNPACK re-runs the convolutions on fake tensors, and the fake convolution picks
a backend by asking ``length <= some limit`` of the example length: that question
is recorded as a guard and narrows the shape environment's range (e.g. a waveform
exported for 16,000-160,000 samples ends up planned for at most 20,480). The
program then refuses any longer input at run time. The exported program's
``range_constraints`` still hold the range the user asked for, so this pass,
given to ``to_executorch`` in place of ExecuTorch's ``ConstraintBasedSymShapeEvalPass``,
bounds each shape with those constraints first::

    before                                   after
    x: f32[1, s0]   s0 in [16000, 20480]     x: f32[1, s0]   s0 in [16000, 160000]
    planned: f32[1, 20480]                   planned: f32[1, 160000]

A symbol the constraints do not name keeps the shape environment's range. On a
program without dynamic shapes the pass changes nothing.
"""

from __future__ import annotations

from typing import Mapping

import sympy
import torch
from executorch.exir.sym_util import eval_upper_bound
from executorch.exir.tensor import TensorSpec
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.utils import _pytree as pytree
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy


class PlanForExportRangePass(PassBase):
    def __init__(self, range_constraints: Mapping[sympy.Expr, ValueRanges]) -> None:
        super().__init__()
        self.symbol_ranges = {k: v for k, v in range_constraints.items() if isinstance(k, sympy.Symbol)}

    def upper_bound(self, size: int | torch.SymInt) -> int:
        if isinstance(size, int):
            return size
        node = size.node
        ranges = {**node.shape_env.var_to_range, **self.symbol_ranges}
        upper = bound_sympy(node.expr, ranges).upper
        if isinstance(upper, sympy.Integer):
            return int(upper)
        return eval_upper_bound(size)  # unbounded: ExecuTorch's own rule (the example's size)

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for module in graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                for spec in pytree.tree_flatten(node.meta.get("spec", []))[0]:
                    if isinstance(spec, TensorSpec):
                        spec.shape = [self.upper_bound(s) for s in spec.shape]
                        spec.stride = [self.upper_bound(s) for s in spec.stride]
        return PassResult(graph_module, True)

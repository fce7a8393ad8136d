"""Store a value computed from parameters alone, read by anything but a GEMM's weight or bias, as a constant.

Some models compute a tensor from their parameters on every call, for an
elementwise op rather than a GEMM: BigVGAN's Snake activations take
``exp(alpha)`` of log-scale parameters and ``1 / (exp(beta) + 1e-9)``, 109 times
in a published generator. In the program such a computation is nine ops per
activation on ``[1, C, 1]`` tensors, each a node the delegate runs on every
call; its ``reciprocal`` has no XNNPACK config in ExecuTorch 1.5.1 at all, so it
runs on the portable kernels and cuts the delegate. This pass computes the value
once, with PyTorch on the program's parameters (so exactly as eager computes
it), and stores it as a lifted constant::

    before                                                     after

    beta ── unsqueeze ── unsqueeze ── exp ── add(1e-9) ──       beta_value [1, C, 1] (constant)
        ── reciprocal ── mul(1.0) ──┐                                      │
                                x ──┴─ mul ──                          x ──┴─ mul ──

The sources the computation alone read are dropped from the program.

The pass leaves a computation as it is, and does nothing on a program without
one, when

- it computes a GEMM's weight or bias, or something that computation also reads
  (:mod:`fold_computed_gemm_weights` folds those, checks that the GEMM is
  delegated, and reports each fold);
- it reads a user input, a size, a buffer the method mutates or a parameter
  tagged for a ``.ptd`` file, or an op in it is impure (random, in place);
- its value is larger than the sources it reads (an ``expand``): the program
  would grow.
"""

from __future__ import annotations

import logging

import torch
from torch.fx.passes.infra.pass_base import PassResult

from audiodeploy.lowering.passes._gemms import static_slots
from audiodeploy.lowering.passes._graph import (
    ExportedProgramPass,
    add_constant,
    ancestors,
    constant_sources,
    drop_constant,
    is_pure,
    replace_node,
    rewrite_done,
)

log = logging.getLogger(__name__)


class ParameterOnlyValuesAsConstantsPass(ExportedProgramPass):
    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        ep = self.exported_program
        graph = graph_module.graph
        sources = constant_sources(ep)
        computed = self._computed_from(sources)
        # GEMM weights and biases, and all they are computed from, are the GEMM fold's business.
        gemm_arguments = [
            arg
            for node in graph.nodes
            for index, arg in enumerate(node.args)
            if index in static_slots(node) and arg in computed
        ]
        reserved = ancestors(gemm_arguments, expand=computed.__contains__)
        roots = [
            node
            for node in graph.nodes
            if node in computed and node not in reserved and any(user not in computed for user in node.users)
        ]
        modified = False
        for root in reversed(roots):  # downstream first: a root another one reads is still computed
            computation = ancestors([root], expand=computed.__contains__)
            read = [node for node in computation if node in sources]
            value = _evaluate(root, computation, sources)
            if value is None:
                log.debug("%s left as computed: its value is not one tensor", root.name)
                continue
            freed = sum(sources[node].numel() * sources[node].element_size() for node in read)
            if value.numel() * value.element_size() > freed:
                log.debug("%s left as computed: its value is larger than the %d bytes it reads", root.name, freed)
                continue
            replace_node(ep, root, add_constant(ep, graph, f"{root.name}_value", value))
            modified = True
        if modified:
            rewrite_done(ep)
            for node in list(sources):
                if not node.users:
                    drop_constant(ep, node)
            graph_module.recompile()
        return PassResult(graph_module, modified)

    def _computed_from(self, sources: dict[torch.fx.Node, torch.Tensor]) -> set[torch.fx.Node]:
        """The pure ops whose every input is a source or another such op (the sources themselves excluded)."""
        computed: set[torch.fx.Node] = set()
        for node in self.exported_program.graph.nodes:
            if node.op != "call_function" or not is_pure(node.target) or not node.all_input_nodes:
                continue
            if all(arg in sources or arg in computed for arg in node.all_input_nodes):
                computed.add(node)
        return computed


def _evaluate(
    root: torch.fx.Node, computation: set[torch.fx.Node], sources: dict[torch.fx.Node, torch.Tensor]
) -> torch.Tensor | None:
    """The value of ``root``, computed in graph order from the real source tensors."""
    order = {node: index for index, node in enumerate(root.graph.nodes)}
    values: dict[torch.fx.Node, object] = {node: sources[node] for node in computation if node in sources}
    with torch.no_grad():
        for node in sorted(computation - set(sources), key=order.__getitem__):
            args, kwargs = torch.fx.map_arg((node.args, node.kwargs), values.__getitem__)
            values[node] = node.target(*args, **kwargs)
    value = values[root]
    return value if isinstance(value, torch.Tensor) else None

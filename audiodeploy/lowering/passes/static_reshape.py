"""Write each reshape with integer sizes and at most one ``-1``, the form XNNPACK delegates.

With a dynamic input length, ``torch.export`` records reshapes with the length
read from a tensor (``sym_size``) in their sizes, e.g. splitting attention heads::

    before

    n = sym_size(q, 1)
    q [1, T, C] ── view(q, [1, n, -1, 64]) ──

    after

    q [1, T, C] ── view(q, [1, -1, 12, 64]) ──

ExecuTorch 1.5.1's XNNPACK partitioner declines a ``view_copy`` whose sizes are
symbolic ("invalid dtype": the size is not a tensor), and an ``unsqueeze_copy`` or
``squeeze_copy`` anywhere but on the last dimension, so each of them cuts the
delegate. XNNPACK's static reshape infers one size at run time: this pass rewrites
``view``, ``reshape``, ``_unsafe_view``, ``unsqueeze`` and ``squeeze`` whose output
has at most one size that depends on the input length as a ``view`` (after a
contiguous ``clone`` when the input is not contiguous) with every fixed size
written out and ``-1`` for the dynamic one, and drops a reshape to the shape its
input already has (e.g. WavLM's ``view(bias, [-1, n, n])`` of an ``[H, n, n]``
bias, which no single inferred size could express). The output shape is unchanged;
the ``sym_size`` reads that only fed reshapes disappear.

The pass leaves a reshape as it is when its output has two or more sizes that
depend on the input length (no single inferred size can express it), and does
nothing on a program whose reshapes all take integer sizes and that has no
``squeeze`` or ``unsqueeze``.
"""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassResult

from audiodeploy.lowering.passes._graph import ExportedProgramPass, insert_reshape, replace_node, rewrite_done, static_view_sizes, value

aten = torch.ops.aten

_VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default}
_RESHAPES = _VIEWS | {
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
}


class StaticReshapePass(ExportedProgramPass):
    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in _RESHAPES:
                continue
            source, out = value(node.args[0]), value(node)
            if source is None or out is None:
                continue
            if list(source.shape) == list(out.shape):
                replace_node(self.exported_program, node, node.args[0])  # a reshape to the same shape
                modified = True
                continue
            is_view = node.target in _VIEWS
            if is_view and all(isinstance(s, int) for s in node.args[1]):
                continue  # already integer sizes
            sizes = static_view_sizes(out.shape)
            if sizes is None:
                continue
            with graph.inserting_before(node):
                replacement = insert_reshape(graph, node.args[0], sizes, origin=node)
            replace_node(self.exported_program, node, replacement)
            modified = True
        if modified:
            rewrite_done(self.exported_program)
        return PassResult(graph_module, modified)

"""Drop a convolution's last outputs by padding less on the right instead of slicing them off.

wav2vec2's positional convolution has an even kernel (128) and pads 64 on both
sides, so it produces one frame too many, which the model slices off. With a
dynamic input length that ``slice_copy`` cuts the delegate: ExecuTorch 1.5.1's
XNNPACK partitioner declines a slice whose input or output size is symbolic.
For a convolution with stride 1, dropping its last ``k`` outputs is the same as
padding ``k`` fewer inputs on the right, and a constant pad is delegated::

    before                                            after

    x ── conv1d(padding=p) ── slice(-1, 0, -k) ──     x ── constant_pad_nd([p, p - k]) ── conv1d(padding=0) ──

The pass leaves a slice as it is, and does nothing on a program without this
pattern, unless it slices the last dimension of a 1-D convolution with stride 1
that has no other user, from the start with step 1 to ``-k``, and the convolution
pads ``p >= k`` on each side.
"""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassResult

from audiodeploy.lowering.passes._graph import (
    ExportedProgramPass,
    argument,
    conv1d_geometry,
    insert_op,
    replace_node,
    rewrite_done,
    value,
)

aten = torch.ops.aten


class ConvTailSliceAsPaddingPass(ExportedProgramPass):
    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target != aten.slice.Tensor:
                continue
            conv = node.args[0]
            dropped = _dropped_tail(node)
            padding = _symmetric_padding(conv) if dropped else None
            if padding is None or padding < dropped:
                continue
            x, weight = conv.args[:2]
            bias = argument(conv, 2, "bias")
            dilation = argument(conv, 5, "dilation", [1])
            groups = argument(conv, 6, "groups", 1)
            with graph.inserting_before(conv):
                pads = [padding, padding - dropped]
                padded = insert_op(graph, aten.constant_pad_nd.default, (x, pads, 0.0), origin=conv)
                replacement = insert_op(
                    graph, aten.conv1d.default, (padded, weight, bias, [1], [0], dilation, groups), origin=conv
                )
            replace_node(self.exported_program, node, replacement)
            graph.erase_node(conv)
            modified = True
        if modified:
            rewrite_done(self.exported_program)
        return PassResult(graph_module, modified)


def _dropped_tail(node: torch.fx.Node) -> int | None:
    """``k`` when ``node`` is ``slice(x, last dim, 0, -k, 1)``, else None."""
    out = value(node)
    if out is None:
        return None
    dim = argument(node, 1, "dim", 0) % out.dim()
    start, end, step = argument(node, 2, "start"), argument(node, 3, "end"), argument(node, 4, "step", 1)
    if dim != out.dim() - 1 or start not in (None, 0) or step != 1 or not isinstance(end, int) or end >= 0:
        return None
    return -end


def _symmetric_padding(conv: torch.fx.Node) -> int | None:
    """The padding of a stride-1 ``conv1d`` used only by the slice, else None."""
    if not isinstance(conv, torch.fx.Node) or conv.target != aten.conv1d.default or len(conv.users) != 1:
        return None
    stride, padding, _, _ = conv1d_geometry(conv)
    if stride != 1 or not isinstance(padding, int):
        return None
    return padding

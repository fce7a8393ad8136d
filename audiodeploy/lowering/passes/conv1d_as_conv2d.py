"""Write a padded 1-D convolution on a constant weight as a 2-D convolution of one row, for XNNPACK's dynamic int8.

ExecuTorch 1.5.1's ``XNNPACKQuantizer`` annotates a dynamically quantized
convolution only when its weight is 4-D, and its partitioner takes only 2-D
ones; XNNPACK itself runs every 1-D convolution as a 2-D one of height one
anyway (its ``Conv1dUnsqueezePass``). So a 1-D convolution left for dynamic int8
stayed fp32 and kept its fp32 weight in the program: wav2vec2's grouped
positional convolution is 4.7 M parameters, 5% of a base model and 16% of its
int8 program. The pass makes the quantizer see the 2-D convolution XNNPACK runs::

    before

    x [N, C, T] ─ (constant_pad_nd([a, b], 0)) ─ conv1d(W [Co, C/g, k], b, stride s, padding p, dilation d, groups g) ─ y

    after

    x ── view [N, C, 1, T] ─┐
      zeros [N, C, 1, p + a] ┼─ cat(3) ── conv2d(W' [Co, C/g, 1, k], b, (1, s), 0, (1, d), g) ── view [N, Co, To] ── y
      zeros [N, C, 1, p + b] ┘

The padding (the convolution's own and a zero ``constant_pad_nd`` that only it
reads, which is how :mod:`conv_tail_slice_as_padding` leaves the positional
convolution) becomes a concatenation with zeros, for a reason of 1.5.1's layout
pass: to give a dynamically quantized convolution its channels-last input,
``ChannelsLastTaggedReshapePass`` follows first arguments up from the quantized
input until one is not a node and converts *that* tensor. A concatenation stops
the walk at the 4-D input; a view would let it climb to a 3-D tensor (or a bias)
and fail with "required rank 4 tensor to use channels_last format". ``W'`` is a
new constant; ``W`` is dropped when nothing else reads it. The result equals
the convolution's.

It runs only before dynamic int8 (see :mod:`audiodeploy.lowering.quantize`), on
the folded program. It leaves a convolution as it is, and does nothing on a
program without one, unless it is a float32 ``conv1d`` of a ``[N, C, T]`` input
with fixed ``N`` and ``C``, whose weight is a constant (a folded or plain
parameter), that pads by a number on at least one side and is not depthwise
(XNNPACK's dynamic int8 declines those as 2-D ones too).
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    arguments,
    constant_sources,
    conv1d_geometry,
    convolves_float32_signal,
    insert_op,
    insert_reshape,
    is_static,
    static_view_sizes,
    tensor_of,
)

aten = torch.ops.aten


class Conv1dAsConv2dPass(NodeRewritePass):
    targets = frozenset({aten.conv1d.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        if not convolves_float32_signal(node):
            return Skip("not a float32 convolution of a [N, C, T] input")
        x, weight = node.args[:2]
        x_value, out_value = tensor_of(x), tensor_of(node)
        constant = constant_sources(self.exported_program).get(weight)
        if constant is None:
            return Skip("its weight is not a constant (a computed weight is folded first)")
        stride, padding, dilation, groups = conv1d_geometry(node)
        if not isinstance(padding, int):
            return Skip(f"its padding {padding!r} is not a number")
        if groups == x_value.shape[1] and constant.shape[0] % groups == 0:
            return Skip("depthwise: XNNPACK's dynamic int8 declines it as a 2-D convolution too")
        unpadded, (left, right) = _zero_padded_source(x)
        left, right = left + padding, right + padding
        if not left and not right:
            return Skip("it pads nothing: without a concatenation 1.5.1's layout pass fails on its input")
        batch, channels = tensor_of(unpadded).shape[:2]
        rows_out = static_view_sizes(out_value.shape)
        if not (is_static(batch) and is_static(channels)) or rows_out is None:
            return Skip("its batch or channel count is symbolic")
        rows = [insert_reshape(self.graph, unpadded, [int(batch), int(channels), 1, -1], origin=node)]
        for side, amount in (("left", left), ("right", right)):
            if amount:
                zeros = torch.zeros(int(batch), int(channels), 1, amount)
                piece = add_constant(self.exported_program, self.graph, f"{node.name}_padding_{side}", zeros)
                rows.insert(0 if side == "left" else len(rows), piece)
        padded = insert_op(self.graph, aten.cat.default, (rows, 3), origin=node)
        weight_2d = add_constant(self.exported_program, self.graph, f"{weight.name}_as_2d", constant.unsqueeze(2))
        self.release_constant(weight)
        conv = insert_op(
            self.graph,
            aten.conv2d.default,
            (padded, weight_2d, arguments(node)["bias"], [1, stride], [0, 0], [1, dilation], groups),
            origin=node,
        )
        return insert_reshape(self.graph, conv, rows_out, origin=node)


def _zero_padded_source(x: torch.fx.Node) -> tuple[torch.fx.Node, tuple[int, int]]:
    """``(source, (a, b))`` when ``x`` is ``constant_pad_nd(source, [a, b], 0)`` read only by the convolution,
    else ``(x, (0, 0))``."""
    if x.op == "call_function" and x.target == aten.constant_pad_nd.default and len(x.users) == 1:
        given = arguments(x)
        pad = given["pad"]
        if len(pad) == 2 and all(isinstance(p, int) and p >= 0 for p in pad) and given["value"] == 0:
            return given["input"], (pad[0], pad[1])
    return x, (0, 0)
